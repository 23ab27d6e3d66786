//! The HTTP/1.1 client against scripted servers: framing, keeping and
//! replacing connections, and answers that break.

use super::body::{framing, Framing};
use super::*;
use http_body_util::BodyExt;
use std::sync::atomic::AtomicUsize;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

/// A server that answers each request on a connection with the next of
/// `answers` (raw bytes); `None` closes the connection instead, and an
/// answer starting with `!` is sent without it and the connection closed.
/// It counts the connections it accepted.
async fn server(answers: Vec<Option<&'static [u8]>>) -> (http::Uri, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("http://{}/mcp?x=1", listener.local_addr().unwrap())
        .parse()
        .unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    let answers = Arc::new(Mutex::new(VecDeque::from(answers)));
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            count.fetch_add(1, Ordering::SeqCst);
            let answers = answers.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                loop {
                    let mut chunk = [0u8; 4096];
                    let n = s.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&chunk[..n]);
                    // Whole requests only: the head, and a body of its length.
                    let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
                    let len = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .map_or(0, |n| n.trim().parse::<usize>().unwrap());
                    if got.len() < end + 4 + len {
                        continue;
                    }
                    got.drain(..end + 4 + len);
                    let next = answers.lock().unwrap().pop_front().flatten();
                    match next {
                        Some([b'!', bytes @ ..]) => {
                            s.write_all(bytes).await.unwrap();
                            return;
                        }
                        Some(bytes) => s.write_all(bytes).await.unwrap(),
                        None => return,
                    }
                }
            });
        }
    });
    (uri, accepted)
}

fn pool(uri: http::Uri) -> Arc<Http1Pool> {
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    let tls = crate::tls::client_config(true, None).unwrap();
    let inner = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Http1Pool::new(
        Timed {
            inner,
            timeout: Duration::from_secs(5),
        },
        uri,
    )
}

async fn post(pool: &Arc<Http1Pool>) -> Result<(StatusCode, Bytes), String> {
    let (parts, body) = pool
        .send(
            &Method::POST,
            &Fields::default(),
            &Bytes::from_static(b"{}"),
        )
        .await
        .map_err(|e| format!("{e:?}"))?;
    let body = body.collect().await.map_err(|e| e.to_string())?;
    Ok((parts.status, body.to_bytes()))
}

#[tokio::test]
async fn chunked_and_sized_answers_are_read_whole_on_one_kept_connection() {
    let (uri, accepted) = server(vec![
        Some(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\ntrailer: x\r\n\r\n"),
        Some(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n"),
        Some(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"),
    ])
    .await;
    let pool = pool(uri);
    assert_eq!(
        post(&pool).await.unwrap(),
        (StatusCode::OK, Bytes::from("hello world"))
    );
    assert_eq!(pool.idle(), 1);
    assert_eq!(
        post(&pool).await.unwrap(),
        (StatusCode::ACCEPTED, Bytes::new())
    );
    assert_eq!(
        post(&pool).await.unwrap(),
        (StatusCode::OK, Bytes::from("abc"))
    );
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "one connection for all three"
    );
}

/// An answer whose connection must not be kept: read whole, the connection not
/// pooled, and the next request on a new one.
async fn read_then_not_kept(first: &'static [u8], body: &str, why: &str) {
    let (uri, accepted) = server(vec![
        Some(first),
        Some(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"),
    ])
    .await;
    let pool = pool(uri);
    assert_eq!(
        post(&pool).await.unwrap().1,
        Bytes::from(body.to_string()),
        "{why}"
    );
    assert_eq!(pool.idle(), 0, "not kept: {why}");
    assert_eq!(post(&pool).await.unwrap().1, Bytes::from("ok"), "{why}");
    assert_eq!(accepted.load(Ordering::SeqCst), 2, "{why}");
}

#[tokio::test]
async fn connection_close_and_bodies_until_close_are_not_kept() {
    read_then_not_kept(
        b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok",
        "ok",
        "connection: close",
    )
    .await;
}

#[tokio::test]
async fn an_answer_with_both_framings_is_read_chunked_and_its_connection_closed() {
    read_then_not_kept(
        b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        "hello",
        "the framings disagree",
    )
    .await;
}

#[tokio::test]
async fn a_body_dropped_unread_closes_its_connection() {
    let (uri, accepted) = server(vec![
        Some(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc"),
        Some(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nz"),
    ])
    .await;
    let pool = pool(uri);
    let (_, body) = pool
        .send(
            &Method::POST,
            &Fields::default(),
            &Bytes::from_static(b"{}"),
        )
        .await
        .unwrap();
    drop(body);
    assert_eq!(pool.idle(), 0);
    assert_eq!(post(&pool).await.unwrap().1, Bytes::from("z"));
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_idle_connection_the_server_closed_is_replaced_unseen() {
    // The first answer's connection is closed by the server once idle.
    let (uri, accepted) = server(vec![
        Some(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\na"),
        None,
        Some(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nb"),
    ])
    .await;
    let pool = pool(uri);
    assert_eq!(post(&pool).await.unwrap().1, Bytes::from("a"));
    // The server takes the next request on that connection as its signal to
    // close; a request sent there would be lost, so make it close first.
    let (mut conn, _) = pool.idle.lock().unwrap().pop_back().unwrap();
    conn.write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n", b"")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    pool.put(conn);
    assert_eq!(post(&pool).await.unwrap().1, Bytes::from("b"));
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

/// The pool takes a connection reused soon on tokio's word; one idle for a
/// second or more is asked the kernel, so an upstream's close the worker has
/// not yet seen (here: the runtime blocked while it came) is found before a
/// request is written into it and lost.
#[tokio::test]
async fn a_connection_idle_a_while_is_asked_the_kernel_before_reuse() {
    // A server on a thread of its own: it closes when told, while this
    // runtime is blocked and reads no events.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let uri = format!("http://{}/mcp", listener.local_addr().unwrap())
        .parse()
        .unwrap();
    let (close, closing) = std::sync::mpsc::channel::<()>();
    let server = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut s, _) = listener.accept().unwrap();
        let mut got = Vec::new();
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let mut chunk = [0u8; 4096];
            let n = s.read(&mut chunk).unwrap();
            got.extend_from_slice(&chunk[..n]);
        }
        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\na")
            .unwrap();
        closing.recv().unwrap();
    });
    let pool = pool(uri);
    assert_eq!(post(&pool).await.unwrap().1, Bytes::from("a"));
    close.send(()).unwrap();
    server.join().unwrap();
    // Blocked: the close reaches the socket, not tokio's readiness.
    std::thread::sleep(Duration::from_millis(100));
    let long_ago = Instant::now().checked_sub(ASK_AFTER * 2).unwrap();
    pool.idle.lock().unwrap().back_mut().unwrap().1 = long_ago;
    assert!(
        pool.take_idle().is_none(),
        "a connection the upstream closed is not handed out"
    );
}

#[tokio::test]
async fn a_body_cut_short_and_an_answer_that_is_not_http_are_errors() {
    let (uri, _) = server(vec![Some(
        b"!HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel",
    )])
    .await;
    let pool = pool(uri);
    let (_, body) = pool
        .send(&Method::POST, &Fields::default(), &Bytes::new())
        .await
        .unwrap();
    let cut = body.collect().await.expect_err("an error").to_string();
    assert!(cut.contains("closed before the body ended"), "{cut}");
    assert_eq!(pool.idle(), 0);

    let (uri, _) = server(vec![Some(b"SSH-2.0-OpenSSH\r\n\r\n")]).await;
    let failed = pool_post_err(uri).await;
    assert!(failed.contains("NotHttp"), "{failed}");

    let (uri, _) = server(vec![None]).await;
    let failed = pool_post_err(uri).await;
    assert!(failed.contains("closed before an answer"), "{failed}");
}

async fn pool_post_err(uri: http::Uri) -> String {
    post(&pool(uri)).await.unwrap_err()
}

#[test]
fn framing_follows_rfc_9112() {
    let h = |pairs: &[(&str, &str)]| {
        let mut m = Fields::new();
        for (k, v) in pairs {
            m.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        m
    };
    let f = |status: u16, method: Method, headers: Fields| {
        framing(StatusCode::from_u16(status).unwrap(), &method, &headers)
    };
    assert!(matches!(
        f(204, Method::POST, h(&[("content-length", "5")])),
        Ok(Framing::Length(0))
    ));
    assert!(matches!(
        f(200, Method::HEAD, h(&[("content-length", "5")])),
        Ok(Framing::Length(0))
    ));
    assert!(matches!(
        f(
            200,
            Method::POST,
            h(&[
                ("transfer-encoding", "gzip, chunked"),
                ("content-length", "5")
            ])
        ),
        Ok(Framing::Chunked)
    ));
    assert!(matches!(
        f(200, Method::POST, h(&[("transfer-encoding", "gzip")])),
        Ok(Framing::UntilClose)
    ));
    assert!(matches!(
        f(200, Method::POST, h(&[("content-length", "7, 7")])),
        Ok(Framing::Length(7))
    ));
    assert!(f(
        200,
        Method::POST,
        h(&[("content-length", "7"), ("content-length", "8")])
    )
    .is_err());
    assert!(f(200, Method::POST, h(&[("content-length", "-1")])).is_err());
    assert!(matches!(
        f(200, Method::POST, h(&[])),
        Ok(Framing::UntilClose)
    ));
}

#[test]
fn the_request_head_names_its_host_and_length_and_drops_hop_by_hop_fields() {
    let pool = Http1Pool {
        connector: Timed {
            inner: hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(crate::tls::client_config(true, None).unwrap())
                .https_or_http()
                .enable_http1()
                .wrap_connector(hyper_util::client::legacy::connect::HttpConnector::new()),
            timeout: Duration::from_secs(1),
        },
        uri: "http://up:8080/mcp?a=b".parse().unwrap(),
        target: "/mcp?a=b".into(),
        host: "up:8080".into(),
        idle: Mutex::new(VecDeque::new()),
        idle_timeout: IDLE_TIMEOUT,
        reaping: AtomicBool::new(false),
    };
    let mut headers = Fields::default();
    headers.insert(header::CONNECTION, "close".parse().unwrap());
    headers.insert(header::CONTENT_LENGTH, "99".parse().unwrap());
    headers.insert(HeaderName::from_static("x-trace"), "1".parse().unwrap());
    let head = String::from_utf8(pool.head(&Method::POST, &headers, 2)).unwrap();
    assert_eq!(
        head,
        "POST /mcp?a=b HTTP/1.1\r\nhost: up:8080\r\nx-trace: 1\r\ncontent-length: 2\r\n\r\n"
    );
    let head = String::from_utf8(pool.head(&Method::GET, &Fields::default(), 0)).unwrap();
    assert_eq!(head, "GET /mcp?a=b HTTP/1.1\r\nhost: up:8080\r\n\r\n");
}

#[tokio::test]
async fn idle_connections_are_closed_once_stale() {
    let (uri, accepted) = server(vec![
        Some(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\na"),
        Some(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nb"),
    ])
    .await;
    let mut pool = pool(uri);
    Arc::get_mut(&mut pool).unwrap().idle_timeout = Duration::from_millis(400);
    assert_eq!(post(&pool).await.unwrap().1, Bytes::from("a"));
    assert_eq!(pool.idle(), 1, "kept while fresh");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(pool.idle(), 0, "the reaper closed it");
    assert_eq!(post(&pool).await.unwrap().1, Bytes::from("b"));
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}
