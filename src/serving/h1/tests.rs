//! The server's connections against raw clients: framing of requests and
//! answers, keep-alive and pipelining, cancellation when the client goes
//! away, the header read timeout, and what goes to hyper.

use super::*;
use crate::serving::body;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// What a test's handler answers.
#[derive(Clone, Copy)]
enum Answer {
    /// The request echoed as JSON text: method, target, a header, the body.
    Echo,
    /// An SSE-like body: three chunks from a channel, then the end.
    Stream,
    /// Never: the handler waits (and notes when it is dropped).
    Never,
    /// A 200 KB answer of `x`s, with a `content-length` of its own that is wrong.
    Large,
}

struct Bed {
    client: TcpStream,
    ended: tokio::task::JoinHandle<Ended>,
    dropped: Arc<AtomicBool>,
    shutdown: watch::Sender<bool>,
}

/// Drops to note that the handler's future was dropped.
struct Noted(Arc<AtomicBool>);
impl Drop for Noted {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

async fn bed(answer: Answer, header_timeout: Duration) -> Bed {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (mut io, _) = listener.accept().await.unwrap();
    let (tx, rx) = watch::channel(false);
    let dropped = Arc::new(AtomicBool::new(false));
    let noted = dropped.clone();
    let ended = tokio::spawn(async move {
        let set = Settings {
            header_timeout,
            max_body: 1024,
            shutdown: rx,
        };
        serve(&mut io, &set, move |req: Request| {
            let noted = Noted(noted.clone());
            async move {
                let _noted = noted;
                match answer {
                    Answer::Echo => {
                        let Request {
                            method,
                            uri,
                            version,
                            headers,
                            body: b,
                        } = req;
                        let b = b.collect().await.unwrap().to_bytes();
                        let text = format!(
                            "{} {} {:?} x={:?} body={}",
                            method,
                            uri,
                            version,
                            headers.get("x").map(|v| v.to_str().unwrap().to_string()),
                            String::from_utf8_lossy(&b)
                        );
                        body::json_bytes(StatusCode::OK, text)
                    }
                    Answer::Stream => {
                        let (tx, rx) = mpsc::channel(4);
                        tokio::spawn(async move {
                            for i in 0..3 {
                                let v = serde_json::json!({ "n": i });
                                let _ = tx.send(crate::reply::StreamItem::Message(v)).await;
                            }
                        });
                        let mut r = Response::new(body::sse(rx));
                        r.headers_mut().insert(
                            http::header::CONTENT_TYPE,
                            HeaderValue::from_static("text/event-stream"),
                        );
                        r
                    }
                    Answer::Never => std::future::pending().await,
                    Answer::Large => {
                        let mut r = body::json_bytes(StatusCode::OK, vec![b'x'; 200_000]);
                        r.headers_mut()
                            .insert(http::header::CONTENT_LENGTH, HeaderValue::from_static("1"));
                        r
                    }
                }
            }
        })
        .await
    });
    Bed {
        client,
        ended,
        dropped,
        shutdown: tx,
    }
}

/// Everything the server sends until it closes the connection.
async fn read_to_close(c: &mut TcpStream) -> String {
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut got))
        .await
        .expect("the server closes the connection")
        .unwrap();
    String::from_utf8(got).unwrap()
}

/// One answer: its head and a body of its `content-length`.
async fn read_answer(c: &mut TcpStream) -> String {
    let mut got = Vec::new();
    loop {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(10), c.read(&mut chunk))
            .await
            .expect("an answer comes")
            .unwrap();
        assert!(n > 0, "closed before a whole answer: {got:?}");
        got.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&got).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map(|n| n.parse::<usize>().unwrap())
                .expect("a content-length");
            if got.len() >= end + 4 + len {
                return text;
            }
        }
    }
}

const POST: &[u8] = b"POST /mcp?a=1 HTTP/1.1\r\nHost: h\r\nX: one\r\nContent-Length: 4\r\n\r\nbody";

#[tokio::test]
async fn a_post_is_answered_with_its_length_and_a_date_and_the_connection_stays() {
    let mut b = bed(Answer::Echo, Duration::from_secs(5)).await;
    b.client.write_all(POST).await.unwrap();
    let a = read_answer(&mut b.client).await;
    assert!(a.starts_with("HTTP/1.1 200 OK\r\n"), "{a}");
    assert!(a.contains("\r\ndate: "), "{a}");
    assert!(a.contains("\r\ncontent-type: application/json\r\n"), "{a}");
    assert!(
        a.ends_with("\r\n\r\nPOST /mcp?a=1 HTTP/1.1 x=Some(\"one\") body=body"),
        "{a}"
    );
    // Kept alive: a second request on the same connection.
    b.client
        .write_all(b"GET /two HTTP/1.1\r\nX: two\r\n\r\n")
        .await
        .unwrap();
    let a = read_answer(&mut b.client).await;
    assert!(
        a.ends_with("GET /two HTTP/1.1 x=Some(\"two\") body="),
        "{a}"
    );
}

/// A large answer goes out whole, framed by its real length, and the
/// connection serves the next request after it.
#[tokio::test]
async fn a_large_answer_is_framed_by_its_length_and_the_connection_goes_on() {
    let mut b = bed(Answer::Large, Duration::from_secs(5)).await;
    for _ in 0..2 {
        b.client.write_all(POST).await.unwrap();
        let a = read_answer(&mut b.client).await;
        assert_eq!(a.matches("content-length").count(), 1, "{}", &a[..200]);
        assert!(a.contains("\r\ncontent-length: 200000\r\n"));
        assert!(a.ends_with(&"x".repeat(200_000)));
    }
}

#[tokio::test]
async fn pipelined_requests_and_a_body_in_pieces_are_each_answered_in_order() {
    let mut b = bed(Answer::Echo, Duration::from_secs(5)).await;
    let mut two = POST.to_vec();
    two.extend_from_slice(b"DELETE /d HTTP/1.1\r\nX: 2\r\nContent-Length: 3\r\n\r\nab");
    b.client.write_all(&two).await.unwrap();
    let a = read_answer(&mut b.client).await;
    assert!(a.ends_with("body=body"), "{a}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    b.client.write_all(b"c").await.unwrap();
    let a = read_answer(&mut b.client).await;
    assert!(
        a.ends_with("DELETE /d HTTP/1.1 x=Some(\"2\") body=abc"),
        "{a}"
    );
}

#[tokio::test]
async fn a_stream_is_chunked_and_ends() {
    let mut b = bed(Answer::Stream, Duration::from_secs(5)).await;
    b.client
        .write_all(b"POST /mcp HTTP/1.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
        .await
        .unwrap();
    let a = read_to_close(&mut b.client).await;
    assert!(a.contains("\r\ntransfer-encoding: chunked\r\n"), "{a}");
    assert!(a.contains("\r\nconnection: close\r\n"), "{a}");
    let body = &a[a.find("\r\n\r\n").unwrap() + 4..];
    let event = "event: message\ndata: {\"n\":0}\n\n";
    assert!(
        body.starts_with(&format!("{:x}\r\n{event}\r\n", event.len())),
        "{body:?}"
    );
    assert!(body.ends_with("\r\n0\r\n\r\n"), "{body:?}");
    assert!(matches!(b.ended.await.unwrap(), Ended::Closed));
}

#[tokio::test]
async fn http_1_0_is_answered_in_1_0_and_closed_unless_kept_alive() {
    let mut b = bed(Answer::Echo, Duration::from_secs(5)).await;
    b.client
        .write_all(b"POST /x HTTP/1.0\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\nk")
        .await
        .unwrap();
    let a = read_answer(&mut b.client).await;
    assert!(a.starts_with("HTTP/1.0 200 OK\r\n"), "{a}");
    assert!(a.contains("\r\nconnection: keep-alive\r\n"), "{a}");
    b.client
        .write_all(b"GET /y HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    let a = read_to_close(&mut b.client).await;
    assert!(a.ends_with("GET /y HTTP/1.0 x=None body="), "{a}");
    // A stream to an HTTP/1.0 client: not chunked, ended by closing.
    let mut b = bed(Answer::Stream, Duration::from_secs(5)).await;
    b.client
        .write_all(b"GET /s HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .await
        .unwrap();
    let a = read_to_close(&mut b.client).await;
    assert!(!a.contains("chunked"), "{a}");
    assert!(a.ends_with("data: {\"n\":2}\n\n"), "{a}");
}

#[tokio::test]
async fn a_client_that_closes_while_its_request_runs_cancels_it() {
    let b = bed(Answer::Never, Duration::from_secs(5)).await;
    let mut client = b.client;
    client.write_all(POST).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!b.dropped.load(Ordering::SeqCst), "still running");
    drop(client);
    let ended = tokio::time::timeout(Duration::from_secs(5), b.ended)
        .await
        .expect("the connection ends")
        .unwrap();
    assert!(matches!(ended, Ended::Closed));
    assert!(b.dropped.load(Ordering::SeqCst), "the handler was dropped");
}

#[tokio::test]
async fn a_client_that_half_closes_while_its_request_runs_cancels_it() {
    let b = bed(Answer::Never, Duration::from_secs(5)).await;
    let (mut r, mut w) = b.client.into_split();
    w.write_all(POST).await.unwrap();
    // Half-close: hyper's server (without half-close) takes it as gone too.
    w.shutdown().await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(5), b.ended)
        .await
        .expect("the connection ends")
        .unwrap();
    assert!(matches!(ended, Ended::Closed));
    assert!(b.dropped.load(Ordering::SeqCst));
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "no answer to a cancelled request");
}

#[tokio::test]
async fn a_head_not_finished_in_time_closes_the_connection() {
    let mut b = bed(Answer::Echo, Duration::from_millis(200)).await;
    b.client
        .write_all(b"POST /mcp HTTP/1.1\r\nHo")
        .await
        .unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(5), b.ended)
        .await
        .expect("the timeout fires")
        .unwrap();
    assert!(matches!(ended, Ended::TimedOut));
    assert_eq!(read_to_close(&mut b.client).await, "");
}

/// The timer is set once per connection and moved only when it fires early:
/// each head still gets the whole timeout from when the wait for it began.
#[tokio::test]
async fn each_head_gets_the_whole_timeout_from_when_its_wait_began() {
    let mut b = bed(Answer::Echo, Duration::from_millis(1000)).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    b.client.write_all(POST).await.unwrap();
    read_answer(&mut b.client).await;
    // The wait for the next head began at about 600 ms: its deadline is about
    // 1,600 ms, after the timer first set (1,000 ms) has fired.
    b.client
        .write_all(b"POST /mcp HTTP/1.1\r\nHo")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(650)).await;
    assert!(!b.ended.is_finished(), "timed out before its deadline");
    let ended = tokio::time::timeout(Duration::from_secs(5), b.ended)
        .await
        .expect("the timeout fires")
        .unwrap();
    assert!(matches!(ended, Ended::TimedOut));
}

#[tokio::test]
async fn an_idle_connection_closes_at_shutdown_and_a_busy_one_after_its_answer() {
    let mut b = bed(Answer::Echo, Duration::from_secs(5)).await;
    b.client.write_all(POST).await.unwrap();
    read_answer(&mut b.client).await;
    b.shutdown.send(true).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(5), b.ended)
        .await
        .expect("an idle connection closes")
        .unwrap();
    assert!(matches!(ended, Ended::Closed));
}

/// Each request hyper must serve is handed over before anything is answered,
/// with every byte read so far.
#[tokio::test]
async fn requests_outside_the_fast_path_go_to_hyper_with_what_was_read() {
    let cases: [&[u8]; 7] = [
        b"POST /mcp HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\n\r\n",
        b"POST /mcp HTTP/1.1\r\nContent-Length: 2048\r\n\r\n{",
        b"POST /mcp HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\nbody",
        b"POST /mcp HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n",
        b"OPTIONS /mcp HTTP/1.1\r\n\r\n",
        b"GET http://h/mcp HTTP/1.1\r\n\r\n",
        b"GET /mcp HTTP/1.1\r\nBad Header: x\r\n\r\n",
    ];
    for case in cases {
        let mut b = bed(Answer::Echo, Duration::from_secs(5)).await;
        b.client.write_all(case).await.unwrap();
        let ended = tokio::time::timeout(Duration::from_secs(5), b.ended)
            .await
            .expect("handed over")
            .unwrap();
        let Ended::HandOver(read) = ended else {
            panic!("not handed over: {}", String::from_utf8_lossy(case));
        };
        assert_eq!(&read[..], case);
    }
}

#[test]
fn empty_values_and_odd_spacing_are_read_as_hyper_reads_them() {
    let req = first_request(
        b"POST /mcp HTTP/1.1\r\nX:\r\nY:   \r\nZ: \tv w \r\nContent-Length: 0\r\n\r\n",
        1024,
    )
    .expect("a request");
    assert_eq!(req.headers().get("x").unwrap(), "");
    assert_eq!(req.headers().get("y").unwrap(), "");
    assert_eq!(req.headers().get("z").unwrap(), "v w");
    assert!(first_request(b"POST /mcp HTTP/1.1\r\nContent-Length: 5\r\n\r\nabc", 1024).is_none());
}

/// The reader refuses every byte a `HeaderValue` may not hold (the connection
/// goes to hyper, which answers 400), and takes every other one as it is.
#[test]
fn a_value_is_read_here_exactly_when_http_would_hold_it() {
    for b in (0..=255u8).filter(|b| !matches!(b, b'\r' | b'\n')) {
        let value = [b'a', b, b'z'];
        let mut raw = b"POST /mcp HTTP/1.1\r\nX: ".to_vec();
        raw.extend_from_slice(&value);
        raw.extend_from_slice(b"\r\nContent-Length: 0\r\n\r\n");
        let read = first_request(&raw, 1024);
        match HeaderValue::from_bytes(&value) {
            Ok(v) => assert_eq!(
                read.expect("read here").headers().get("x"),
                Some(&v),
                "byte {b}"
            ),
            Err(_) => assert!(read.is_none(), "byte {b} was read here"),
        }
    }
}

#[test]
fn buffers_are_made_small_again_after_a_large_request_or_answer() {
    let mut buf = BytesMut::with_capacity(4 * KEEP);
    buf.extend_from_slice(b"GET /next");
    let mut out = Vec::with_capacity(4 * KEEP);
    settle(&mut buf, &mut out);
    assert!(buf.capacity() <= KEEP && out.capacity() <= KEEP);
    assert_eq!(&buf[..], b"GET /next", "the next request's bytes are kept");
}

#[test]
fn content_length_is_digits_only() {
    assert_eq!(content_length(b"12"), Some(12));
    for bad in [&b""[..], b"+1", b"1 ", b"0x10", b"-0", b"9999999999999999"] {
        assert_eq!(content_length(bad), None, "{bad:?}");
    }
}
