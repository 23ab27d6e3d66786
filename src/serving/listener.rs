//! The HTTP/1 accept loop both of tasklift's listeners run (the front door and
//! the admin listener): one task per connection, a header read timeout, and a
//! graceful end at shutdown.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::Response;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::watch;

use crate::serving::body::RespBody;
use crate::workers::Doorway;

/// The client at the other end of a connection: its address, and the address as
/// text, written once per connection for the log lines of all its requests
/// (formatting it in each request's log span was a quarter of that span's cost).
#[derive(Clone, Debug)]
pub struct Peer {
    pub addr: SocketAddr,
    shown: Arc<str>,
}

impl Peer {
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            shown: addr.to_string().into(),
        }
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

/// The HTTP/1 accept loop of tasklift's listeners: each request is answered by
/// `answer`; at `shutdown`, accepting stops and open connections get `grace` to
/// finish. A front-door worker's connections come through its [`Doorway`] (some
/// accepted by another worker and handed over); the admin listener's straight
/// from its socket.
pub async fn accept_loop<F, Fut>(
    doorway: impl Into<Doorway>,
    mut shutdown: watch::Receiver<bool>,
    (grace, header_timeout): (Duration, Duration),
    what: &'static str,
    metrics: Option<Arc<crate::observe::metrics::Metrics>>,
    answer: F,
) where
    F: Fn(http::Request<Incoming>, Peer) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<RespBody>> + Send + 'static,
{
    let mut doorway = doorway.into();
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut conns = tokio::task::JoinSet::new();
    loop {
        while conns.try_join_next().is_some() {}
        let (stream, peer, open) = tokio::select! {
            r = doorway.next() => match r {
                Ok(s) => s,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, listener = what, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        let _ = stream.set_nodelay(true);
        let answer = answer.clone();
        let client = Peer::new(peer);
        let svc = service_fn(move |req| {
            // Built where it stays: hyper keeps the request's future in a slot of
            // its own, and moving the 9 KB future there was a 9 KB copy per request
            // (callgrind: 9% of a proxied call's instructions). Allocated first and
            // written into, it is built in place and hyper moves a pointer.
            let fut = Box::into_pin(Box::write(Box::new_uninit(), answer(req, client.clone())));
            async move { Ok::<_, Infallible>(fut.await) }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout)
            .serve_connection(TokioIo::new(stream), svc);
        let conn = graceful.watch(conn);
        let metrics = metrics.clone();
        conns.spawn(async move {
            let _open = open; // counted on this worker while it is open
            if let Err(e) = conn.await {
                if e.is_timeout() {
                    // A client that never finished sending its headers (slow loris).
                    if let Some(m) = &metrics {
                        m.limit_hit("header_read_timeout");
                    }
                }
                tracing::debug!(error = %e, client.addr = %peer, listener = what, "connection ended with an error");
            }
        });
    }
    // Closed now, not after the grace: another worker still accepting then
    // serves what it would have handed to this one.
    drop(doorway);
    tracing::info!(listener = what, "closed; waiting for open connections");
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        // Dropping what is still open cancels its calls upstream.
        tracing::warn!(
            listener = what,
            open = conns.len(),
            "connections still open after {grace:?}; closing them and cancelling their calls"
        );
        conns.abort_all();
        while conns.join_next().await.is_some() {}
    }
}
