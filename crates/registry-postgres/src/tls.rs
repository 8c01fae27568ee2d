//! TLS to the server, as libpq's `sslmode` and `sslrootcert` URL parameters ask for it
//! (<https://www.postgresql.org/docs/current/libpq-ssl.html>), with rustls (and its ring
//! provider: nothing to install beyond the C compiler the bundled SQLite needs anyway):
//!
//! | `sslmode` | encrypted | certificate checked | host name checked |
//! | --- | --- | --- | --- |
//! | `disable` | no | — | — |
//! | `allow`, `prefer` (the default) | when the server offers it | no | no |
//! | `require` | yes | only against `sslrootcert`, when given | no |
//! | `verify-ca` | yes | yes (`sslrootcert`, else the system's roots) | no |
//! | `verify-full` | yes | yes | yes |

use std::sync::Arc;
use std::time::Duration;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

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

/// Idle seconds before the first keepalive probe, unless the URL sets `keepalives_idle`.
pub(crate) const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);
/// Seconds between probes, unless the URL sets `keepalives_interval`.
pub(crate) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// Unanswered probes before the connection is dropped, unless the URL sets `keepalives_retries`.
pub(crate) const KEEPALIVE_RETRIES: u32 = 3;
/// How long sent data may go unacknowledged, unless the URL sets `tcp_user_timeout`.
pub(crate) const TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);

/// The connection settings and the TLS connector for `url`. The `sslmode` and
/// `sslrootcert` parameters are read here, and the rest of the URL is left to the
/// driver (which knows neither `verify-*` nor `sslrootcert`).
pub(crate) fn prepare(url: &str) -> Result<(tokio_postgres::Config, MakeRustlsConnect), StoreError> {
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
    let mut config: tokio_postgres::Config = rest
        .parse()
        .map_err(|e| StoreError::invalid(format!("the PostgreSQL registry URL is not valid: {e}")))?;
    let given = |key: &str| kept.iter().any(|pair| pair.split('=').next() == Some(key));
    // A host that vanishes mid-session (powered off, cut off by the network) is noticed
    // in under a minute rather than after the kernel's two hours: keepalive probes and
    // a bound on unacknowledged data, unless the URL chooses its own.
    if !given("keepalives_idle") {
        config.keepalives_idle(KEEPALIVE_IDLE);
    }
    if !given("keepalives_interval") {
        config.keepalives_interval(KEEPALIVE_INTERVAL);
    }
    if !given("keepalives_retries") {
        config.keepalives_retries(KEEPALIVE_RETRIES);
    }
    if !given("tcp_user_timeout") {
        config.tcp_user_timeout(TCP_USER_TIMEOUT);
    }
    config.ssl_mode(match mode {
        Mode::Disable => SslMode::Disable,
        Mode::Prefer => SslMode::Prefer,
        Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
    });
    Ok((config, connector(mode, root.as_deref())?))
}

fn connector(mode: Mode, root: Option<&str>) -> Result<MakeRustlsConnect, StoreError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    // libpq checks the certificate in `require` only when a root certificate is given.
    let check_certificate =
        matches!(mode, Mode::VerifyCa | Mode::VerifyFull) || (mode == Mode::Require && root.is_some());
    let chain = if check_certificate {
        let roots = Arc::new(roots(root)?);
        let verifier = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| StoreError::invalid(format!("cannot set up TLS: {e}")))?;
        Some(verifier)
    } else {
        None
    };
    let verifier = Verifier { chain, check_name: mode == Mode::VerifyFull, provider: provider.clone() };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::invalid(format!("cannot set up TLS: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// The roots a certificate must chain to: `sslrootcert` alone when given (as in libpq),
/// else the system's.
fn roots(root: Option<&str>) -> Result<RootCertStore, StoreError> {
    let mut store = RootCertStore::empty();
    match root {
        Some(path) => {
            let certificates: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<_, _>>())
                .map_err(|e| StoreError::invalid(format!("cannot read sslrootcert {path}: {e}")))?;
            let (added, _) = store.add_parsable_certificates(certificates);
            if added == 0 {
                return Err(StoreError::invalid(format!("sslrootcert {path} holds no usable certificate")));
            }
        }
        None => {
            store.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    Ok(store)
}

/// The certificate check each mode asks for: the chain (when `chain` is set) and the
/// host name (when `check_name` is). Handshake signatures are always verified, so even
/// an unchecked certificate's key must be the server's.
#[derive(Debug)]
struct Verifier {
    chain: Option<Arc<WebPkiServerVerifier>>,
    check_name: bool,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else { return Ok(ServerCertVerified::assertion()) };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_driver_gets_the_url_without_the_tls_parameters() {
        let (config, _) =
            prepare("postgres://u@db.example/fleet?sslmode=verify-ca&connect_timeout=5").unwrap();
        assert_eq!(config.get_ssl_mode(), SslMode::Require);
        assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(5)));
        let err =
            prepare("postgres://u@h/db?sslmode=verify-full&sslrootcert=%2Fno%2Fsuch.pem").err().unwrap();
        assert!(err.to_string().contains("sslrootcert /no/such.pem"), "{err}");
    }

    #[test]
    fn a_vanished_host_is_noticed_within_a_minute_unless_the_url_says_otherwise() {
        let (config, _) = prepare("postgres://u@h/db").unwrap();
        assert_eq!(config.get_keepalives_idle(), KEEPALIVE_IDLE);
        assert_eq!(config.get_keepalives_interval(), Some(KEEPALIVE_INTERVAL));
        assert_eq!(config.get_keepalives_retries(), Some(KEEPALIVE_RETRIES));
        assert_eq!(config.get_tcp_user_timeout(), Some(&TCP_USER_TIMEOUT));
        let (config, _) =
            prepare("postgres://u@h/db?keepalives_idle=600&tcp_user_timeout=60&sslmode=disable").unwrap();
        assert_eq!(config.get_keepalives_idle(), Duration::from_secs(600));
        assert_eq!(config.get_tcp_user_timeout(), Some(&Duration::from_secs(60)));
        assert_eq!(config.get_keepalives_retries(), Some(KEEPALIVE_RETRIES));
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
