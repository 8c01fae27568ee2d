//! Opening a registry file: created private, checked to be a database, switched to WAL,
//! migrated and repaired when this process may write it, opened read-only when it may
//! not; and what an open that fails says.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::time::Duration;

use fleet_registry::{OpenMode, StoreError, StoreErrorKind};
use rusqlite::{Connection, OpenFlags};

use crate::{BUSY_TIMEOUT, SCHEMA_VERSION, SqliteStore, map_error, migrations};

/// The device and inode `path` names now.
pub(crate) fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

fn unavailable(path: &Path, e: impl std::fmt::Display) -> StoreError {
    StoreError::new(StoreErrorKind::Unavailable, format!("cannot open registry {}: {e}", path.display()))
}

impl SqliteStore {
    /// Opens (and, if `mode` allows, creates) the registry at `path`, then migrates it.
    pub fn open(path: &Path, mode: OpenMode) -> Result<Self, StoreError> {
        match (path.try_exists(), mode) {
            (Ok(true), _) => {}
            (Ok(false), OpenMode::MustExist) => {
                return Err(StoreError::new(
                    StoreErrorKind::Missing,
                    format!("registry {} does not exist (run `fleetctl registry init`)", path.display()),
                ));
            }
            (Ok(false), OpenMode::CreateIfMissing) => create_private_file(path)?,
            (Err(e), _) => return Err(unavailable(path, e)),
        }
        if path.is_dir() {
            return Err(unavailable(path, "it is a directory"));
        }
        // While other processes are creating or migrating the same new file, SQLite can
        // report it locked without consulting the busy handler; such an open is retried
        // until the busy timeout.
        let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
        loop {
            match Self::open_existing(path, mode) {
                Err(e) if e.kind() == StoreErrorKind::Busy && std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) if e.kind() == StoreErrorKind::Busy => return Err(unavailable(path, e)),
                other => return other,
            }
        }
    }

    fn open_existing(path: &Path, mode: OpenMode) -> Result<Self, StoreError> {
        if mode == OpenMode::MustExist && !writable(path) {
            return Self::open_read_only(path);
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(path, flags).map_err(|e| unavailable(path, e))?;
        // A file with no schema yet (an empty file, say) is not a registry to read: a
        // reader must neither report an empty, safe fleet nor write a schema into it.
        if mode == OpenMode::MustExist {
            let version: i64 = conn
                .query_row("PRAGMA user_version", [], |r| r.get(0))
                .map_err(|e| map_open_error(path, e))?;
            if version == 0 {
                return Err(StoreError::new(
                    StoreErrorKind::Unavailable,
                    format!(
                        "{} is not an initialized registry (run `fleetctl registry init`)",
                        path.display()
                    ),
                ));
            }
        }
        configure(&conn).map_err(|e| map_open_error(path, e))?;
        migrations::check_or_create(&mut conn)?;
        // `registry init` (and every opener that may create the file) builds again what
        // was removed by hand and can be rebuilt; every opener refuses a file that lacks
        // part of its schema, naming it.
        if mode == OpenMode::CreateIfMissing {
            for built in migrations::repair(&mut conn)? {
                tracing::warn!(registry = %path.display(), "rebuilt {built}, which was missing");
            }
        }
        migrations::verify(&conn, path)?;
        Ok(Self { conn, file: file_identity(path), log: None, path: path.to_owned() })
    }

    /// Opens a registry this process may read but not write (a file of another user's, a
    /// read-only mount): nothing is migrated, switched or repaired, and every write is
    /// refused by SQLite. SQLite reads a WAL file it cannot write only through its `-wal`
    /// and `-shm` files, which every writer keeps in place (`PERSIST_WAL`).
    fn open_read_only(path: &Path) -> Result<Self, StoreError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| unavailable(path, e))?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(|e| map_open_error(path, e))?;
        let version: i64 = match conn.query_row("PRAGMA user_version", [], |r| r.get(0)) {
            Ok(version) => version,
            Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::ReadOnly) => {
                return Err(unavailable(
                    path,
                    "it is read-only to this user and its -wal and -shm files are missing or unreadable \
                     (SQLite needs them to read a file it cannot write): open it once as a user who may \
                     write it (`fleetctl registry init`), which keeps them, and give them the file's mode",
                ));
            }
            Err(e) => return Err(map_open_error(path, e)),
        };
        if version == 0 {
            return Err(unavailable(
                path,
                "it is not an initialized registry (run `fleetctl registry init`)",
            ));
        }
        if version > SCHEMA_VERSION {
            migrations::usable_newer(&conn, version)?;
        } else if version < SCHEMA_VERSION {
            return Err(migrations::older(&conn, version));
        }
        migrations::verify(&conn, path)?;
        Ok(Self { conn, file: file_identity(path), log: None, path: path.to_owned() })
    }

    /// `fleetctl registry upgrade`: brings the registry at `path` to this build's schema,
    /// keeping a copy of the file as it was beside it (`PATH.schema-vN.backup`) unless
    /// `backup` is false; with `dry_run` it only says what it would do. The one way a
    /// registry's schema changes: every other opener refuses an older schema.
    pub fn upgrade(
        path: &Path,
        dry_run: bool,
        backup: bool,
    ) -> Result<fleet_registry::SchemaUpgrade, StoreError> {
        if !path.try_exists().map_err(|e| unavailable(path, e))? {
            return Err(StoreError::new(
                StoreErrorKind::Missing,
                format!("registry {} does not exist (run `fleetctl registry init`)", path.display()),
            ));
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(path, flags).map_err(|e| unavailable(path, e))?;
        configure(&conn).map_err(|e| map_open_error(path, e))?;
        let report = migrations::upgrade(&mut conn, dry_run, backup)?;
        if !dry_run {
            migrations::verify(&conn, path)?;
        }
        Ok(report)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `PRAGMA integrity_check`; `Ok` when SQLite answers `ok`.
    pub fn integrity_check(&self) -> Result<(), StoreError> {
        let answer: String =
            self.conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).map_err(map_error)?;
        if answer == "ok" { Ok(()) } else { Err(StoreError::corrupt(format!("integrity check: {answer}"))) }
    }

    /// The connection, for backend-specific algorithms in this crate's dependants that
    /// must run SQL of their own (benchmarks compare against it).
    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}

fn create_private_file(path: &Path) -> Result<(), StoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| unavailable(path, e))?;
    }
    match OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
        Ok(_) => Ok(()),
        // Another process created it first: theirs is as good as ours.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(unavailable(path, e)),
    }
}

/// Whether this process may write the file at `path` (its mode, its owner, the mount).
fn writable(path: &Path) -> bool {
    use nix::unistd::{AccessFlags, access};
    !matches!(access(path, AccessFlags::W_OK), Err(nix::errno::Errno::EACCES | nix::errno::Errno::EROFS))
}

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // Reading the schema first proves the file is a database before anything is written.
    conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get::<_, i64>(0))?;
    enable_wal(conn)?;
    // The `-wal` and `-shm` files stay when the last connection closes, so a user who may
    // only read the registry can still open it (SQLite cannot create them for that user);
    // the last to close empties the log (see `Drop`).
    conn.file_control(Some("main"), rusqlite::FileControl::PersistWal(&mut 1))?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(())
}

/// Switches the file to WAL. Switching needs a moment of exclusive access, which SQLite
/// does not wait for through the busy handler: when several processes open a new file at
/// once, all but one see the old mode returned. WAL is persistent, so each retries until
/// the file reports WAL, whoever switched it.
fn enable_wal(conn: &Connection) -> rusqlite::Result<()> {
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        let attempt = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0));
        match attempt {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
            Ok(_) | Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(_) => return Err(rusqlite::Error::InvalidQuery),
            Err(e) => return Err(e),
        }
    }
}

fn map_open_error(path: &Path, e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt) => {
            StoreError::corrupt(format!("registry {} is not a valid SQLite database", path.display()))
        }
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => map_error(e),
        _ => match disk_trouble(path) {
            Some(why) => unavailable(path, format!("{e}: {why}")),
            None => unavailable(path, e),
        },
    }
}

/// What SQLite calls a "disk I/O error" is often a full or read-only filesystem; say
/// which, when the filesystem under the registry shows it.
pub(crate) fn disk_trouble(path: &Path) -> Option<&'static str> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let fs = nix::sys::statvfs::statvfs(dir).ok()?;
    if fs.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY) {
        Some("the filesystem is read-only")
    } else if fs.blocks_available() == 0 {
        Some("the disk is full")
    } else {
        None
    }
}
