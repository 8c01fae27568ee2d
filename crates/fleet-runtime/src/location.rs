//! Where the registry lives (`--registry` / `FLEET_REGISTRY`) and opening it on the
//! backend that location names.

use std::fmt;
use std::path::PathBuf;

use fleet_identity::Timestamp;
use fleet_registry::OpenMode;
use fleet_registry::{Registry, Store, StoreError, Tx, WorkerCredential};
#[cfg(feature = "postgres")]
use registry_postgres::PostgresStore;
use registry_sqlite::SqliteStore;

/// Why a registry location was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocationError {
    /// Neither a location nor a state directory to put the default in.
    #[error("no registry location: pass --registry, set FLEET_REGISTRY, or set HOME")]
    NoDefault,
    /// An empty location.
    #[error("registry location is empty")]
    Empty,
    /// A URL of a kind of database the registry does not live in.
    #[error(
        "registry location {0:?} names an unsupported scheme: use a file path, sqlite://PATH or postgres://…"
    )]
    UnsupportedScheme(String),
}

/// A registry location: a SQLite file, or a PostgreSQL URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryLocation {
    /// A SQLite database file.
    Sqlite(PathBuf),
    /// A PostgreSQL connection URL.
    Postgres(String),
}

impl RegistryLocation {
    /// Reads `PATH`, `sqlite://PATH` or `postgres://…`.
    pub fn parse(text: &str) -> Result<Self, LocationError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(LocationError::Empty);
        }
        // Schemes are case-insensitive (RFC 3986); anything else that looks like a URL is
        // refused rather than taken for a file name.
        if let Some((scheme, rest)) = text.split_once("://") {
            return match scheme.to_ascii_lowercase().as_str() {
                "postgres" | "postgresql" => Ok(Self::Postgres(format!("postgres://{rest}"))),
                "sqlite" if !rest.is_empty() => Ok(Self::Sqlite(PathBuf::from(rest))),
                "sqlite" => Err(LocationError::Empty),
                _ => Err(LocationError::UnsupportedScheme(scheme.to_owned())),
            };
        }
        // A scheme-like prefix without `//` (`postgres:/db`, `sqlite:reg`) is a URL typed
        // wrong, not a file name: refused, where it would have created `./postgres:/db`.
        // A path that starts with `/` or `.` is a path whatever it holds.
        if !text.starts_with(['/', '.'])
            && let Some((scheme, _)) = text.split_once(':')
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
        {
            return Err(LocationError::UnsupportedScheme(scheme.to_owned()));
        }
        Ok(Self::Sqlite(PathBuf::from(text)))
    }

    /// The location given, or the default file under the user's state directory
    /// (`$XDG_STATE_HOME/fleetward/registry.sqlite3`, else `~/.local/state/…`).
    pub fn resolve(given: Option<&str>) -> Result<Self, LocationError> {
        if let Some(text) = given {
            return Self::parse(text);
        }
        Self::default_in(std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME"))
    }

    /// The default location given `XDG_STATE_HOME` and `HOME`. The XDG Base Directory
    /// specification says a relative path in an XDG variable is invalid and must be
    /// ignored, so it is: a relative one would name a different file in every directory.
    fn default_in(
        xdg_state_home: Option<std::ffi::OsString>,
        home: Option<std::ffi::OsString>,
    ) -> Result<Self, LocationError> {
        let state = xdg_state_home
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| home.map(PathBuf::from).filter(|h| h.is_absolute()).map(|h| h.join(".local/state")))
            .ok_or(LocationError::NoDefault)?;
        Ok(Self::Sqlite(state.join("fleetward").join("registry.sqlite3")))
    }
}

impl RegistryLocation {
    /// The same location with a relative SQLite path made absolute, so processes that
    /// start in another directory find the same file.
    pub fn absolute(&self) -> Self {
        match self {
            Self::Sqlite(path) => Self::Sqlite(std::path::absolute(path).unwrap_or_else(|_| path.clone())),
            other => other.clone(),
        }
    }

    /// The location as `FLEET_REGISTRY` takes it (URLs keep their credentials: this
    /// value goes into worker environments, not onto screens).
    pub fn as_config_value(&self) -> String {
        match self {
            Self::Sqlite(path) => path.display().to_string(),
            Self::Postgres(url) => url.clone(),
        }
    }
}

impl fmt::Display for RegistryLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sqlite(path) => write!(f, "{}", path.display()),
            // Never print credentials a URL may carry: not the user-info before `@`, and
            // not the query string (where `password=` may sit).
            Self::Postgres(url) => {
                let rest = url.strip_prefix("postgres://").unwrap_or(url);
                let (rest, query) = match rest.split_once('?') {
                    Some((rest, _)) => (rest, "?…"),
                    None => (rest, ""),
                };
                match rest.rsplit_once('@') {
                    Some((_, host)) => write!(f, "postgres://…@{host}{query}"),
                    None => write!(f, "postgres://{rest}{query}"),
                }
            }
        }
    }
}

/// Any registry backend, chosen by location at run time.
#[derive(Debug)]
pub enum AnyStore {
    /// The embedded SQLite store.
    Sqlite(SqliteStore),
    /// A PostgreSQL database, for fleets that span hosts (the `postgres` feature).
    #[cfg(feature = "postgres")]
    Postgres(PostgresStore),
}

/// Creates the registry at `location`, or brings an existing one up to date: one logged
/// event, as every write to the registry is.
pub fn init_registry(location: &RegistryLocation) -> Result<(), StoreError> {
    open_registry(location, OpenMode::CreateIfMissing)?;
    tracing::info!(registry = %location, schema_version = fleet_registry::SCHEMA_VERSION, outcome = "ready", "registry init");
    Ok(())
}

impl RegistryLocation {
    /// The schema version this build writes for a registry of this kind.
    pub fn schema_version(&self) -> i64 {
        match self {
            Self::Sqlite(_) => registry_sqlite::SCHEMA_VERSION,
            #[cfg(feature = "postgres")]
            Self::Postgres(_) => registry_postgres::SCHEMA_VERSION,
            #[cfg(not(feature = "postgres"))]
            Self::Postgres(_) => 0,
        }
    }
}

/// What `--version` prints after a binary's name: the build's version, the git revision
/// it was built from (`unknown` outside a checkout) and the registry schema versions it
/// writes (and reads: UPGRADING.md).
pub fn version_line() -> &'static str {
    static LINE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    LINE.get_or_init(|| {
        #[cfg(feature = "postgres")]
        let postgres = format!(", PostgreSQL {}", registry_postgres::SCHEMA_VERSION);
        #[cfg(not(feature = "postgres"))]
        let postgres = String::new();
        format!(
            "{} (git {}; registry schema: SQLite {}{postgres})",
            env!("CARGO_PKG_VERSION"),
            env!("FLEET_GIT_REVISION"),
            registry_sqlite::SCHEMA_VERSION
        )
    })
}

/// `fleetctl registry upgrade`: brings the registry at `location` to this build's
/// schema, keeping a copy first unless `backup` is false; with `dry_run`, only says what
/// it would do. The one call that changes an existing registry's schema.
pub fn upgrade_registry(
    location: &RegistryLocation,
    dry_run: bool,
    backup: bool,
) -> Result<fleet_registry::SchemaUpgrade, StoreError> {
    let report = match location {
        RegistryLocation::Sqlite(path) => SqliteStore::upgrade(path, dry_run, backup)?,
        #[cfg(feature = "postgres")]
        RegistryLocation::Postgres(url) => PostgresStore::upgrade(url, None, dry_run, backup)?,
        #[cfg(not(feature = "postgres"))]
        RegistryLocation::Postgres(_) => {
            return Err(StoreError::invalid(
                "this build has no PostgreSQL backend (fleet-runtime's `postgres` feature is off)",
            ));
        }
    };
    if !dry_run && report.from != report.to {
        tracing::info!(registry = %location, from = report.from, to = report.to, backup = ?report.backup, "registry upgraded");
    }
    Ok(report)
}

/// Opens the registry at `location`.
pub fn open_registry(location: &RegistryLocation, mode: OpenMode) -> Result<Registry<AnyStore>, StoreError> {
    let store = match location {
        RegistryLocation::Sqlite(path) => AnyStore::Sqlite(SqliteStore::open(path, mode)?),
        // A reachable server is a usable registry: connecting creates the schema in a
        // database that has none, and refuses an older one (see `upgrade_registry`).
        #[cfg(feature = "postgres")]
        RegistryLocation::Postgres(url) => AnyStore::Postgres(PostgresStore::connect(url)?),
        #[cfg(not(feature = "postgres"))]
        RegistryLocation::Postgres(_) => {
            return Err(StoreError::invalid(
                "this build has no PostgreSQL backend (fleet-runtime's `postgres` feature is off)",
            ));
        }
    };
    // Its lease operations come from this host and boot: a fenced one acts on nothing.
    let registry = Registry::new(store);
    Ok(match crate::process::current_host() {
        Some((host, boot)) => registry.acting_from(host, boot),
        None => registry,
    })
}

impl Store for AnyStore {
    fn write<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        E: From<StoreError>,
        F: FnOnce(&mut dyn Tx) -> Result<T, E>,
    {
        match self {
            AnyStore::Sqlite(s) => s.write(f),
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(s) => s.write(f),
        }
    }

    fn write_durable<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        E: From<StoreError>,
        F: FnOnce(&mut dyn Tx) -> Result<T, E>,
    {
        match self {
            AnyStore::Sqlite(s) => s.write_durable(f),
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(s) => s.write_durable(f),
        }
    }

    fn read<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        E: From<StoreError>,
        F: FnOnce(&mut dyn Tx) -> Result<T, E>,
    {
        match self {
            AnyStore::Sqlite(s) => s.read(f),
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(s) => s.read(f),
        }
    }

    fn set_call_deadline(&mut self, deadline: Option<std::time::Duration>) {
        match self {
            AnyStore::Sqlite(s) => s.set_call_deadline(deadline),
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(s) => s.set_call_deadline(deadline),
        }
    }

    fn after_bulk_load(&mut self) -> Result<(), StoreError> {
        match self {
            AnyStore::Sqlite(s) => s.after_bulk_load(),
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(s) => s.after_bulk_load(),
        }
    }

    fn change_marker(&mut self) -> Result<Option<u128>, StoreError> {
        match self {
            AnyStore::Sqlite(s) => s.change_marker(),
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(s) => s.change_marker(),
        }
    }

    fn check_schema(&mut self) -> Result<(), StoreError> {
        match self {
            AnyStore::Sqlite(s) => s.check_schema(),
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(s) => s.check_schema(),
        }
    }

    fn touch_heartbeat(
        &mut self,
        who: &WorkerCredential,
        now: Timestamp,
        claim: fleet_registry::Claim,
    ) -> Result<bool, StoreError> {
        match self {
            AnyStore::Sqlite(s) => s.touch_heartbeat(who, now, claim),
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(s) => s.touch_heartbeat(who, now, claim),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_name_their_backend() {
        assert_eq!(
            RegistryLocation::parse("/tmp/r.db").unwrap(),
            RegistryLocation::Sqlite("/tmp/r.db".into())
        );
        assert_eq!(
            RegistryLocation::parse("sqlite://r.db").unwrap(),
            RegistryLocation::Sqlite("r.db".into())
        );
        assert!(matches!(
            RegistryLocation::parse("postgres://u:p@h/db").unwrap(),
            RegistryLocation::Postgres(_)
        ));
        assert!(RegistryLocation::parse("  ").is_err());
        assert!(RegistryLocation::parse("sqlite://").is_err());
    }

    #[test]
    fn a_relative_xdg_state_home_is_ignored() {
        let at = |xdg: Option<&str>, home: Option<&str>| {
            RegistryLocation::default_in(xdg.map(Into::into), home.map(Into::into)).ok()
        };
        let file = |p: &str| Some(RegistryLocation::Sqlite(PathBuf::from(p)));
        assert_eq!(at(Some("/x/state"), Some("/home/u")), file("/x/state/fleetward/registry.sqlite3"));
        assert_eq!(
            at(Some("state"), Some("/home/u")),
            file("/home/u/.local/state/fleetward/registry.sqlite3")
        );
        assert_eq!(at(Some(""), Some("/home/u")), file("/home/u/.local/state/fleetward/registry.sqlite3"));
        assert_eq!(at(Some("state"), None), None);
    }

    #[test]
    fn a_postgres_url_never_prints_its_password() {
        for url in [
            "postgres://fleet:secret@db.example/fleet",
            "postgres://db.example/fleet?user=fleet&password=secret",
            "postgresql://fleet:s@cret@db.example/fleet?sslmode=disable",
        ] {
            let loc = RegistryLocation::parse(url).unwrap();
            assert!(!loc.to_string().contains("secret") && !loc.to_string().contains("cret"), "{loc}");
        }
    }

    #[test]
    fn a_scheme_typed_without_its_slashes_is_refused_not_taken_for_a_file() {
        for text in ["postgres:/bad", "postgresql:db", "sqlite:reg.sqlite3", "mysql:x"] {
            assert!(
                matches!(RegistryLocation::parse(text), Err(LocationError::UnsupportedScheme(_))),
                "{text}"
            );
        }
        for text in ["./postgres:/x", "/srv/a:b.sqlite3", "registry.sqlite3"] {
            assert!(matches!(RegistryLocation::parse(text), Ok(RegistryLocation::Sqlite(_))), "{text}");
        }
    }

    #[test]
    fn schemes_are_case_insensitive_and_unknown_ones_are_refused() {
        assert!(matches!(RegistryLocation::parse("POSTGRES://h/db").unwrap(), RegistryLocation::Postgres(_)));
        assert!(matches!(RegistryLocation::parse("SQLite://r.db").unwrap(), RegistryLocation::Sqlite(_)));
        for url in ["mysql://x", "http://h/r.db", "redis://h"] {
            let err = RegistryLocation::parse(url).unwrap_err().to_string();
            assert!(err.contains("unsupported scheme"), "{err}");
        }
    }
}
