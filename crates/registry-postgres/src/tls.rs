//! TLS to the server, as libpq's `sslmode` and `sslrootcert` URL parameters ask for it
//! (<https://www.postgresql.org/docs/current/libpq-ssl.html>), with the platform's TLS
//! library through `postgres-native-tls`:
//!
//! | `sslmode` | encrypted | certificate checked | host name checked |
//! | --- | --- | --- | --- |
//! | `disable` | no | — | — |
//! | `allow`, `prefer` (the default) | when the server offers it | no | no |
//! | `require` | yes | only against `sslrootcert`, when given | no |
//! | `verify-ca` | yes | yes (`sslrootcert`, else the system's roots) | no |
//! | `verify-full` | yes | yes | yes |

use native_tls::{Certificate, TlsConnector};
use postgres::config::SslMode;
use postgres_native_tls::MakeTlsConnector;

use fleet_registry::StoreError;

/// What the URL asks of TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// The connection settings and the TLS connector for `url`. The `sslmode` and
/// `sslrootcert` parameters are read here, and the rest of the URL is left to the
/// driver (which knows neither `verify-*` nor `sslrootcert`).
pub(crate) fn prepare(url: &str) -> Result<(postgres::Config, MakeTlsConnector), StoreError> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut mode = Mode::Prefer;
    let mut root: Option<String> = None;
    let mut kept: Vec<&str> = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
        match key {
            "sslmode" => {
                mode = match value.as_ref() {
                    "disable" => Mode::Disable,
                    "allow" | "prefer" => Mode::Prefer,
                    "require" => Mode::Require,
                    "verify-ca" => Mode::VerifyCa,
                    "verify-full" => Mode::VerifyFull,
                    other => {
                        return Err(StoreError::invalid(format!(
                            "sslmode {other:?} is not one of disable, allow, prefer, require, verify-ca, verify-full"
                        )));
                    }
                }
            }
            "sslrootcert" => root = Some(value.into_owned()),
            _ => kept.push(pair),
        }
    }
    let rest = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
    let mut config: postgres::Config = rest
        .parse()
        .map_err(|e| StoreError::invalid(format!("the PostgreSQL registry URL is not valid: {e}")))?;
    config.ssl_mode(match mode {
        Mode::Disable => SslMode::Disable,
        Mode::Prefer => SslMode::Prefer,
        Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
    });
    Ok((config, connector(mode, root.as_deref())?))
}

fn connector(mode: Mode, root: Option<&str>) -> Result<MakeTlsConnector, StoreError> {
    let mut builder = TlsConnector::builder();
    if let Some(path) = root {
        let pem = std::fs::read(path)
            .map_err(|e| StoreError::invalid(format!("cannot read sslrootcert {path}: {e}")))?;
        let certificate = Certificate::from_pem(&pem)
            .map_err(|e| StoreError::invalid(format!("sslrootcert {path} is not a PEM certificate: {e}")))?;
        // As in libpq, the given root is the only one trusted.
        builder.disable_built_in_roots(true).add_root_certificate(certificate);
    }
    // libpq checks the certificate in `require` only when a root certificate is given.
    let check_certificate =
        matches!(mode, Mode::VerifyCa | Mode::VerifyFull) || (mode == Mode::Require && root.is_some());
    builder.danger_accept_invalid_certs(!check_certificate);
    builder.danger_accept_invalid_hostnames(mode != Mode::VerifyFull);
    let tls = builder.build().map_err(|e| StoreError::invalid(format!("cannot set up TLS: {e}")))?;
    Ok(MakeTlsConnector::new(tls))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_driver_gets_the_url_without_the_tls_parameters() {
        let (config, _) =
            prepare("postgres://u@db.example/fleet?sslmode=verify-ca&connect_timeout=5").unwrap();
        assert_eq!(config.get_ssl_mode(), SslMode::Require);
        assert_eq!(config.get_connect_timeout(), Some(&std::time::Duration::from_secs(5)));
        let err =
            prepare("postgres://u@h/db?sslmode=verify-full&sslrootcert=%2Fno%2Fsuch.pem").err().unwrap();
        assert!(err.to_string().contains("sslrootcert /no/such.pem"), "{err}");
    }

    #[test]
    fn an_unknown_sslmode_is_refused_by_name() {
        let err = prepare("postgres://u@h/db?sslmode=sometimes").err().unwrap();
        assert!(err.to_string().contains("\"sometimes\""), "{err}");
        let (config, _) = prepare("postgres://u@h/db?sslmode=disable").unwrap();
        assert_eq!(config.get_ssl_mode(), SslMode::Disable);
        let (config, _) = prepare("postgres://u@h/db").unwrap();
        assert_eq!(config.get_ssl_mode(), SslMode::Prefer, "libpq's default");
    }
}
