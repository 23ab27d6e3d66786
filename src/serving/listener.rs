//! The accept loop both of tasklift's listeners run (the front door and
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
use crate::serving::h1::{self, Ended, Prefixed, Settings};
use crate::serving::Request;
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

/// What a listener's connections are held to: the grace they get at shutdown,
/// the header read timeout, and the largest body read before the handler runs
/// (a larger one streams to the handler through hyper).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub grace: Duration,
    pub header_timeout: Duration,
    pub max_body: usize,
}

/// The HTTP/1 accept loop of tasklift's listeners: each request is answered by
/// `answer`; at `shutdown`, accepting stops and open connections get `grace` to
/// finish. A front-door worker's connections come through its [`Doorway`] (some
/// accepted by another worker and handed over); the admin listener's straight
/// from its socket. Connections are served by [`h1`](super::h1), which hands
/// the requests it does not take to hyper.
pub async fn accept_loop<F, Fut>(
    doorway: impl Into<Doorway>,
    mut shutdown: watch::Receiver<bool>,
    limits: Limits,
    what: &'static str,
    metrics: Option<Arc<crate::observe::metrics::Metrics>>,
    answer: F,
) where
    F: Fn(Request, Peer) -> Fut + Clone + Send + Sync + 'static,
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
        // Held while the connection is open, so the wait at shutdown waits for it.
        let watcher = graceful.watcher();
        let settings = Settings {
            header_timeout: limits.header_timeout,
            max_body: limits.max_body,
            shutdown: shutdown.clone(),
        };
        let metrics = metrics.clone();
        conns.spawn(async move {
            let _open = open; // counted on this worker while it is open
            let mut stream = stream;
            let here = client.clone();
            let ended = h1::serve(&mut stream, &settings, |req| {
                answer(req, here.clone())
            })
            .await;
            let read = match ended {
                Ended::Closed => return,
                Ended::TimedOut => return timed_out(metrics.as_deref(), peer, what),
                Ended::HandOver(read) => read,
            };
            let svc = service_fn(move |req: http::Request<Incoming>| {
                let fut = Box::into_pin(Box::write(
                    Box::new_uninit(),
                    answer(Request::from_hyper(req), client.clone()),
                ));
                async move { Ok::<_, Infallible>(fut.await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .serve_connection(TokioIo::new(Prefixed { read, io: stream }), svc);
            if let Err(e) = watcher.watch(conn).await {
                if e.is_timeout() {
                    return timed_out(metrics.as_deref(), peer, what);
                }
                tracing::debug!(error = %e, client.addr = %peer, listener = what, "connection ended with an error");
            }
        });
    }
    // Closed now, not after the grace: another worker still accepting then
    // serves what it would have handed to this one.
    drop(doorway);
    tracing::info!(listener = what, "closed; waiting for open connections");
    let grace = limits.grace;
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

/// A client that never finished sending its headers (slow loris).
fn timed_out(
    metrics: Option<&crate::observe::metrics::Metrics>,
    peer: SocketAddr,
    what: &'static str,
) {
    if let Some(m) = metrics {
        m.limit_hit("header_read_timeout");
    }
    tracing::debug!(client.addr = %peer, listener = what, "no request head within the header read timeout; closed");
}
