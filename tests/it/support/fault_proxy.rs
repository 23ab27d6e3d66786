//! A fault-injecting TCP proxy between tasklift and a real upstream: it listens on
//! 127.0.0.1 (one port for its whole life) and forwards to a backend, or, switched
//! at runtime, breaks the connection the way a failing upstream or network does.
//!
//! The fault is chosen per connection when its first request arrives. Forwarded
//! HTTP requests get `Connection: close`, so the upstream closes each connection
//! after its response and tasklift never reuses one: every request opens a new
//! connection and meets the fault set at that moment. Bytes that are not an HTTP
//! request (a TLS handshake) are forwarded as they are.
//!
//! A fault can be held (`set_held`): the connection waits, after its request (or,
//! for `ResetMidBody`, after the first bytes of the response body), until the test
//! calls `release`. A call then outlives the threshold and becomes a task before
//! its upstream fails, with no timing involved.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does to a connection.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// Forward both ways.
    Pass,
    /// Nothing listens on the port: connecting is refused.
    Refuse,
    /// Read the request, then reset the connection (RST, `SO_LINGER` 0) before any
    /// byte of a response.
    ResetBeforeHeaders,
    /// Forward the request and the response's head and first body bytes (for SSE:
    /// the first events), then reset the connection.
    ResetMidBody,
    /// Answer `200 text/event-stream` and never send a byte more, nor close.
    NeverEnds,
    /// Read the request and never answer, nor close.
    Hang,
    /// Forward the response one byte at a time, this long apart.
    Drip(Duration),
    /// Answer with bytes that are not HTTP, then close.
    Garbage,
    /// Answer this HTTP status (a short text body), with `Retry-After` if given, then close.
    Status(u16, Option<&'static str>),
}

struct Mode {
    fault: Fault,
    /// The fault waits for `release`.
    held: bool,
    /// Only this many more connections get the fault; `Pass` after that.
    times: Option<usize>,
}

struct State {
    backend: SocketAddr,
    mode: Mutex<Mode>,
    /// Bumped by `release`; a held connection waits for a change.
    released: watch::Sender<u64>,
    /// Connections open now (client side).
    open: AtomicUsize,
    /// Connections that got a fault (not `Pass`).
    faulted: AtomicUsize,
    /// Connections that carried a request.
    requests: AtomicUsize,
}

/// A running fault proxy.
pub struct FaultProxy {
    addr: SocketAddr,
    state: Arc<State>,
    accept: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl FaultProxy {
    /// Proxy to `backend_url` (`http://host:port/...`: only host and port are used).
    pub async fn start(backend_url: &str) -> Self {
        let authority = backend_url
            .split("://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .expect("a URL with a host");
        let backend = tokio::net::lookup_host(authority)
            .await
            .unwrap()
            .next()
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            backend,
            mode: Mutex::new(Mode {
                fault: Fault::Pass,
                held: false,
                times: None,
            }),
            released: watch::channel(0).0,
            open: AtomicUsize::new(0),
            faulted: AtomicUsize::new(0),
            requests: AtomicUsize::new(0),
        });
        let accept = tokio::spawn(accept_loop(listener, state.clone()));
        Self {
            addr,
            state,
            accept: Mutex::new(Some(accept)),
        }
    }

    /// `http://{addr}/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// `https://{addr}/mcp`, for a TLS backend.
    pub fn https_url(&self) -> String {
        format!("https://{}/mcp", self.addr)
    }

    /// Every new connection from now on gets `fault`, at once.
    pub async fn set(&self, fault: Fault) {
        self.set_mode(fault, false, None).await;
    }

    /// Every new connection gets `fault` once `release` is called.
    pub async fn set_held(&self, fault: Fault) {
        self.set_mode(fault, true, None).await;
    }

    /// The next `n` connections get `fault`, the ones after pass.
    pub async fn set_times(&self, fault: Fault, n: usize) {
        self.set_mode(fault, false, Some(n)).await;
    }

    async fn set_mode(&self, fault: Fault, held: bool, times: Option<usize>) {
        let refuse = fault == Fault::Refuse;
        *self.state.mode.lock().unwrap() = Mode { fault, held, times };
        let mut accept = self.accept.lock().unwrap().take();
        match (refuse, accept.take()) {
            (true, Some(task)) => {
                task.abort();
                let _ = task.await;
            }
            (false, None) => {
                // The port was freed by `Refuse`; take it again.
                let listener = TcpListener::bind(self.addr).await.unwrap();
                accept = Some(tokio::spawn(accept_loop(listener, self.state.clone())));
            }
            (_, task) => accept = task,
        }
        *self.accept.lock().unwrap() = accept;
    }

    /// Let held connections go on with their fault (and later ones at once).
    pub fn release(&self) {
        self.state.mode.lock().unwrap().held = false;
        self.state.released.send_modify(|g| *g += 1);
    }

    /// Connections that got a fault so far.
    pub fn faulted(&self) -> usize {
        self.state.faulted.load(Ordering::SeqCst)
    }

    /// Connections that carried a request so far.
    pub fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// Client connections open now.
    pub fn open(&self) -> usize {
        self.state.open.load(Ordering::SeqCst)
    }

    /// Wait until `n` connections got a fault (a hang guard panics after 20 s).
    pub async fn wait_faulted(&self, n: usize) {
        crate::support::harness::eventually(
            &format!("{n} faulted connections"),
            Duration::from_secs(20),
            || self.faulted() >= n,
        )
        .await;
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>) {
    while let Ok((client, _)) = listener.accept().await {
        let state = state.clone();
        tokio::spawn(async move {
            state.open.fetch_add(1, Ordering::SeqCst);
            let _ = serve(&state, client).await;
            state.open.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// The bytes of a request as far as the proxy reads them: an HTTP request's head
/// and body (by `Content-Length`), or the first bytes of anything else.
struct Request {
    bytes: Vec<u8>,
    http: bool,
}

async fn read_request(client: &mut TcpStream) -> std::io::Result<Option<Request>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
        // A request line starts with its method, in capitals.
        let looks_http = buf
            .iter()
            .take_while(|b| **b != b' ')
            .all(u8::is_ascii_uppercase);
        if !looks_http {
            return Ok(Some(Request {
                bytes: buf,
                http: false,
            }));
        }
        let Some(end) = find(&buf, b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        while buf.len() < end + 4 + length {
            let n = client.read(&mut chunk).await?;
            if n == 0 {
                return Ok(None);
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        return Ok(Some(Request {
            bytes: with_connection_close(&buf, end),
            http: true,
        }));
    }
}

/// The request with its `Connection` header replaced by `Connection: close`.
fn with_connection_close(buf: &[u8], head_end: usize) -> Vec<u8> {
    let head = String::from_utf8_lossy(&buf[..head_end]);
    let mut out: Vec<u8> = Vec::with_capacity(buf.len() + 20);
    for line in head.split("\r\n") {
        if line.to_ascii_lowercase().starts_with("connection:") {
            continue;
        }
        out.extend_from_slice(line.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"connection: close\r\n\r\n");
    out.extend_from_slice(&buf[head_end + 4..]);
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

async fn serve(state: &State, mut client: TcpStream) -> std::io::Result<()> {
    let Some(req) = read_request(&mut client).await? else {
        return Ok(());
    };
    state.requests.fetch_add(1, Ordering::SeqCst);
    // Subscribed before the mode is read: a `release` after that read is seen.
    let mut released = state.released.subscribe();
    let (fault, held) = {
        let mut m = state.mode.lock().unwrap();
        match m.times {
            Some(0) => (Fault::Pass, false),
            Some(ref mut n) => {
                *n -= 1;
                (m.fault.clone(), m.held)
            }
            None => (m.fault.clone(), m.held),
        }
    };
    if fault != Fault::Pass {
        state.faulted.fetch_add(1, Ordering::SeqCst);
    }
    let hold = async {
        if held {
            let _ = released.changed().await;
        }
    };
    match fault {
        Fault::Pass => {
            let mut up = TcpStream::connect(state.backend).await?;
            up.write_all(&req.bytes).await?;
            // An HTTP upstream closes after its response (`Connection: close`).
            let _ = tokio::io::copy_bidirectional(&mut client, &mut up).await;
        }
        Fault::Refuse | Fault::ResetBeforeHeaders => {
            hold.await;
            reset(client);
        }
        Fault::ResetMidBody => {
            let mut up = TcpStream::connect(state.backend).await?;
            up.write_all(&req.bytes).await?;
            // Read until the head and the first part of the body are in, forward
            // exactly that, and reset: the client has a response that breaks off.
            let mut seen = Vec::new();
            let mut chunk = [0u8; 8192];
            let cut = loop {
                let n = up.read(&mut chunk).await?;
                if n == 0 {
                    break seen.len();
                }
                seen.extend_from_slice(&chunk[..n]);
                if let Some(cut) = cut_point(&seen) {
                    break cut;
                }
            };
            client.write_all(&seen[..cut]).await?;
            hold.await;
            reset(client);
        }
        Fault::NeverEnds => {
            hold.await;
            client
                .write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                      transfer-encoding: chunked\r\n\r\n",
                )
                .await?;
            until_closed(&mut client).await;
        }
        Fault::Hang => until_closed(&mut client).await,
        Fault::Drip(every) => {
            let mut up = TcpStream::connect(state.backend).await?;
            up.write_all(&req.bytes).await?;
            let mut chunk = [0u8; 8192];
            loop {
                let n = up.read(&mut chunk).await?;
                if n == 0 {
                    break;
                }
                for b in &chunk[..n] {
                    client.write_all(std::slice::from_ref(b)).await?;
                    tokio::time::sleep(every).await;
                }
            }
            let _ = client.shutdown().await;
        }
        Fault::Garbage => {
            hold.await;
            client
                .write_all(b"\x16\x03\x01\x00\xffgarbage \x00\x01\x02 not HTTP at all\r\n\r\n")
                .await?;
            let _ = client.shutdown().await;
        }
        Fault::Status(code, retry_after) => {
            hold.await;
            let body = format!("the proxy answers {code}");
            let retry = retry_after
                .map(|s| format!("retry-after: {s}\r\n"))
                .unwrap_or_default();
            let head = format!(
                "HTTP/1.1 {code} Fault\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
                 {retry}connection: close\r\n\r\n{body}",
                body.len()
            );
            client.write_all(head.as_bytes()).await?;
            let _ = client.shutdown().await;
        }
    }
    Ok(())
}

/// Where to break a response off: after its head and first chunk (chunked: for
/// SSE, the first events), or halfway through a `Content-Length` body.
fn cut_point(seen: &[u8]) -> Option<usize> {
    let end = find(seen, b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
    if head.contains("transfer-encoding: chunked") {
        let line_end = end + find(&seen[end..], b"\r\n")?;
        let size = String::from_utf8_lossy(&seen[end..line_end]);
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        let chunk_end = line_end + 2 + size + 2;
        return (seen.len() >= chunk_end).then_some(chunk_end);
    }
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())?;
    let cut = end + length / 2;
    (seen.len() >= cut).then_some(cut)
}

/// Reset the connection: RST instead of FIN.
fn reset(client: TcpStream) {
    let _ = client.set_zero_linger();
    drop(client);
}

/// Read and drop whatever comes until the peer closes.
async fn until_closed(client: &mut TcpStream) {
    let mut sink = [0u8; 1024];
    while let Ok(n) = client.read(&mut sink).await {
        if n == 0 {
            return;
        }
    }
}
