//! `tasklift-bench forwarder`: a reverse proxy on hyper that does nothing but pass
//! requests and answers through, as the ceiling of any proxy built on hyper on this
//! machine (tasklift's front door is hyper's HTTP/1.1 server). It reads no JSON,
//! keeps no state and writes no log. Each inbound connection gets an upstream
//! connection of its own (hyper's client, no pool); a worker per core, each a
//! current-thread runtime accepting from the one socket (tasklift's layout).
//! `/readyz` and `/healthz` answer 200 themselves, for the harness's start check.

use std::net::SocketAddr;
use std::rc::Rc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

/// One client connection, forwarded on one upstream connection.
async fn connection(stream: TcpStream, upstream: SocketAddr) -> anyhow::Result<()> {
    let up = TcpStream::connect(upstream).await?;
    up.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(up)).await?;
    tokio::task::spawn_local(conn);
    // HTTP/1.1 answers one request at a time: the lock only orders pipelined ones.
    let sender = Rc::new(tokio::sync::Mutex::new(sender));
    let svc = service_fn(move |req: hyper::Request<Incoming>| {
        let sender = sender.clone();
        async move {
            if matches!(req.uri().path(), "/healthz" | "/readyz") {
                let ok = Full::new(Bytes::from_static(b"{\"status\":\"ok\"}"))
                    .map_err(|never| match never {})
                    .boxed();
                return Ok::<_, hyper::Error>(hyper::Response::new(ok));
            }
            let mut s = sender.lock().await;
            s.ready().await?;
            let resp = s.send_request(req).await?;
            Ok(resp.map(BodyExt::boxed))
        }
    });
    hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), svc)
        .await?;
    Ok(())
}

/// One worker: accept on `listener` and forward every connection to `upstream`.
fn worker(listener: std::net::TcpListener, upstream: SocketAddr) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let listener = TcpListener::from_std(listener)?;
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("forwarder: accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            tokio::task::spawn_local(async move {
                if let Err(e) = connection(stream, upstream).await {
                    eprintln!("forwarder: connection ended: {e:#}");
                }
            });
        }
    })
}

/// Listen on `listen` (prints `listening on ADDR`) and forward to `upstream` on
/// `threads` workers, until killed.
pub fn run(listen: SocketAddr, upstream: SocketAddr, threads: usize) -> anyhow::Result<()> {
    let listener = std::net::TcpListener::bind(listen)?;
    listener.set_nonblocking(true)?;
    println!("listening on {}", listener.local_addr()?);
    let mut others = Vec::new();
    for _ in 1..threads.max(1) {
        let l = listener.try_clone()?;
        others.push(std::thread::spawn(move || worker(l, upstream)));
    }
    worker(listener, upstream)
}
