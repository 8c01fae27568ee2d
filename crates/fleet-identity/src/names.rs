//! Newtypes for the identities of the fleet, each validated when it is constructed.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why an identity string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityError {
    /// The value was empty.
    #[error("{kind} is empty")]
    Empty {
        /// Which identity was being built.
        kind: &'static str,
    },
    /// The value was longer than the identity allows.
    #[error("{kind} is longer than {max} characters")]
    TooLong {
        /// Which identity was being built.
        kind: &'static str,
        /// The longest value allowed.
        max: usize,
    },
    /// The value did not have the identity's shape.
    #[error("{kind} {value:?} is malformed: {expected}")]
    Malformed {
        /// Which identity was being built.
        kind: &'static str,
        /// The refused value.
        value: String,
        /// What a valid value looks like.
        expected: &'static str,
    },
}

/// Longest value accepted for the free-form token identities.
const MAX_TOKEN_LEN: usize = 256;

fn check_token(kind: &'static str, value: &str) -> Result<(), IdentityError> {
    if value.is_empty() {
        return Err(IdentityError::Empty { kind });
    }
    if value.len() > MAX_TOKEN_LEN {
        return Err(IdentityError::TooLong { kind, max: MAX_TOKEN_LEN });
    }
    // In ASCII, whitespace and control characters are the bytes up to ' ' and DEL.
    let bad = if value.is_ascii() {
        value.bytes().any(|b| b <= b' ' || b == 0x7f)
    } else {
        value.chars().any(|c| c.is_whitespace() || c.is_control())
    };
    if bad {
        return Err(IdentityError::Malformed {
            kind,
            value: value.to_owned(),
            expected: "no whitespace or control characters",
        });
    }
    Ok(())
}

/// Declares a string newtype whose constructor runs `$check`, with `FromStr`, `Display`,
/// `AsRef<str>` and serde that re-validates on the way in.
macro_rules! string_identity {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $check:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            /// Validates `value` and wraps it.
            pub fn new(value: impl Into<String>) -> Result<Self, IdentityError> {
                let value = value.into();
                let check: fn(&'static str, &str) -> Result<(), IdentityError> = $check;
                check($kind, &value)?;
                Ok(Self(value))
            }

            /// The identity as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl FromStr for $name {
            type Err = IdentityError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::new(s)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = String::deserialize(d)?;
                Self::new(raw).map_err(serde::de::Error::custom)
            }
        }
    };
}

fn check_client_type(kind: &'static str, value: &str) -> Result<(), IdentityError> {
    let bytes = value.as_bytes();
    let shaped = !bytes.is_empty()
        && bytes.len() <= 32
        && bytes[0].is_ascii_lowercase()
        && bytes[1..].iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_');
    if shaped {
        Ok(())
    } else {
        Err(IdentityError::Malformed {
            kind,
            value: value.to_owned(),
            expected: "a lowercase letter then up to 31 of [a-z0-9_]",
        })
    }
}

fn check_hex_id(kind: &'static str, value: &str) -> Result<(), IdentityError> {
    check_token(kind, value)?;
    let digits = value.bytes().filter(|b| *b != b'-');
    if value.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit()) && digits.count() >= 8 {
        Ok(())
    } else {
        Err(IdentityError::Malformed {
            kind,
            value: value.to_owned(),
            expected: "hexadecimal digits, optionally grouped by '-'",
        })
    }
}

string_identity!(
    /// The application family of a launch: `codex`, `claude_code`, `gemini`, `grok`, ….
    ClientType,
    "client type",
    check_client_type
);
string_identity!(
    /// One namespace worker process, minted by the registry at first registration and
    /// never reused.
    WorkerIdentity,
    "worker identity",
    check_token
);
string_identity!(
    /// One process boot of a worker runtime.
    GenerationId,
    "generation id",
    check_token
);
string_identity!(
    /// The client session that owns a launch.
    SessionId,
    "session id",
    check_token
);
string_identity!(
    /// An operator-approved enrollment or canary cohort.
    FleetRunId,
    "fleet run id",
    check_token
);
string_identity!(
    /// A role profile from `profiles.json`.
    Profile,
    "profile",
    check_token
);
string_identity!(
    /// The repository a worker is bound to (a path or a URL).
    Repository,
    "repository",
    check_token
);
string_identity!(
    /// The machine a process runs on (`/etc/machine-id`).
    HostId,
    "host id",
    check_hex_id
);
string_identity!(
    /// One boot of a machine (`/proc/sys/kernel/random/boot_id`).
    BootId,
    "boot id",
    check_hex_id
);

/// A positive operating-system process number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "i64", into = "i64")]
pub struct Pid(u32);

impl Pid {
    /// Wraps a process number; zero and numbers beyond `i32::MAX` are not processes.
    pub fn new(value: i64) -> Result<Self, IdentityError> {
        match u32::try_from(value) {
            Ok(pid) if pid > 0 && i32::try_from(pid).is_ok() => Ok(Self(pid)),
            _ => Err(IdentityError::Malformed {
                kind: "pid",
                value: value.to_string(),
                expected: "a positive process number",
            }),
        }
    }

    /// The number as the kernel's signed `pid_t`.
    pub fn as_raw(self) -> i32 {
        // The constructor keeps the value within i32.
        i32::try_from(self.0).unwrap_or(i32::MAX)
    }

    /// The number as stored.
    pub fn get(self) -> u32 {
        self.0
    }
}

impl TryFrom<i64> for Pid {
    type Error = IdentityError;
    fn try_from(value: i64) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<Pid> for i64 {
    fn from(pid: Pid) -> Self {
        i64::from(pid.0)
    }
}

impl fmt::Display for Pid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// When a process started, in clock ticks since its machine booted (field 22 of
/// `/proc/<pid>/stat`). Together with the boot id it tells two incarnations of one pid
/// number apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "i64", into = "i64")]
pub struct ProcessStartTime(u64);

impl ProcessStartTime {
    /// Wraps a tick count. Stores keep it in a signed 64-bit column, so it must fit.
    pub fn new(ticks: u64) -> Result<Self, IdentityError> {
        if i64::try_from(ticks).is_ok() {
            Ok(Self(ticks))
        } else {
            Err(IdentityError::Malformed {
                kind: "process start time",
                value: ticks.to_string(),
                expected: "a tick count below 2^63",
            })
        }
    }

    /// The tick count.
    pub fn ticks(self) -> u64 {
        self.0
    }
}

impl TryFrom<i64> for ProcessStartTime {
    type Error = IdentityError;
    fn try_from(value: i64) -> Result<Self, Self::Error> {
        u64::try_from(value)
            .map_err(|_| IdentityError::Malformed {
                kind: "process start time",
                value: value.to_string(),
                expected: "a non-negative tick count",
            })
            .and_then(Self::new)
    }
}

impl From<ProcessStartTime> for i64 {
    fn from(t: ProcessStartTime) -> Self {
        i64::try_from(t.0).unwrap_or(i64::MAX)
    }
}

impl fmt::Display for ProcessStartTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The PID namespace a process lives in: the inode number of its `/proc/<pid>/ns/pid`.
/// A pid means something only inside its own PID namespace, so a probe in another one
/// (a container, `unshare -p`) cannot judge it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "i64", into = "i64")]
pub struct PidNamespace(u64);

impl PidNamespace {
    /// Wraps a namespace inode number: positive, and below 2^63 so stores can keep it.
    pub fn new(inode: u64) -> Result<Self, IdentityError> {
        if inode > 0 && i64::try_from(inode).is_ok() {
            Ok(Self(inode))
        } else {
            Err(IdentityError::Malformed {
                kind: "pid namespace",
                value: inode.to_string(),
                expected: "a positive inode number below 2^63",
            })
        }
    }

    /// Reads the target of a `/proc/<pid>/ns/pid` link, `pid:[4026531836]`.
    pub fn from_link(link: &str) -> Result<Self, IdentityError> {
        let malformed = || IdentityError::Malformed {
            kind: "pid namespace",
            value: link.to_owned(),
            expected: "pid:[INODE]",
        };
        let inode = link.strip_prefix("pid:[").and_then(|s| s.strip_suffix(']')).ok_or_else(malformed)?;
        Self::new(inode.parse().map_err(|_| malformed())?)
    }

    /// The inode number.
    pub fn inode(self) -> u64 {
        self.0
    }
}

impl TryFrom<i64> for PidNamespace {
    type Error = IdentityError;
    fn try_from(value: i64) -> Result<Self, Self::Error> {
        u64::try_from(value)
            .map_err(|_| IdentityError::Malformed {
                kind: "pid namespace",
                value: value.to_string(),
                expected: "a positive inode number",
            })
            .and_then(Self::new)
    }
}

impl From<PidNamespace> for i64 {
    fn from(ns: PidNamespace) -> Self {
        i64::try_from(ns.0).unwrap_or(i64::MAX)
    }
}

impl fmt::Display for PidNamespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

crate::outward_codes! {
    /// The five MCP namespace workers that every launch starts.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum Namespace ("namespace") {
        /// Writes changes.
        Author = "author",
        /// Reviews changes.
        Reviewer = "reviewer",
        /// Merges approved changes.
        Merger = "merger",
        /// Controls the fleet: may read fleet-wide state.
        Controller = "controller",
        /// Reconciles the registry: may read fleet-wide state and retire stale rows.
        Reconciler = "reconciler",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_type_accepts_the_documented_shape_only() {
        for ok in ["codex", "claude_code", "gemini", "grok", "a", "x1_2"] {
            assert!(ClientType::new(ok).is_ok(), "{ok}");
        }
        let too_long = "a".repeat(33);
        for bad in ["", "Codex", "1codex", "claude-code", "co dex", too_long.as_str()] {
            assert!(ClientType::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn namespace_round_trips_and_rejects_unknown_names() {
        for ns in Namespace::ALL {
            assert_eq!(ns.as_str().parse::<Namespace>().unwrap(), ns);
        }
        let err = "planner".parse::<Namespace>().unwrap_err();
        assert!(err.to_string().contains("planner"), "{err}");
    }

    #[test]
    fn pid_refuses_zero_negative_and_oversized_numbers() {
        assert!(Pid::new(1).is_ok());
        assert!(Pid::new(0).is_err());
        assert!(Pid::new(-4).is_err());
        assert!(Pid::new(i64::from(i32::MAX) + 1).is_err());
    }

    #[test]
    fn tokens_refuse_whitespace_and_emptiness() {
        assert!(WorkerIdentity::new("wkr-author-1").is_ok());
        assert!(WorkerIdentity::new("").is_err());
        assert!(WorkerIdentity::new("wkr author").is_err());
        assert!(HostId::new("0123456789abcdef0123456789abcdef").is_ok());
        assert!(HostId::new("not-hex-at-all").is_err());
    }

    proptest::proptest! {
        /// The byte-wise checks accept exactly what the character-wise definitions do.
        #[test]
        fn token_and_hex_checks_match_their_definitions(
            value in "[ -~\u{0}-\u{1f}\u{7f}\u{a0}\u{2003}é0-9a-f-]{0,40}|[0-9a-fA-Fg\u{b} é-]{0,40}",
        ) {
            let token = !value.is_empty()
                && value.len() <= MAX_TOKEN_LEN
                && !value.chars().any(|c| c.is_whitespace() || c.is_control());
            proptest::prop_assert_eq!(check_token("t", &value).is_ok(), token);
            let hex = value.chars().filter(|c| *c != '-').collect::<String>();
            let hex_id = token && hex.len() >= 8 && hex.chars().all(|c| c.is_ascii_hexdigit());
            proptest::prop_assert_eq!(check_hex_id("h", &value).is_ok(), hex_id);
        }
    }

    #[test]
    fn serde_revalidates_on_the_way_in() {
        let parsed: Result<ClientType, _> = serde_json::from_str("\"Not Valid\"");
        assert!(parsed.is_err());
        let ns: Namespace = serde_json::from_str("\"reconciler\"").unwrap();
        assert_eq!(ns, Namespace::Reconciler);
    }
}
