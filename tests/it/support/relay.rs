//! A TCP relay in front of an upstream that counts the connections it accepts
//! (so a test sees whether tasklift reuses its upstream connections) and can cut
//! them all at once (both sockets closed, as when an upstream restarts or a
//! network path drops).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// A running relay (for the test's lifetime).
pub struct Relay {
    /// The relay's URL for the upstream's `/mcp`.
    pub url: String,
    accepted: Arc<AtomicUsize>,
    links: Arc<Mutex<Vec<AbortHandle>>>,
}

impl Relay {
    /// Relay 127.0.0.1 to the host and port of `upstream` (`http://HOST:PORT/mcp`).
    pub async fn start(upstream: &str) -> Self {
        let to: SocketAddr = upstream
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .parse()
            .unwrap_or_else(|e| panic!("{upstream}: {e}"));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let links = Arc::new(Mutex::new(Vec::new()));
        let (n, l) = (accepted.clone(), links.clone());
        tokio::spawn(async move {
            while let Ok((mut a, _)) = listener.accept().await {
                n.fetch_add(1, Ordering::SeqCst);
                let link = tokio::spawn(async move {
                    let mut b = TcpStream::connect(to).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
                });
                l.lock().unwrap().push(link.abort_handle());
            }
        });
        Self {
            url,
            accepted,
            links,
        }
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Close every connection relayed so far, both ways.
    pub fn cut(&self) {
        for link in self.links.lock().unwrap().drain(..) {
            link.abort();
        }
    }
}
