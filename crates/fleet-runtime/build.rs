//! Records the git revision the binaries are built from, for `--version`: the commit
//! (12 hex digits), `-dirty` when the work tree had changes, or `unknown` where the
//! source is not a git checkout (a packaged crate). Rebuilt when HEAD or its branch
//! moves.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    let revision = git(&["rev-parse", "--short=12", "HEAD"]).filter(|r| !r.is_empty());
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    let text = match revision {
        Some(r) if dirty => format!("{r}-dirty"),
        Some(r) => r,
        None => "unknown".to_owned(),
    };
    println!("cargo:rustc-env=FLEET_GIT_REVISION={text}");
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{head}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
