//! Legacy session streams and their replay (`front::legacy::session`): a sequence
//! of operations decoded from the input (open call streams, push messages and
//! notifications, drop readers, resume with `Last-Event-ID` values seen on the
//! streams, mangled or made up, let time pass, close sessions) on two sessions, on
//! a current-thread runtime with a paused clock.
//!
//! Event ids are taken only from what the streams emit, never built by hand. Each
//! message says which session, stream and position it is; the checks:
//! - a reader only ever gets messages of its own session and of one stream;
//! - on one reader, a stream's messages come in order, without duplicates or gaps,
//!   starting right after the event it resumed from (or at the first of a new
//!   call stream, or at the next notification on the standalone stream);
//! - an event id always names the same message;
//! - `notify` never blocks on a reader that keeps up;
//! - a finished stream's readers end, and every reader ends when its session does;
//! - a resumed request whose stream is gone gets one error and nothing else.
#![no_main]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use tasklift::front::legacy::session::{ClientSession, Polling};
use tasklift::reply::StreamItem;
use tokio::sync::mpsc::{self, error::TryRecvError};

/// Most operations per input (the event logs keep 512 events; stay under that).
const MAX_OPS: usize = 400;
/// The stream number messages of a session's standalone stream carry.
const STANDALONE: u64 = 0;

/// Input bytes, read front to back; 0 once exhausted.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn index(&mut self, len: usize) -> Option<usize> {
        (len > 0).then(|| usize::from(self.u8()) % len)
    }
    fn string(&mut self) -> String {
        let n = usize::from(self.u8() % 24).min(self.0.len());
        let (s, rest) = self.0.split_at(n);
        self.0 = rest;
        String::from_utf8_lossy(s).into_owned()
    }
}

/// What a message says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Tag {
    session: usize,
    stream: u64,
    n: u64,
}

fn message(t: Tag) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/message",
           "params": {"s": t.session, "src": t.stream, "n": t.n}})
}

fn tag_of(v: &Value) -> Tag {
    let p = &v["params"];
    let num = |k: &str| {
        p[k].as_u64()
            .unwrap_or_else(|| panic!("not our message: {v}"))
    };
    Tag {
        session: num("s") as usize,
        stream: num("src"),
        n: num("n"),
    }
}

/// Where a reader should start.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// A new call stream: its first message.
    Fresh(u64),
    /// Resumed after event `n` of `stream`: the next one, or (a forgotten call
    /// stream) the standalone stream from its next notification on.
    After { stream: u64, n: u64, notified: u64 },
    /// The standalone stream, from its next notification on.
    Standalone { notified: u64 },
    /// A made-up id: any one stream, in order.
    Anything,
}

struct Reader {
    session: usize,
    rx: mpsc::Receiver<StreamItem>,
    expect: Expect,
    stream: Option<u64>,
    last: Option<u64>,
    ended: bool,
    /// Got the error for a request whose stream is gone.
    lost: bool,
    /// Opened before its session closed (so it must end when the session does).
    before_close: bool,
}

struct Producer {
    session: usize,
    stream: u64,
    tx: Option<mpsc::Sender<StreamItem>>,
    sent: u64,
}

struct World {
    sessions: Vec<Arc<ClientSession>>,
    closed: Vec<bool>,
    notified: Vec<u64>,
    readers: Vec<Reader>,
    producers: Vec<Producer>,
    /// (session, event id) -> the message it named.
    ids: HashMap<(usize, String), Tag>,
    /// Ids seen, in order, for resuming.
    seen: Vec<(usize, String)>,
    streams: u64,
}

impl World {
    /// Read everything the readers have; true if anything came.
    fn drain(&mut self) -> bool {
        let mut any = false;
        for r in &mut self.readers {
            loop {
                match r.rx.try_recv() {
                    Ok(item) => {
                        any = true;
                        match item {
                            StreamItem::Event { id, message } => {
                                assert!(!r.lost, "an event after a lost request's error");
                                if message.get("error").is_some() {
                                    // A resumed request whose stream is gone is
                                    // answered with an error, on its own.
                                    assert_eq!(r.last, None, "a lost request's error mid-stream");
                                    assert!(message.get("id").is_some(), "{message}");
                                    r.lost = true;
                                    continue;
                                }
                                let t = tag_of(&message);
                                check_event(r, t);
                                let key = (r.session, id);
                                match self.ids.get(&key) {
                                    Some(prev) => assert_eq!(
                                        *prev, t,
                                        "event id {:?} named two messages",
                                        key.1
                                    ),
                                    None => {
                                        self.ids.insert(key.clone(), t);
                                        self.seen.push(key);
                                    }
                                }
                            }
                            StreamItem::Prime { id, .. } => {
                                // A new call stream primes before its first event.
                                if let (Expect::Fresh(stream), None) = (r.expect, r.last) {
                                    let t = Tag {
                                        session: r.session,
                                        stream,
                                        n: 0,
                                    };
                                    let key = (r.session, id);
                                    if !self.ids.contains_key(&key) {
                                        self.ids.insert(key.clone(), t);
                                        self.seen.push(key);
                                    }
                                }
                            }
                            StreamItem::KeepAlive => {}
                            StreamItem::Message(m) => panic!("a message without an event id: {m}"),
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        any |= !r.ended;
                        r.ended = true;
                        break;
                    }
                }
            }
        }
        any
    }

    /// Let the sessions' tasks run and read what they send, until nothing moves.
    /// The runtime polls a bounded number of tasks between two polls of this one,
    /// so with many streams finishing at once it takes several rounds: keep going
    /// while anything arrives or ends, and for as many quiet rounds as there are
    /// streams before calling it settled.
    async fn settle(&mut self) {
        let enough = 3 + self.producers.len() / 16;
        let mut quiet = 0;
        for _ in 0..4096 {
            tokio::task::yield_now().await;
            if self.drain() {
                quiet = 0;
            } else {
                quiet += 1;
                if quiet >= enough {
                    return;
                }
            }
        }
    }

    fn open(&mut self, session: usize, last_event_id: Option<&str>) {
        let expect = match last_event_id {
            None => Expect::Standalone {
                notified: self.notified[session],
            },
            Some(id) => match self.ids.get(&(session, id.to_string())) {
                Some(t) => Expect::After {
                    stream: t.stream,
                    n: t.n,
                    notified: self.notified[session],
                },
                None => Expect::Anything,
            },
        };
        let rx = self.sessions[session].open_stream(last_event_id);
        self.readers.push(Reader {
            session,
            rx,
            expect,
            stream: None,
            last: None,
            ended: false,
            lost: false,
            before_close: !self.closed[session],
        });
    }
}

fn check_event(r: &mut Reader, t: Tag) {
    assert_eq!(
        t.session, r.session,
        "a reader got an event of another session: {t:?}"
    );
    match r.stream {
        Some(s) => assert_eq!(
            s, t.stream,
            "a reader got events of two streams: {t:?}, expected {:?}",
            r.expect
        ),
        None => r.stream = Some(t.stream),
    }
    let want = match (r.last, r.expect) {
        (Some(l), _) => Some(l + 1),
        (None, Expect::Fresh(s)) => {
            assert_eq!(t.stream, s, "a new stream's reader got another stream");
            Some(1)
        }
        (None, Expect::After { stream, n, .. }) if t.stream == stream => Some(n + 1),
        (None, Expect::After { notified, .. }) => {
            assert_eq!(
                t.stream, STANDALONE,
                "a resumed stream replayed another stream: {t:?} after {:?}",
                r.expect
            );
            Some(notified + 1)
        }
        (None, Expect::Standalone { notified }) => {
            assert_eq!(
                t.stream, STANDALONE,
                "the standalone stream got a call stream's event"
            );
            Some(notified + 1)
        }
        (None, Expect::Anything) => None,
    };
    if let Some(w) = want {
        assert_eq!(
            t.n, w,
            "out of order, duplicated or lost: got {t:?}, expected n = {w} ({:?}, last {:?})",
            r.expect, r.last
        );
    }
    r.last = Some(t.n);
}

/// A variation of a real id: cut, extended, or spliced with another.
fn mangle(b: &mut Bytes, id: &str, other: &str) -> String {
    let cut = |s: &str, at: usize| {
        let mut at = at.min(s.len());
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        at
    };
    let at = usize::from(b.u8());
    match b.u8() % 6 {
        0 => id[..cut(id, at % (id.len() + 1))].to_string(),
        1 => format!("{id}{}", b.string()),
        2 => format!("{}{}", b.string(), id),
        3 => {
            let (a, o) = (
                cut(id, at % (id.len() + 1)),
                cut(other, at % (other.len() + 1)),
            );
            format!("{}{}", &id[..a], &other[o..])
        }
        4 => id.replace('_', &b.string()),
        _ => {
            // Bump one digit.
            let mut s: Vec<char> = id.chars().collect();
            if let Some(i) = (!s.is_empty()).then(|| at % s.len()) {
                if let Some(d) = s[i].to_digit(10) {
                    s[i] = char::from_digit((d + 1) % 10, 10).unwrap_or('0');
                }
            }
            s.into_iter().collect()
        }
    }
}

async fn run(data: &[u8]) {
    let mut b = Bytes(data);
    let head = b.u8();
    let wait = u64::from(b.u8());
    let sessions = (0..2)
        .map(|i| {
            let version = if head & (1 << i) != 0 {
                "2025-11-25"
            } else {
                "2025-06-18"
            };
            let polling = Polling {
                retry_ms: 1000,
                close_after: (head & (4 << i) != 0).then(|| Duration::from_millis(10 * wait + 1)),
            };
            ClientSession::with_polling(
                format!("p{i}"),
                version.into(),
                json!({}),
                json!({}),
                polling,
            )
        })
        .collect();
    let mut w = World {
        sessions,
        closed: vec![false; 2],
        notified: vec![0; 2],
        readers: Vec::new(),
        producers: Vec::new(),
        ids: HashMap::new(),
        seen: Vec::new(),
        streams: 0,
    };
    for _ in 0..MAX_OPS {
        if b.0.is_empty() {
            break;
        }
        let op = b.u8();
        let s = usize::from(op >> 7);
        match op % 12 {
            0 => {
                w.streams += 1;
                let (tx, rx) = mpsc::channel(16);
                // Most calls answer a request, whose id goes into the event ids.
                let request = (op & 0x40 == 0).then(|| json!(w.streams));
                let out = w.sessions[s].resumable(rx, request.as_ref(), |v| v);
                w.producers.push(Producer {
                    session: s,
                    stream: w.streams,
                    tx: Some(tx),
                    sent: 0,
                });
                w.readers.push(Reader {
                    session: s,
                    rx: out,
                    expect: Expect::Fresh(w.streams),
                    stream: None,
                    last: None,
                    ended: false,
                    lost: false,
                    before_close: !w.closed[s],
                });
            }
            1 | 2 => {
                if let Some(i) = b.index(w.producers.len()) {
                    let p = &mut w.producers[i];
                    if let Some(tx) = &p.tx {
                        let t = Tag {
                            session: p.session,
                            stream: p.stream,
                            n: p.sent + 1,
                        };
                        if tx.try_send(StreamItem::Message(message(t))).is_ok() {
                            p.sent += 1;
                        }
                    }
                }
            }
            3 => {
                if let Some(i) = b.index(w.producers.len()) {
                    if let Some(tx) = &w.producers[i].tx {
                        let _ = tx.try_send(StreamItem::KeepAlive);
                    }
                }
            }
            4 => {
                if let Some(i) = b.index(w.producers.len()) {
                    w.producers[i].tx = None; // the call is over
                }
            }
            5 | 6 => {
                let t = Tag {
                    session: s,
                    stream: STANDALONE,
                    n: w.notified[s] + 1,
                };
                let session = w.sessions[s].clone();
                if tokio::time::timeout(Duration::from_secs(3600), session.notify(message(t)))
                    .await
                    .is_err()
                {
                    panic!("notify blocked although every reader keeps up");
                }
                w.notified[s] += 1;
            }
            7 => {
                if let Some(i) = b.index(w.readers.len()) {
                    w.readers.swap_remove(i); // the client goes away
                }
            }
            8 => w.open(s, None),
            9 => {
                if let Some(i) = b.index(w.seen.len()) {
                    let (from, id) = w.seen[i].clone();
                    // Usually on the session the id came from; sometimes on the other.
                    let on = if b.u8() % 8 == 0 { 1 - from } else { from };
                    w.open(on, Some(&id));
                }
            }
            10 => {
                let id = match b.index(w.seen.len()) {
                    Some(i) if b.u8() % 2 == 0 => {
                        let other = b
                            .index(w.seen.len())
                            .map(|j| w.seen[j].1.clone())
                            .unwrap_or_default();
                        mangle(&mut b, &w.seen[i].1.clone(), &other)
                    }
                    _ => b.string(),
                };
                w.open(s, Some(&id));
            }
            _ => match b.u8() % 4 {
                0 => {
                    w.sessions[s].close();
                    w.closed[s] = true;
                }
                n => tokio::time::advance(Duration::from_millis(u64::from(n) * 10 * wait)).await,
            },
        }
        w.settle().await;
    }
    // Every call ends: a finished stream's readers end.
    for p in &mut w.producers {
        p.tx = None;
    }
    w.settle().await;
    for r in &w.readers {
        let on_call_stream =
            matches!(r.expect, Expect::Fresh(_)) || r.stream.is_some_and(|s| s != STANDALONE);
        if on_call_stream {
            assert!(
                r.ended,
                "a finished stream's reader never ends: {:?}",
                r.expect
            );
        }
    }
    // The sessions end: every reader opened before that ends.
    for s in &w.sessions {
        s.close();
    }
    w.settle().await;
    for r in &w.readers {
        if r.before_close {
            assert!(r.ended, "a reader outlived its session: {:?}", r.expect);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    rt.block_on(run(data));
});
