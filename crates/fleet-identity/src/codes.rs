//! Outward codes: the enums whose values travel as text (a status in a row, a finding in
//! a snapshot, a refusal in an answer), each declared once by [`outward_codes!`](crate::outward_codes),
//! which spells every code in one place and derives its printing, parsing and serde
//! forms from that spelling.

use std::fmt;

/// A text that is none of an outward code's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownCode {
    /// What the code names (`lease kind`, `namespace`).
    pub kind: &'static str,
    /// The text given.
    pub value: String,
    /// Every value the code has.
    pub expected: &'static [&'static str],
}

impl fmt::Display for UnknownCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown {} {:?} (expected one of {})", self.kind, self.value, self.expected.join(", "))
    }
}

impl std::error::Error for UnknownCode {}

#[doc(hidden)]
pub use serde as __serde;

/// Declares an enum of outward codes, each variant with its one spelling:
///
/// ```
/// fleet_identity::outward_codes! {
///     /// Whether a door is open.
///     #[derive(Debug, Clone, Copy, PartialEq, Eq)]
///     pub enum Door ("door state") {
///         /// It is open.
///         Open = "open",
///         /// It is shut.
///         Shut = "shut",
///     }
/// }
/// assert_eq!(Door::Open.as_str(), "open");
/// assert_eq!("shut".parse::<Door>(), Ok(Door::Shut));
/// assert_eq!(serde_json::to_string(&Door::ALL).unwrap(), r#"["open","shut"]"#);
/// ```
///
/// It gives the enum `ALL` (every value, in declaration order) and `as_str`, and
/// `Display`, `FromStr` (an [`UnknownCode`] names the values), `Serialize`,
/// `Deserialize` and comparison with a `&str`, all from that spelling. Written
/// `enum Name ("kind", explained)`, it leaves `Display` to the enum's own (an error
/// that explains its code).
///
/// For a code whose variants carry another code (a verdict that is either a code of its
/// own or a preserve reason), `outward_codes!(impl Type)` gives `Display`, `Serialize`
/// and comparison with a `&str` from the type's own `as_str`.
#[macro_export]
macro_rules! outward_codes {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident ($kind:literal) { $($body:tt)+ }
    ) => {
        $crate::outward_codes!(@declare [$(#[$meta])*] $vis $name $kind { $($body)+ });
        $crate::outward_codes!(@display $name);
    };
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident ($kind:literal, explained) { $($body:tt)+ }
    ) => {
        $crate::outward_codes!(@declare [$(#[$meta])*] $vis $name $kind { $($body)+ });
    };
    (impl $name:ty) => {
        $crate::outward_codes!(@display $name);
        $crate::outward_codes!(@serialize $name);
    };
    (
        @declare [$($meta:tt)*] $vis:vis $name:ident $kind:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)?
        }
    ) => {
        $($meta)*
        $vis enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $name {
            /// Every value, in declaration order.
            $vis const ALL: [$name; [$($text),+].len()] = [$($name::$variant),+];

            /// The code as it is stored, printed and sent.
            $vis fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::UnknownCode;

            fn from_str(s: &str) -> ::std::result::Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err($crate::UnknownCode { kind: $kind, value: s.to_owned(), expected: &[$($text),+] }),
                }
            }
        }

        impl<'de> $crate::__serde::Deserialize<'de> for $name {
            fn deserialize<D: $crate::__serde::Deserializer<'de>>(d: D) -> ::std::result::Result<Self, D::Error> {
                let text = <::std::borrow::Cow<'de, str> as $crate::__serde::Deserialize<'de>>::deserialize(d)?;
                text.parse().map_err(<D::Error as $crate::__serde::de::Error>::custom)
            }
        }

        $crate::outward_codes!(@serialize $name);
    };
    (@display $name:ty) => {
        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
    (@serialize $name:ty) => {
        impl $crate::__serde::Serialize for $name {
            fn serialize<S: $crate::__serde::Serializer>(&self, s: S) -> ::std::result::Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl ::std::cmp::PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
    };
}
