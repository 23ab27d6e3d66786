//! Crash safety with `kill -9`: the real `tasklift serve` binary, under load from
//! several clients, is SIGKILLed at random moments and restarted on the same data
//! directory, 20 times. After each restart:
//! 1. the store opens (`/readyz` answers 200);
//! 2. every task handle a client received before any kill is found by `tasks/get`;
//! 3. every task a client saw terminal keeps its status and its result or error;
//! 4. no task stays `working` or `input_required`: those in flight at the kill are
//!    `failed`, saying tasklift restarted and the upstream outcome is unknown.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tasklift::cli::client::Client;
use tasklift_fixture::{FixtureServer, Tool};

use crate::support::proc::Proc;

const KILLS: usize = 20;
const CALLERS: usize = 5;
const RESTART_MESSAGE: &str =
    "tasklift restarted while this task was running; the upstream outcome is unknown";

/// A small xorshift generator: the test needs no cryptographic randomness, only a
/// seed it can print.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// A number in `lo..hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

/// `tasklift serve` on `data` in front of `upstream`.
async fn start(upstream: &str, data: &Path) -> Proc {
    let args = [
        "serve",
        "--upstream",
        upstream,
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data.to_str().unwrap(),
        "--threshold",
        "100ms",
        "--poll-interval",
        "50ms",
    ];
    Proc::start(&args, "(1) after a kill").await
}

/// What the clients learned about one task before a kill.
#[derive(Debug, Clone)]
struct Known {
    tool: String,
    /// The task as last seen terminal by `tasks/get` (status, result, error), if ever.
    terminal: Option<Value>,
    /// `terminal` was seen under load, before a kill (not by a check after one).
    live: bool,
}

type Book = Arc<Mutex<HashMap<String, Known>>>;

fn is_terminal(t: &Value) -> bool {
    matches!(
        t["status"].as_str(),
        Some("completed" | "failed" | "cancelled")
    )
}

/// The parts of a terminal task that must survive a crash unchanged.
fn snapshot(t: &Value) -> Value {
    json!({"status": t["status"], "result": t["result"], "error": t["error"]})
}

/// One caller: tool calls of every kind until `stop`, recording each handle received.
async fn caller(url: String, book: Book, stop: Arc<AtomicBool>, seed: u64) {
    let mut rng = Rng(seed | 1);
    let c = Client::new(&url).unwrap();
    while !stop.load(Ordering::Relaxed) {
        let (tool, args) = match rng.range(0, 10) {
            // Fast: answered before the threshold, nothing stored.
            0 | 1 => ("greet", json!({"name": "crash"})),
            2 => ("slow_compute", json!({"seconds": 0.01})),
            3 => ("failing_job", json!({})),
            4 => ("protocol_error_job", json!({})),
            5 => ("big_job", json!({"seconds": rng.range(1, 8) as f64 / 10.0})),
            _ => (
                "slow_compute",
                json!({"seconds": rng.range(1, 15) as f64 / 10.0, "label": format!("s{seed}")}),
            ),
        };
        let Ok(answer) = c.call_tool(tool, args).await else {
            // The proxy is gone (killed); the round ends.
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        if answer.result["resultType"] == "task" {
            let id = answer.result["taskId"]
                .as_str()
                .expect("taskId")
                .to_string();
            book.lock().unwrap().insert(
                id,
                Known {
                    tool: tool.into(),
                    terminal: None,
                    live: false,
                },
            );
        }
    }
}

/// One poller: `tasks/get` on the handles not yet seen terminal, recording what a
/// client saw terminal.
async fn poller(url: String, book: Book, stop: Arc<AtomicBool>) {
    let c = Client::new(&url).unwrap();
    while !stop.load(Ordering::Relaxed) {
        let open: Vec<String> = book
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, k)| k.terminal.is_none())
            .map(|(id, _)| id.clone())
            .collect();
        for id in open {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            if let Ok(t) = c.get_task(&id).await {
                if is_terminal(&t) {
                    if let Some(k) = book.lock().unwrap().get_mut(&id) {
                        k.terminal = Some(snapshot(&t));
                        k.live = true;
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[derive(Default)]
struct Figures {
    kills: usize,
    handles_checked: usize,
    terminal_checked: usize,
    live_terminal_checked: usize,
    orphans_failed: usize,
    restarts_ms: Vec<u128>,
}

/// After a restart: checks (2)–(4) on every handle ever returned; the task as now
/// seen (terminal) becomes what later restarts must keep.
async fn check_all(url: &str, book: &Book, round: usize, seed: u64, fig: &mut Figures) {
    let c = Client::new(url).unwrap();
    let known: Vec<(String, Known)> = book
        .lock()
        .unwrap()
        .iter()
        .map(|(a, b)| (a.clone(), b.clone()))
        .collect();
    for (id, k) in known {
        let ctx = format!("after kill {round} (seed {seed}), task {id} ({})", k.tool);
        let t = match c.get_task(&id).await {
            Ok(t) => t,
            Err(e) => panic!("(2) a returned handle is lost {ctx}: tasks/get: {e}"),
        };
        fig.handles_checked += 1;
        let status = t["status"].as_str().unwrap_or_default();
        assert!(
            is_terminal(&t),
            "(4) task still {status:?} after the restart {ctx}: {t}"
        );
        match &k.terminal {
            Some(seen) => {
                assert_eq!(
                    &snapshot(&t),
                    seen,
                    "(3) a task seen terminal changed {ctx}"
                );
                fig.terminal_checked += 1;
                if k.live {
                    fig.live_terminal_checked += 1;
                }
            }
            None => {
                let restarted = t["error"]["message"] == RESTART_MESSAGE;
                if restarted {
                    assert_eq!(status, "failed", "{ctx}: {t}");
                    fig.orphans_failed += 1;
                } else if status == "failed" {
                    // Only the tool that fails on its own may fail otherwise.
                    assert_eq!(
                        k.tool, "protocol_error_job",
                        "(4) a task failed without the restart error {ctx}: {t}"
                    );
                }
            }
        }
        let mut b = book.lock().unwrap();
        let k = b.get_mut(&id).unwrap();
        k.terminal = Some(snapshot(&t));
        k.live = false;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_keeps_handles_and_results_and_fails_orphans() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("crash test seed: {seed}");
    let mut rng = Rng(seed);
    let upstream = FixtureServer::demo()
        // Outcomes too large for a sled record: stored as result files.
        .tool(
            Tool::new("big_job")
                .sleep_arg("seconds", 0.3)
                .pad_to(20_000)
                .reply(|_| "big result".into()),
        )
        .start("127.0.0.1:0".parse().unwrap())
        .await
        .expect("fixture starts");
    let upstream_url = upstream.url();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let book: Book = Arc::default();
    let mut fig = Figures::default();
    let started = Instant::now();
    let mut proc = start(&upstream_url, &data).await;
    for round in 1..=KILLS {
        let stop = Arc::new(AtomicBool::new(false));
        // One long task per round: certainly in flight at the kill.
        let long = Client::new(&proc.url).unwrap();
        let a = long
            .call_tool("slow_compute", json!({"seconds": 30, "label": "long"}))
            .await
            .expect("long call");
        assert_eq!(a.result["resultType"], "task", "{}", a.result);
        book.lock().unwrap().insert(
            a.result["taskId"].as_str().unwrap().to_string(),
            Known {
                tool: "slow_compute".into(),
                terminal: None,
                live: false,
            },
        );
        let mut load = Vec::new();
        for i in 0..CALLERS {
            let s = rng.next();
            load.push(tokio::spawn(caller(
                proc.url.clone(),
                book.clone(),
                stop.clone(),
                s ^ i as u64,
            )));
        }
        for _ in 0..2 {
            load.push(tokio::spawn(poller(
                proc.url.clone(),
                book.clone(),
                stop.clone(),
            )));
        }
        tokio::time::sleep(Duration::from_millis(rng.range(150, 1200))).await;
        proc.kill9();
        fig.kills += 1;
        stop.store(true, Ordering::Relaxed);
        for l in load {
            tokio::time::timeout(Duration::from_secs(15), l)
                .await
                .expect("clients stop after the kill")
                .unwrap();
        }
        let t0 = Instant::now();
        proc = start(&upstream_url, &data).await;
        fig.restarts_ms.push(t0.elapsed().as_millis());
        check_all(&proc.url, &book, round, seed, &mut fig).await;
    }
    proc.kill9();
    upstream.stop().await;
    let max_restart = fig.restarts_ms.iter().max().copied().unwrap_or(0);
    eprintln!(
        "crash test (seed {seed}): {} kills, {} distinct tasks, {} handle checks, \
         {} terminal-state checks ({} of states seen under load before a kill), {} orphans failed at restart, slowest restart {max_restart} ms, \
         {:.1} s in all",
        fig.kills,
        book.lock().unwrap().len(),
        fig.handles_checked,
        fig.terminal_checked,
        fig.live_terminal_checked,
        fig.orphans_failed,
        started.elapsed().as_secs_f64()
    );
    assert_eq!(fig.kills, KILLS);
    // Each round's long task was in flight at its kill.
    assert!(
        fig.orphans_failed >= KILLS,
        "only {} orphans failed",
        fig.orphans_failed
    );
    assert!(fig.terminal_checked > 0 && fig.live_terminal_checked > 0);
}
