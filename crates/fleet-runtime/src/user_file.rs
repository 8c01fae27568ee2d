//! Replacing a file in a user's tree or in a shared directory, one rule for the whole
//! project: the new content goes to a temporary file created exclusively (`O_EXCL`, a
//! random name, mode 0600) in the target's own directory, so no planted link or file is
//! ever opened; it takes the target's mode and owner, is flushed to disk, and is renamed
//! over the target in one step; on any failure it is removed. A target that is a
//! symbolic link (a dotfiles repository) is written through: the link's final target is
//! replaced and the link stays. A dangling link is refused, so no file is created where
//! a link points. Private working directories ([`private_dir`]) are likewise created
//! afresh with unpredictable names.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The mode of a file this module creates where none existed.
pub const NEW_FILE_MODE: u32 = 0o644;

/// How many links are followed before a chain is taken for a loop (Linux's own limit).
const MAX_LINKS: usize = 40;

/// Replaces the content of `path` with `bytes` atomically: readers see the old file or
/// the new one, never a mix. The file keeps its mode and owner (a new one gets
/// [`NEW_FILE_MODE`] and the caller's owner); missing parent directories are created.
///
/// # Errors
/// Any I/O failure, with the temporary file removed; a dangling or looping link at
/// `path`, or a target that is not a regular file, is refused.
pub fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let target = resolve(path)?;
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&dir)?;
    let existing = match fs::symlink_metadata(&target) {
        Ok(meta) if meta.is_file() => Some(meta),
        Ok(_) => return Err(io::Error::other(format!("{} is not a regular file", target.display()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // tempfile opens with O_CREAT | O_EXCL and a random name, mode 0600, and removes the
    // file when dropped unless it was persisted.
    let mut tmp = tempfile::Builder::new().prefix(&format!(".{name}.")).suffix(".tmp").tempfile_in(&dir)?;
    tmp.write_all(bytes)?;
    let file = tmp.as_file();
    match &existing {
        Some(meta) => {
            file.set_permissions(fs::Permissions::from_mode(meta.mode() & 0o7777))?;
            keep_owner(file, meta)?;
        }
        None => file.set_permissions(fs::Permissions::from_mode(NEW_FILE_MODE))?,
    }
    file.sync_all()?;
    tmp.persist(&target).map_err(|e| e.error)?;
    // The rename is durable once the directory is.
    fs::File::open(&dir)?.sync_all()
}

/// An exclusive lock on the directory of the file `path` finally names (through its
/// links), held while a read, edit and [`replace`] of that file run: two editors in
/// this project take turns, so neither loses the other's update. Released when dropped.
/// The lock is advisory (`flock`): other programs that edit the file do not take it.
#[derive(Debug)]
pub struct EditLock {
    _dir: nix::fcntl::Flock<fs::File>,
    target: PathBuf,
}

impl EditLock {
    /// Waits for and takes the lock for `path`, creating its directory when missing.
    ///
    /// # Errors
    /// When the directory cannot be created or opened, or `path` is a dangling or
    /// looping link.
    pub fn take(path: &Path) -> io::Result<Self> {
        let target = resolve(path)?;
        let dir = match target.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        fs::create_dir_all(&dir)?;
        let handle = fs::File::open(&dir)?;
        let lock = nix::fcntl::Flock::lock(handle, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, errno)| io::Error::from(errno))?;
        Ok(Self { _dir: lock, target })
    }

    /// The file the lock is for: `path`'s links followed to their end.
    pub fn target(&self) -> &Path {
        &self.target
    }
}

/// Where `path` finally points, its directories' links resolved too: the file a write
/// through `path` would change. A missing file resolves within its (existing) directory.
///
/// # Errors
/// A dangling or looping link, or a directory that cannot be resolved.
pub fn final_target(path: &Path) -> io::Result<PathBuf> {
    let target = resolve(path)?;
    let name = target.file_name().map(std::ffi::OsStr::to_os_string);
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // The nearest directory that exists decides where the file would land.
    let mut existing = dir.as_path();
    let mut rest = Vec::new();
    while !existing.exists() {
        rest.push(existing.file_name().map(std::ffi::OsStr::to_os_string).unwrap_or_default());
        existing = existing.parent().unwrap_or(Path::new("."));
    }
    let mut out = fs::canonicalize(if existing.as_os_str().is_empty() { Path::new(".") } else { existing })?;
    out.extend(rest.iter().rev());
    if let Some(name) = name {
        out.push(name);
    }
    Ok(out)
}

/// Reads a config file to edit: its text, empty when it does not exist, refused past
/// `max_bytes`.
///
/// # Errors
/// A file that cannot be read, is not UTF-8, or is larger than `max_bytes`.
pub fn read_for_edit(path: &Path, max_bytes: u64) -> Result<String, String> {
    use std::io::Read as _;
    let shown = path.display();
    let file = match fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(String::new()),
        Err(e) => return Err(format!("cannot read {shown}: {e}")),
    };
    let mut text = String::new();
    file.take(max_bytes.saturating_add(1))
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    if text.len() as u64 > max_bytes {
        return Err(format!("{shown} is larger than {max_bytes} bytes; refusing to edit it"));
    }
    Ok(text)
}

/// Reads a file that grants authority (profiles, a connector policy): without blocking
/// (a FIFO or a device given in its place is refused, not waited on), at most
/// `max_bytes`, and only if it is a regular file owned by this user and writable by no
/// one else. The message names the file and what was wrong with it.
///
/// # Errors
/// A one-line message.
pub fn read_trusted(path: &Path, max_bytes: u64) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let shown = path.display();
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("cannot read {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{shown} is not a regular file; refusing it"));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(format!(
            "{shown} is owned by uid {}, not by this user (uid {me}); refusing it",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{shown} is writable by others (mode {:o}); refusing it: chmod go-w {shown}",
            meta.mode() & 0o777
        ));
    }
    let mut text = String::new();
    file.take(max_bytes).read_to_string(&mut text).map_err(|e| format!("cannot read {shown}: {e}"))?;
    Ok(text)
}

/// A new private directory under the system's temporary directory: mode 0700, a name
/// that starts with `prefix` and ends in random characters, created afresh (never one
/// that already exists, which another user may have planted). Removed when dropped.
///
/// # Errors
/// When it cannot be created.
pub fn private_dir(prefix: &str) -> io::Result<tempfile::TempDir> {
    tempfile::Builder::new().prefix(prefix).permissions(fs::Permissions::from_mode(0o700)).tempdir()
}

/// `path`, or the file its chain of symbolic links ends at.
fn resolve(path: &Path) -> io::Result<PathBuf> {
    let mut current = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let next = fs::read_link(&current)?;
                current = match current.parent() {
                    Some(dir) if next.is_relative() => dir.join(next),
                    _ => next,
                };
            }
            Ok(_) => return Ok(current),
            Err(e) if e.kind() == io::ErrorKind::NotFound && current != path => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{} is a link to {}, which does not exist", path.display(), current.display()),
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(current),
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other(format!("{} is a chain of more than {MAX_LINKS} links", path.display())))
}

/// Gives `file` the owner and group of the file it replaces (root editing a user's
/// config leaves it the user's). Only a privileged process can, and only it needs to.
fn keep_owner(file: &fs::File, meta: &fs::Metadata) -> io::Result<()> {
    let own = file.metadata()?;
    if (own.uid(), own.gid()) == (meta.uid(), meta.gid()) {
        return Ok(());
    }
    std::os::unix::fs::fchown(file, Some(meta.uid()), Some(meta.gid()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_file_is_created_with_the_default_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/config.json");
        replace(&path, b"{}").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"{}");
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, NEW_FILE_MODE);
        assert_eq!(fs::read_dir(path.parent().unwrap()).unwrap().count(), 1, "no temporary file left");
    }

    #[test]
    fn a_dangling_link_is_refused_and_nothing_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), &path).unwrap();
        let err = replace(&path, b"{}").unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
        assert!(!dir.path().join("elsewhere").exists());
    }

    #[test]
    fn a_link_loop_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::os::unix::fs::symlink(&b, &a).unwrap();
        std::os::unix::fs::symlink(&a, &b).unwrap();
        assert!(replace(&a, b"{}").is_err());
    }

    #[test]
    fn a_directory_is_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let err = replace(dir.path(), b"{}").unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
}
