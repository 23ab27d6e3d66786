//! Every task handle a client received, what it must end as, and what a client
//! saw of it; the clients that make the calls and the checks that read every
//! handle back.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::wire::{self, Conn, Endpoint};

/// The error of a task in flight when its (sled) tasklift was killed.
pub const RESTARTED: &str =
    "tasklift restarted while this task was running; the upstream outcome is unknown";
/// The error of a task whose replica was killed, set by another replica.
pub const LOST: &str = "the tasklift replica running this task was lost (its lease expired); the upstream outcome is unknown";

/// A small xorshift generator: seeded, printable, not cryptographic.
#[derive(Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// A number in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }
    /// A duration in `lo..hi`.
    pub fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let (a, b) = (lo.as_millis() as u64, hi.as_millis() as u64);
        Duration::from_millis(if b > a { self.range(a, b) } else { a })
    }
}

/// What the fixture's tool answers, so a stored outcome can be checked against it.
#[derive(Clone, Debug)]
pub enum Expect {
    /// `slow_compute`: completed, this text, no `isError`.
    Computed(String),
    /// `failing_job`: completed with `isError` and the fixture's message.
    ToolError,
    /// `protocol_error_job`: failed with the fixture's JSON-RPC error.
    RpcError,
}

/// A terminal task as `tasks/get` showed it: status, and the `result` and `error`
/// members as the bytes tasklift sent.
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    pub status: String,
    pub result: Option<String>,
    pub error: Option<String>,
}

impl Seen {
    fn error_message(&self) -> String {
        self.error
            .as_deref()
            .and_then(|e| serde_json::from_str::<Value>(e).ok())
            .and_then(|e| e["message"].as_str().map(str::to_string))
            .unwrap_or_default()
    }
}

/// One handle a client received.
pub struct Handle {
    pub tool: &'static str,
    pub expect: Expect,
    /// The process that answered the call (and runs it).
    pub gen: usize,
    pub created: Instant,
    /// How long the tool runs upstream.
    pub runs: Duration,
    /// The terminal state a client saw (under load, or in a check after a kill).
    pub seen: Option<Seen>,
    /// `seen` was seen by a client under load, before any later kill.
    pub seen_live: bool,
}

impl Handle {
    pub fn is_open(&self) -> bool {
        self.seen.is_none()
    }
}

/// What every part of a run shares.
#[derive(Default)]
pub struct State {
    pub handles: HashMap<String, Handle>,
    /// Handle ids in the order they were returned.
    pub order: Vec<String>,
    /// Processes alive, for the clients: (process number, endpoint).
    pub live: Vec<(usize, Endpoint)>,
    /// Processes killed, and when.
    pub dead: HashMap<usize, Instant>,
    /// PostgreSQL restarts: from when to when.
    pub db_restarts: Vec<(Instant, Instant)>,
    pub findings: Findings,
    pub fig: LoadFigures,
}

/// What the checks found wrong.
#[derive(Default)]
pub struct Findings {
    /// Handles `tasks/get` did not find, with the answer.
    pub missing: BTreeMap<String, String>,
    /// Tasks left `working`/`input_required` past their deadline.
    pub stuck: BTreeMap<String, String>,
    /// Terminal states that changed, or outcomes other than the upstream's.
    pub changed: BTreeMap<String, String>,
}

/// Counts kept while the clients and the checks run.
#[derive(Default)]
pub struct LoadFigures {
    pub calls: u64,
    pub sync_answers: u64,
    pub call_errors: u64,
    pub handle_checks: u64,
    pub seen_live: u64,
    pub terminal_rechecked: u64,
    /// In flight at a kill and failed for it (restart or lost replica error).
    pub orphans_failed: u64,
    /// Failed as "lost" (or with a store error) while their replica lived, during
    /// a PostgreSQL restart.
    pub failed_by_db_restart: u64,
    pub result_bytes: u64,
    pub largest_result: usize,
}

pub type Shared = Arc<Mutex<State>>;

/// How a terminal task compares with what its call must end as.
enum Verdict {
    Expected,
    Orphan,
    DbRestart,
    Wrong(String),
}

fn judge(st: &State, h: &Handle, seen: &Seen) -> Verdict {
    let died = st.dead.contains_key(&h.gen);
    if seen.status == "failed" {
        let msg = seen.error_message();
        if (msg == RESTARTED || msg == LOST) && died {
            return Verdict::Orphan;
        }
        let during_db_restart = st.db_restarts.iter().any(|(from, _)| *from >= h.created);
        if during_db_restart && !matches!(h.expect, Expect::RpcError) {
            return Verdict::DbRestart;
        }
    }
    let result: Value = seen
        .result
        .as_deref()
        .and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or(Value::Null);
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    let is_error = result["isError"] == json!(true);
    let ok = match &h.expect {
        Expect::Computed(want) => seen.status == "completed" && !is_error && text == want,
        Expect::ToolError => {
            seen.status == "completed" && is_error && text == "the job failed: disk quota exceeded"
        }
        Expect::RpcError => {
            seen.status == "failed"
                && seen
                    .error_message()
                    .contains("protocol_error_job always fails at the protocol level")
        }
    };
    if ok {
        Verdict::Expected
    } else {
        let r = seen.result.as_deref().map(|r| wire::snippet(r.as_bytes()));
        Verdict::Wrong(format!(
            "{} (process {}{}) ended {} with result {:?} error {:?}, not as the upstream answered ({:?})",
            h.tool,
            h.gen,
            if died { ", killed" } else { ", alive" },
            seen.status,
            r,
            seen.error,
            match &h.expect {
                Expect::Computed(t) => wire::snippet(t.as_bytes()),
                e => format!("{e:?}"),
            }
        ))
    }
}

/// Record a terminal state seen for the first time; `live` if by a client under load.
pub fn first_sight(st: &mut State, id: &str, seen: Seen, live: bool) {
    let Some(h) = st.handles.get(id) else { return };
    let verdict = judge(st, h, &seen);
    match verdict {
        Verdict::Expected => {}
        Verdict::Orphan => st.fig.orphans_failed += 1,
        Verdict::DbRestart => st.fig.failed_by_db_restart += 1,
        Verdict::Wrong(why) => {
            st.findings.changed.insert(id.to_string(), why);
        }
    }
    if let Some(r) = &seen.result {
        st.fig.result_bytes += r.len() as u64;
        st.fig.largest_result = st.fig.largest_result.max(r.len());
    }
    if live {
        st.fig.seen_live += 1;
    }
    let h = st.handles.get_mut(id).expect("present");
    h.seen = Some(seen);
    h.seen_live = live;
}

/// What `tasks/get` answered.
pub enum Got {
    Terminal(Seen),
    Open(String),
    /// A JSON-RPC error: the handle is not found.
    Error(String),
}

fn terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}

/// Read a `tasks/get` answer, keeping `result` and `error` as sent.
pub fn parse_get(text: &str) -> Result<Got, String> {
    let top: HashMap<String, Box<RawValue>> =
        serde_json::from_str(text).map_err(|e| format!("not JSON-RPC ({e}): {text:.200}"))?;
    if let Some(e) = top.get("error") {
        return Ok(Got::Error(e.get().to_string()));
    }
    let result = top
        .get("result")
        .ok_or_else(|| format!("no result: {text:.200}"))?;
    let task: HashMap<String, Box<RawValue>> =
        serde_json::from_str(result.get()).map_err(|e| format!("result: {e}"))?;
    let status: String = task
        .get("status")
        .and_then(|s| serde_json::from_str(s.get()).ok())
        .ok_or_else(|| format!("no status: {text:.200}"))?;
    if !terminal(&status) {
        return Ok(Got::Open(status));
    }
    Ok(Got::Terminal(Seen {
        status,
        result: task.get("result").map(|r| r.get().to_string()),
        error: task.get("error").map(|r| r.get().to_string()),
    }))
}

/// A client's connections, one per process, made again after an error.
#[derive(Default)]
pub struct Conns(HashMap<usize, Conn>);

impl Conns {
    async fn get(&mut self, gen: usize, ep: &Endpoint) -> anyhow::Result<&mut Conn> {
        if self.0.get(&gen).is_none_or(|c| c.is_closed()) {
            self.0.insert(gen, Conn::connect(ep).await?);
        }
        Ok(self.0.get_mut(&gen).expect("inserted"))
    }

    /// `tasks/get` on process `gen`; a transport error drops the connection.
    pub async fn get_task(&mut self, gen: usize, ep: &Endpoint, id: &str) -> anyhow::Result<Got> {
        let c = self.get(gen, ep).await?;
        match c.send(&wire::tasks_get(id)).await {
            Ok(a) => {
                let text = a
                    .message_text()
                    .ok_or_else(|| anyhow::anyhow!("HTTP {}: no response", a.status))?;
                parse_get(&text).map_err(anyhow::Error::msg)
            }
            Err(e) => {
                self.0.remove(&gen);
                Err(e)
            }
        }
    }

    /// Send `p` to process `gen`: its JSON-RPC result, or an error.
    async fn call(
        &mut self,
        gen: usize,
        ep: &Endpoint,
        p: &wire::Prepared,
    ) -> anyhow::Result<Value> {
        let c = self.get(gen, ep).await?;
        match c.result(p).await {
            Ok(v) => Ok(v),
            Err(e) => {
                self.0.remove(&gen);
                Err(e)
            }
        }
    }
}

/// A label of about `len` bytes, unique to this call, so that a result given to
/// the wrong task, cut short or altered is seen.
fn label(rng: &mut Rng, tag: &str, len: usize) -> String {
    const ABC: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut s = String::with_capacity(len + tag.len());
    s.push_str(tag);
    while s.len() < len {
        s.push(ABC[(rng.next() % ABC.len() as u64) as usize] as char);
    }
    s
}

/// A result size: mostly small, some stored as files (over 64 KiB in sled).
fn label_len(rng: &mut Rng) -> usize {
    match rng.range(0, 100) {
        0..40 => 16,
        40..65 => 1_000,
        65..85 => 10_000,
        85..94 => 100_000,
        94..99 => 300_000,
        _ => 1_000_000,
    }
}

/// `tool` with `args`, what it must end as and how long it runs.
pub struct Call {
    pub tool: &'static str,
    pub args: Value,
    pub expect: Expect,
    pub runs: Duration,
}

/// A `slow_compute` of `secs` seconds.
pub fn compute(rng: &mut Rng, tag: &str, secs: f64) -> Call {
    let len = label_len(rng);
    compute_sized(rng, tag, secs, len)
}

/// A `slow_compute` of `secs` seconds whose result carries a label of about `len`
/// bytes.
pub fn compute_sized(rng: &mut Rng, tag: &str, secs: f64, len: usize) -> Call {
    let l = label(rng, tag, len);
    Call {
        tool: "slow_compute",
        expect: Expect::Computed(format!("computed {l} in {secs} s")),
        args: json!({"seconds": secs, "label": l}),
        runs: Duration::from_secs_f64(secs),
    }
}

fn pick_call(rng: &mut Rng, tag: &str) -> Option<Call> {
    Some(match rng.range(0, 10) {
        // Answered before the threshold: no handle.
        0 | 1 => return None,
        2 => Call {
            tool: "failing_job",
            args: json!({}),
            expect: Expect::ToolError,
            runs: Duration::from_secs(1),
        },
        3 => Call {
            tool: "protocol_error_job",
            args: json!({}),
            expect: Expect::RpcError,
            runs: Duration::from_millis(500),
        },
        _ => {
            let secs = rng.range(2, 25) as f64 / 10.0;
            compute(rng, tag, secs)
        }
    })
}

/// How a call was answered.
pub enum Answered {
    /// A task handle (recorded in the book).
    Task(String),
    /// Synchronously: the `tools/call` result.
    Sync(Value),
}

/// Make `call` on a live process (`on`, or one picked at random); records the
/// handle if the answer is one.
pub async fn make_call(
    shared: &Shared,
    conns: &mut Conns,
    rng: &mut Rng,
    call: Option<Call>,
    on: Option<usize>,
) -> anyhow::Result<Answered> {
    let target = {
        let st = shared.lock().unwrap();
        match on {
            Some(g) => st.live.iter().find(|(x, _)| *x == g).cloned(),
            None if st.live.is_empty() => None,
            None => Some(st.live[(rng.next() % st.live.len() as u64) as usize].clone()),
        }
    };
    let Some((gen, ep)) = target else {
        anyhow::bail!("no live process");
    };
    let p = match &call {
        Some(c) => wire::tool_call(c.tool, c.args.clone(), true),
        None => wire::tool_call("greet", json!({"name": "crash"}), true),
    };
    let created = Instant::now();
    shared.lock().unwrap().fig.calls += 1;
    let r = match conns.call(gen, &ep, &p).await {
        Ok(r) => r,
        Err(e) => {
            shared.lock().unwrap().fig.call_errors += 1;
            return Err(e);
        }
    };
    let mut st = shared.lock().unwrap();
    if r["resultType"] != "task" {
        st.fig.sync_answers += 1;
        return Ok(Answered::Sync(r));
    }
    let (Some(id), Some(c)) = (r["taskId"].as_str(), call) else {
        anyhow::bail!("a handle for greet, or without taskId: {r}");
    };
    st.order.push(id.to_string());
    st.handles.insert(
        id.to_string(),
        Handle {
            tool: c.tool,
            expect: c.expect,
            gen,
            created,
            runs: c.runs,
            seen: None,
            seen_live: false,
        },
    );
    Ok(Answered::Task(id.to_string()))
}

/// A client: calls of every kind, with short pauses, until `stop`.
pub async fn client(shared: Shared, stop: Arc<AtomicBool>, seed: u64, tag: String) {
    let mut rng = Rng(seed | 1);
    let mut conns = Conns::default();
    let n = AtomicU64::new(0);
    while !stop.load(Ordering::Relaxed) {
        let t = format!("{tag}n{}-", n.fetch_add(1, Ordering::Relaxed));
        let call = pick_call(&mut rng, &t);
        if make_call(&shared, &mut conns, &mut rng, call, None)
            .await
            .is_err()
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        tokio::time::sleep(Duration::from_millis(rng.range(10, 150))).await;
    }
}

/// The handles not yet seen terminal, in the order they were given, and the
/// tasklift processes alive now.
pub fn open_handles(shared: &Shared) -> (Vec<String>, Vec<(usize, Endpoint)>) {
    let st = shared.lock().unwrap();
    let open = st
        .order
        .iter()
        .filter(|id| st.handles[*id].is_open())
        .cloned()
        .collect();
    (open, st.live.clone())
}

/// A poller: `tasks/get` on the handles not yet seen terminal, as a client waiting
/// for its results does, until `stop`.
pub async fn poller(shared: Shared, stop: Arc<AtomicBool>, seed: u64) {
    let mut rng = Rng(seed | 1);
    let mut conns = Conns::default();
    while !stop.load(Ordering::Relaxed) {
        let (open, live) = open_handles(&shared);
        if live.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        for id in open {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let (gen, ep) = &live[(rng.next() % live.len() as u64) as usize];
            if let Ok(Got::Terminal(seen)) = conns.get_task(*gen, ep, &id).await {
                let mut st = shared.lock().unwrap();
                if st.handles.get(&id).is_some_and(Handle::is_open) {
                    first_sight(&mut st, &id, seen, true);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `tasks/get` on a live process, trying others (and again) on transport errors.
async fn get_any(
    shared: &Shared,
    conns: &mut Conns,
    rng: &mut Rng,
    id: &str,
) -> anyhow::Result<Got> {
    let mut last = None;
    for attempt in 0..8 {
        let live = shared.lock().unwrap().live.clone();
        if live.is_empty() {
            anyhow::bail!("no live process");
        }
        let (gen, ep) = &live[(rng.next() % live.len() as u64) as usize];
        match conns.get_task(*gen, ep, id).await {
            Ok(g) => return Ok(g),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(50 * (attempt + 1))).await;
    }
    Err(last.expect("tried"))
}

/// Wait until the open tasks of the killed process `gen` are terminal, or until
/// `deadline` (then they are stuck). The longest time from `killed` to a task seen
/// terminal, and how many there were.
pub async fn settle_dead(
    shared: &Shared,
    gen: usize,
    killed: Instant,
    deadline: Instant,
    why: &str,
) -> (Duration, usize) {
    let mut conns = Conns::default();
    let mut rng = Rng(gen as u64 * 7919 + 1);
    let mut slowest = Duration::ZERO;
    let mut count = 0;
    loop {
        let open: Vec<String> = {
            let st = shared.lock().unwrap();
            st.order
                .iter()
                .filter(|id| st.handles[*id].gen == gen && st.handles[*id].is_open())
                .cloned()
                .collect()
        };
        if open.is_empty() {
            return (slowest, count);
        }
        let past = Instant::now() >= deadline;
        for id in open {
            match get_any(shared, &mut conns, &mut rng, &id).await {
                Ok(Got::Terminal(seen)) => {
                    slowest = slowest.max(killed.elapsed());
                    count += 1;
                    let mut st = shared.lock().unwrap();
                    if st.handles[&id].is_open() {
                        first_sight(&mut st, &id, seen, false);
                    }
                }
                Ok(Got::Open(status)) if past => {
                    let mut st = shared.lock().unwrap();
                    st.findings.stuck.insert(
                        id.clone(),
                        format!(
                            "still {status} {:.1} s after its process {gen} was killed ({why})",
                            killed.elapsed().as_secs_f64()
                        ),
                    );
                    mark_unchecked(&mut st, &id);
                }
                Ok(Got::Error(e)) if past => {
                    let mut st = shared.lock().unwrap();
                    st.findings.missing.insert(id.clone(), e);
                    mark_unchecked(&mut st, &id);
                }
                Err(e) if past => {
                    let mut st = shared.lock().unwrap();
                    st.findings
                        .stuck
                        .insert(id.clone(), format!("tasks/get failed: {e:#}"));
                    mark_unchecked(&mut st, &id);
                }
                _ => {}
            }
        }
        if past {
            return (slowest, count);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Stop waiting on a handle already reported (its state is unknown).
fn mark_unchecked(st: &mut State, id: &str) {
    if let Some(h) = st.handles.get_mut(id) {
        h.seen = Some(Seen {
            status: "unknown".into(),
            result: None,
            error: None,
        });
    }
}

/// Read every handle ever returned back, on `workers` connections: found, a
/// terminal state unchanged since a client saw it, an outcome the upstream gave
/// (or the kill's error), nothing open past its deadline (`grace` after the tool
/// would have ended). How many were checked.
pub async fn check_all(shared: &Shared, workers: usize, grace: Duration) -> usize {
    check_where(shared, workers, grace, |_| true).await
}

/// [`check_all`] for the handles `keep` accepts.
pub async fn check_where(
    shared: &Shared,
    workers: usize,
    grace: Duration,
    keep: impl Fn(&Handle) -> bool,
) -> usize {
    let ids: Vec<String> = {
        let st = shared.lock().unwrap();
        st.order
            .iter()
            .filter(|id| keep(&st.handles[*id]))
            .cloned()
            .collect()
    };
    let n = ids.len();
    let queue = Arc::new(Mutex::new(ids));
    let mut set = tokio::task::JoinSet::new();
    for w in 0..workers {
        let (shared, queue) = (shared.clone(), queue.clone());
        set.spawn(async move {
            let mut conns = Conns::default();
            let mut rng = Rng(w as u64 * 104_729 + 3);
            loop {
                let Some(id) = queue.lock().unwrap().pop() else {
                    return;
                };
                let got = get_any(&shared, &mut conns, &mut rng, &id).await;
                let mut st = shared.lock().unwrap();
                st.fig.handle_checks += 1;
                let h = &st.handles[&id];
                let (gen, created, runs, prior) = (h.gen, h.created, h.runs, h.seen.clone());
                if prior.as_ref().is_some_and(|s| s.status == "unknown") {
                    continue; // reported already
                }
                match got {
                    Ok(Got::Terminal(seen)) => match prior {
                        Some(before) => {
                            st.fig.terminal_rechecked += 1;
                            if before != seen {
                                let why = describe_change(&before, &seen, st.handles[&id].seen_live);
                                st.findings.changed.insert(id.clone(), why);
                                st.handles.get_mut(&id).expect("present").seen = Some(seen);
                            }
                        }
                        None => first_sight(&mut st, &id, seen, false),
                    },
                    Ok(Got::Open(status)) => {
                        if let Some(s) = prior {
                            st.findings.changed.insert(
                                id.clone(),
                                format!("was {} and is {status} again", s.status),
                            );
                        } else {
                            let late = match st.dead.get(&gen) {
                                Some(killed) => killed.elapsed() > grace,
                                None => created.elapsed() > runs + grace,
                            };
                            if late {
                                let killed = st.dead.contains_key(&gen);
                                st.findings.stuck.insert(
                                    id.clone(),
                                    format!(
                                        "{status} {:.1} s after it was created (runs {:.1} s, process {gen}{})",
                                        created.elapsed().as_secs_f64(),
                                        runs.as_secs_f64(),
                                        if killed { ", killed" } else { "" }
                                    ),
                                );
                                mark_unchecked(&mut st, &id);
                            }
                        }
                    }
                    Ok(Got::Error(e)) => {
                        st.findings.missing.insert(id.clone(), e);
                        mark_unchecked(&mut st, &id);
                    }
                    Err(e) => {
                        st.findings
                            .missing
                            .insert(id.clone(), format!("tasks/get failed: {e:#}"));
                        mark_unchecked(&mut st, &id);
                    }
                }
            }
        });
    }
    while set.join_next().await.is_some() {}
    n
}

fn describe_change(before: &Seen, now: &Seen, live: bool) -> String {
    let when = if live {
        "seen under load"
    } else {
        "seen by a check after a kill"
    };
    if before.status != now.status {
        return format!("{when} {}, now {}", before.status, now.status);
    }
    let len = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    format!(
        "{when} {}: result {} → {} bytes, error {:?} → {:?}",
        before.status,
        len(&before.result),
        len(&now.result),
        before.error,
        now.error
    )
}

/// Ids and reasons, the first few.
pub fn first_few(m: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    for (id, why) in m.iter().take(10) {
        out.push_str(&format!("\n    {id}: {why}"));
    }
    if m.len() > 10 {
        out.push_str(&format!("\n    … and {} more", m.len() - 10));
    }
    out
}
