//! TLS to the database. tokio-postgres reads `sslmode` from the URL: `prefer` (its
//! default: TLS when the server offers it), `require`, or `disable`. The server's
//! certificate is checked against the URL's host name and the web's roots
//! (webpki-roots), plus the CA certificates of the PEM file `PICOGENT_STORE_CA_FILE`
//! names (a managed database's own CA); a certificate neither vouches for fails the
//! connection, never falls back to plain text.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::StoreError;

/// The connector every connection of a worker uses.
pub(super) fn connector(ca_file: Option<&Path>) -> Result<MakeRustlsConnect, StoreError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(file) = ca_file {
        let bad = |message: String| StoreError::Refused(format!("{}: {message}", file.display()));
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(file)
            .map_err(|e| bad(e.to_string()))?
            .collect::<Result<_, _>>()
            .map_err(|e| bad(e.to_string()))?;
        if certs.is_empty() {
            return Err(bad("holds no PEM certificate".into()));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| bad(e.to_string()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Refused(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}
