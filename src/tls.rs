//! TLS client settings shared by every outgoing connection (HTTP upstreams, the
//! bundled client, PostgreSQL): rustls with the ring provider, the system's root
//! certificates, and optionally extra roots from a PEM file.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::{pem::PemObject, CertificateDer};

/// A client configuration trusting the system's roots (when `system_roots`) plus
/// the certificates in `ca_file`. The error is a sentence naming what failed.
pub fn client_config(
    system_roots: bool,
    ca_file: Option<&Path>,
) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    if system_roots {
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    }
    if let Some(path) = ca_file {
        let err = |m: String| format!("ca_file {}: {m}", path.display());
        for c in CertificateDer::pem_file_iter(path).map_err(|e| err(e.to_string()))? {
            roots
                .add(c.map_err(|e| err(e.to_string()))?)
                .map_err(|e| err(e.to_string()))?;
        }
    }
    Ok(rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS setup: {e}"))?
    .with_root_certificates(roots)
    .with_no_client_auth())
}
