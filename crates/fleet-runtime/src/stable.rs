//! Seed 004's "stable-runtime mode": a server mutates the registry only while it runs the
//! binary it started from. An upgrade that replaces the binary on disk leaves the old
//! process running old code beside new servers; such a process refuses to retire until
//! it is restarted.

use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;

/// The binary this process started from, as it was on disk then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StableRuntime {
    exe: PathBuf,
    file: Option<FileStamp>,
}

/// What identifies a file's content on disk without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: i64,
    mtime_nsec: i64,
}

fn stamp(path: &std::path::Path) -> Option<FileStamp> {
    std::fs::metadata(path).ok().map(|m| FileStamp {
        dev: m.dev(),
        ino: m.ino(),
        len: m.len(),
        mtime: m.mtime(),
        mtime_nsec: m.mtime_nsec(),
    })
}

/// What `/proc/self/exe` names: the path the binary was started from, with ` (deleted)`
/// appended by the kernel once that file is gone or replaced.
fn exe_link() -> std::io::Result<PathBuf> {
    std::fs::read_link("/proc/self/exe")
}

impl StableRuntime {
    /// The binary as it is now; call it when the process starts.
    pub fn capture() -> Self {
        let exe = exe_link().unwrap_or_default();
        let file = stamp(&exe);
        Self { exe, file }
    }

    /// Whether the binary on disk is still the one this process started from; the
    /// error says what changed and what to do.
    pub fn check(&self) -> Result<(), String> {
        let now = exe_link().map_err(|e| format!("cannot read this process's binary: {e}"))?;
        if now.as_os_str().as_encoded_bytes().ends_with(b" (deleted)") || now != self.exe {
            return Err(format!(
                "the binary this process runs ({}) was replaced or removed on disk since it started: restart it to \
                 run the installed version",
                self.exe.display()
            ));
        }
        if stamp(&self.exe) != self.file {
            return Err(format!(
                "the binary this process runs ({}) was changed on disk since it started: restart it to run the \
                 installed version",
                self.exe.display()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_untouched_binary_is_stable_and_a_changed_stamp_is_not() {
        let stable = StableRuntime::capture();
        assert_eq!(stable.check(), Ok(()));
        let moved = StableRuntime {
            file: stable.file.map(|f| FileStamp { mtime: f.mtime - 1, ..f }),
            ..stable.clone()
        };
        assert!(moved.check().unwrap_err().contains("changed on disk"));
        let elsewhere = StableRuntime { exe: PathBuf::from("/nonexistent/fleet-mcp"), ..stable };
        assert!(elsewhere.check().unwrap_err().contains("replaced or removed"));
    }
}
