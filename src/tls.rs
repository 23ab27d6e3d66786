//! TLS client settings shared by every outgoing connection (HTTP upstreams, the
//! bundled client, the OTLP exporter, webhooks, PostgreSQL): rustls with the ring provider,
//! the system's root certificates, and optionally extra roots from a PEM file; and
//! the plain HTTP/1.1 client of tasklift's own requests ([`http1_client`]).

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

/// An HTTP/1.1 client over plain HTTP or TLS (hyper-util's pooled client).
pub type Http1Client = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    http_body_util::Full<bytes::Bytes>,
>;

/// The client of requests tasklift makes on its own account (the bundled
/// `tasklift call` client, the OTLP exporter): HTTP/1.1, plain HTTP, and TLS with
/// the system's roots when `system_roots` (loaded only then, so plain-HTTP clients
/// stay cheap to make); connections time out after 10 s. HTTP upstreams have their
/// own (HTTP/2, extra roots, pool settings).
pub fn http1_client(system_roots: bool) -> Result<Http1Client, String> {
    http1_client_with(system_roots, std::time::Duration::from_secs(10))
}

/// [`http1_client`] with its own connect timeout (a webhook destination's).
pub fn http1_client_with(
    system_roots: bool,
    connect_timeout: std::time::Duration,
) -> Result<Http1Client, String> {
    let tls = client_config(system_roots, None)?;
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(connect_timeout));
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(connector),
    )
}
