//! The upstream fault matrix: tasklift in front of a real upstream (the modern
//! fixture) through a fault-injecting proxy (`support/fault_proxy.rs`). For each
//! fault: what a synchronous caller sees (a client without the tasks extension),
//! what a call that became a task ends as, that no task is left `working`, and that
//! the next call works once the fault clears.
//!
//! A task is made deterministically: the fault is held at the proxy until the
//! handle is back (`set_held`, then `release`), so no timing decides whether a
//! call became a task.

use std::time::Duration;

use serde_json::{json, Value};
use tasklift::cli::client::{Answer, ClientError};
use tasklift::config::{RawConfig, RawToolRule};
use tasklift::store::TaskStatus;
use tasklift_fixture::{FixtureServer, Tool};
use tasklift_protocol::jsonrpc::RpcError;

use crate::support::fault_proxy::{Fault, FaultProxy};
use crate::support::harness::*;
use crate::support::mock::tls_front;

/// The upstream's name in tasklift's configuration, which every error must name.
const NAME: &str = "backend";

/// The code of every upstream failure tasklift reports.
const UPSTREAM_ERROR: i64 = -32010;

fn upstream() -> FixtureServer {
    FixtureServer::new()
        .modern()
        .tool(Tool::new("echo"))
        .tool(
            Tool::new("slow")
                .sleep(Duration::from_secs(1))
                .reply(|_| "slow done".into()),
        )
        // Sends one progress event at once, then runs for an hour: a response
        // stream that is open and has carried something.
        .tool(Tool::new("stream").script(|cx| async move {
            cx.progress(1, 2, "halfway");
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(json!({"content": []}))
        }))
}

/// tasklift in front of the fixture, through the proxy.
struct Bench {
    h: Harness,
    proxy: FaultProxy,
}

impl Bench {
    async fn start(tweak: impl FnOnce(&mut RawConfig)) -> Self {
        let up = upstream()
            .start("127.0.0.1:0".parse().unwrap())
            .await
            .expect("fixture starts");
        let proxy = FaultProxy::start(&up.url()).await;
        let url = proxy.url();
        Self::front(up, proxy, &url, tweak).await
    }

    async fn front(
        up: FixtureServer,
        proxy: FaultProxy,
        url: &str,
        tweak: impl FnOnce(&mut RawConfig),
    ) -> Self {
        let h = Harness::front(up, url, tempfile::tempdir().unwrap(), |c| {
            c.upstreams[0].name = NAME.into();
            c.server.keepalive_interval = "100ms".into();
            tweak(c);
        })
        .await;
        Self { h, proxy }
    }

    /// A fast call works, for a caller with and without the tasks extension.
    async fn works(&self, when: &str) {
        for c in [self.h.plain_client(), self.h.client()] {
            let a = guarded(when, c.call_tool("echo", json!({}))).await;
            let a = a.unwrap_or_else(|e| panic!("{when}: the call fails: {e}"));
            assert_eq!(a.result["content"][0]["text"], "echo done", "{when}");
        }
    }

    /// The error a caller without the tasks extension gets for `tool`.
    async fn sync_error(&self, tool: &str) -> RpcError {
        rpc_err(
            guarded(
                "a sync call",
                self.h.plain_client().call_tool(tool, json!({})),
            )
            .await,
        )
    }

    /// Call `tool` as a caller that declares the extension; the answer is a handle.
    async fn task_of(&self, tool: &str) -> String {
        let a = guarded("a task call", self.h.client().call_tool(tool, json!({})))
            .await
            .expect("a handle");
        assert_eq!(a.result["resultType"], "task", "{}", a.result);
        a.result["taskId"].as_str().unwrap().to_string()
    }

    /// Wait for the task to end; it must end `failed`. Its error.
    async fn failed(&self, id: &str) -> Value {
        let t = wait_terminal(&self.h.client(), id, Duration::from_secs(30)).await;
        assert_eq!(t["status"], "failed", "{t}");
        t["error"].clone()
    }

    /// The engine runs no task, and none in the store is `working` or
    /// `input_required`.
    async fn nothing_working(&self) {
        let p = self.h.proxy.as_ref().unwrap();
        // A driver lets go of its task just after writing its end.
        eventually("no task driver runs", GUARD, || {
            p.engine.running_count() == 0
        })
        .await;
        let counts = p.engine.counts().await.unwrap();
        for (status, n) in counts {
            assert!(
                !matches!(status, TaskStatus::Working | TaskStatus::InputRequired) || n == 0,
                "{n} tasks still {}",
                status.as_str()
            );
        }
    }

    /// The whole row of the matrix for a fault that ends the call with an error:
    /// a sync caller's error, a task's end, nothing left working, and the next
    /// call once the fault clears. `words` must all be in both messages (besides
    /// the upstream's name).
    async fn row(&self, fault: Fault, tool: &str, words: &[&str]) {
        let what = format!("{fault:?}");
        self.proxy.set(fault.clone()).await;
        let e = self.sync_error(tool).await;
        assert_eq!(e.code, UPSTREAM_ERROR, "{what}: {e:?}");
        names(&e.message, words, &what);

        self.proxy.set_held(fault).await;
        let before = self.proxy.faulted();
        let id = self.task_of(tool).await;
        if tool == "stream" {
            // The response stream carried its first event before it broke.
            let c = self.h.client();
            crate::support::input::wait_for(&c, &id, "progress", |t| {
                t["statusMessage"]
                    .as_str()
                    .is_some_and(|m| m.contains("halfway"))
            })
            .await;
        }
        self.proxy.wait_faulted(before + 1).await;
        self.proxy.release();
        let err = self.failed(&id).await;
        assert_eq!(err["code"], UPSTREAM_ERROR, "{what}: {err}");
        names(err["message"].as_str().unwrap(), words, &what);
        self.nothing_working().await;

        self.proxy.set(Fault::Pass).await;
        self.works(&format!("after {what} cleared")).await;
    }

    async fn stop(self) {
        self.h.stop().await;
    }
}

fn rpc_err(r: Result<Answer, ClientError>) -> RpcError {
    match r {
        Err(ClientError::Rpc(e)) => e,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

/// `message` names the upstream and says each of `words` (case aside).
fn names(message: &str, words: &[&str], what: &str) {
    let lower = message.to_lowercase();
    assert!(
        message.contains(&format!("upstream {NAME}")),
        "{what}: the error does not name the upstream: {message}"
    );
    for w in words {
        assert!(
            lower.contains(&w.to_lowercase()),
            "{what}: the error does not say {w:?}: {message}"
        );
    }
}

#[tokio::test]
async fn a_refused_connection_is_unreachable_and_makes_no_task() {
    let b = Bench::start(|_| {}).await;
    b.works("before the fault").await;
    b.proxy.set(Fault::Refuse).await;
    // Nothing ran upstream, so there is nothing to make a task of: a caller that
    // declared the extension gets the same error at once.
    for c in [b.h.plain_client(), b.h.client()] {
        let e = rpc_err(guarded("a refused call", c.call_tool("slow", json!({}))).await);
        assert_eq!(e.code, UPSTREAM_ERROR, "{e:?}");
        names(&e.message, &["unreachable", "refused"], "refused");
    }
    assert_eq!(stored_tasks(&b.h).await, 0);
    b.nothing_working().await;
    b.proxy.set(Fault::Pass).await;
    b.works("after the port listens again").await;
    b.stop().await;
}

#[tokio::test]
async fn a_reset_before_the_response_headers_says_the_request_may_have_run() {
    let b = Bench::start(|_| {}).await;
    b.works("before the fault").await;
    b.row(
        Fault::ResetBeforeHeaders,
        "slow",
        &[
            "dropped the connection before answering",
            "may have reached it",
            "connection error",
        ],
    )
    .await;
    b.stop().await;
}

#[tokio::test]
async fn a_reset_mid_sse_fails_the_call_naming_the_broken_stream() {
    let b = Bench::start(|_| {}).await;
    b.works("before the fault").await;
    b.row(
        Fault::ResetMidBody,
        "stream",
        &[
            "response stream broke before the answer",
            "error reading the body",
            "reset",
        ],
    )
    .await;
    b.stop().await;
}

#[tokio::test]
async fn garbage_instead_of_http_is_named_as_such() {
    let b = Bench::start(|_| {}).await;
    b.works("before the fault").await;
    b.row(Fault::Garbage, "slow", &["not http", "invalid answer head"])
        .await;
    b.stop().await;
}

#[tokio::test]
async fn http_errors_are_passed_on_naming_the_status() {
    let b = Bench::start(|_| {}).await;
    b.works("before the fault").await;
    for code in [500, 502, 503, 429] {
        let status = format!("HTTP {code}");
        b.row(
            Fault::Status(code, None),
            "slow",
            &[status.as_str(), "the proxy answers"],
        )
        .await;
    }
    // A Retry-After longer than tasklift waits out is passed on, with the wait.
    for code in [503, 429] {
        let status = format!("HTTP {code}");
        let before = b.proxy.faulted();
        b.row(
            Fault::Status(code, Some("120")),
            "slow",
            &[status.as_str(), "Retry-After: 120"],
        )
        .await;
        assert_eq!(
            b.proxy.faulted() - before,
            2,
            "one request for the sync call, one for the task: none was sent again"
        );
    }
    b.stop().await;
}

#[tokio::test]
async fn a_short_retry_after_is_waited_out_and_the_request_sent_again() {
    let b = Bench::start(|_| {}).await;
    b.works("before the fault").await;
    for code in [429, 503] {
        // Refused once, then served: the caller sees only the result.
        b.proxy.set_times(Fault::Status(code, Some("1")), 1).await;
        let (requests, faulted) = (b.proxy.requests(), b.proxy.faulted());
        let a = guarded(
            "a retried call",
            b.h.plain_client().call_tool("echo", json!({})),
        )
        .await
        .unwrap();
        assert_eq!(a.result["content"][0]["text"], "echo done");
        assert_eq!(b.proxy.faulted() - faulted, 1, "refused once");
        assert_eq!(b.proxy.requests() - requests, 2, "refused, then sent again");
        // The same for a call that becomes a task while it waits.
        b.proxy.set_times(Fault::Status(code, Some("1")), 1).await;
        let id = b.task_of("slow").await;
        let t = wait_terminal(&b.h.client(), &id, Duration::from_secs(30)).await;
        assert_eq!(t["status"], "completed", "{t}");
        assert_eq!(t["result"]["content"][0]["text"], "slow done");
    }
    // An upstream that keeps refusing: a bounded number of tries (the first and
    // two more), then the refusal is passed on.
    b.proxy.set(Fault::Status(503, Some("1"))).await;
    let before = b.proxy.faulted();
    let e = b.sync_error("echo").await;
    names(&e.message, &["HTTP 503", "Retry-After: 1"], "503 for good");
    assert_eq!(b.proxy.faulted() - before, 3, "tried three times");
    b.nothing_working().await;
    b.proxy.set(Fault::Pass).await;
    b.works("after the refusals stop").await;
    b.stop().await;
}

/// An upstream that never answers: the response never ends (headers, then
/// nothing) or never starts. A task fails at its TTL naming the upstream; a sync
/// caller keeps getting keep-alives, and leaving closes the upstream connection.
#[tokio::test]
async fn an_upstream_that_never_answers_fails_the_task_at_its_ttl() {
    let b = Bench::start(|c| {
        c.tasks.sweep_interval = "100ms".into();
        c.upstreams[0].tools.insert(
            "stream".into(),
            RawToolRule {
                ttl: Some("2s".into()),
                ..Default::default()
            },
        );
    })
    .await;
    b.works("before the fault").await;
    for fault in [Fault::NeverEnds, Fault::Hang] {
        let what = format!("{fault:?}");
        b.proxy.set(fault).await;
        let id = b.task_of("stream").await;
        let err = b.failed(&id).await;
        assert_eq!(err["code"], UPSTREAM_ERROR, "{what}: {err}");
        names(
            err["message"].as_str().unwrap(),
            &[
                "did not answer within the task's TTL of 2000 ms",
                "cancelled",
            ],
            &what,
        );
        b.nothing_working().await;
        eventually("the upstream connection is closed", GUARD, || {
            b.proxy.open() == 0
        })
        .await;

        let mut s = Post::new(&b.h.url, 1, "tools/call", json!({"name": "stream"}), false)
            .open()
            .await;
        assert_eq!(s.status, 200);
        guarded(
            "keep-alives",
            s.read_until("a keep-alive", |seen| seen.contains(':')),
        )
        .await;
        eventually("the call waits upstream", GUARD, || b.proxy.open() == 1).await;
        drop(s);
        eventually("leaving closes the upstream connection", GUARD, || {
            b.proxy.open() == 0
        })
        .await;
        b.proxy.set(Fault::Pass).await;
        b.works(&format!("after {what} cleared")).await;
    }
    b.stop().await;
}

#[tokio::test]
async fn a_slow_drip_is_slow_but_not_a_fault() {
    let b = Bench::start(|_| {}).await;
    b.works("before the drip").await;
    b.proxy.set(Fault::Drip(Duration::from_millis(2))).await;
    let a = guarded(
        "a dripped call",
        b.h.plain_client().call_tool("echo", json!({})),
    )
    .await
    .unwrap();
    assert_eq!(a.result["content"][0]["text"], "echo done");
    let id = b.task_of("slow").await;
    let t = wait_terminal(&b.h.client(), &id, Duration::from_secs(60)).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(t["result"]["content"][0]["text"], "slow done");
    assert_eq!(b.proxy.faulted(), 2, "both answers dripped");
    b.nothing_working().await;
    b.stop().await;
}

/// `https://` upstream: the proxy sits in front of a TLS front with a certificate
/// tasklift trusts (`ca_file`). A server that answers the handshake in plain HTTP
/// (or with noise) fails the handshake; a TLS failure is named as one.
#[tokio::test]
async fn a_tls_handshake_failure_is_named_and_clears() {
    let up = upstream()
        .start("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let backend = up.url().trim_start_matches("http://").replace("/mcp", "");
    let (tls_url, pem) = tls_front(backend).await;
    let proxy = FaultProxy::start(&tls_url).await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, pem).unwrap();
    let ca_file = ca.display().to_string();
    let url = proxy.https_url();
    // The era is set: a held handshake is then part of the call, not of a probe
    // that comes before the threshold.
    let b = Bench::front(up, proxy, &url, |c| {
        c.upstreams[0].ca_file = ca_file;
        c.upstreams[0].era = "modern".into();
    })
    .await;
    // TLS connections are not closed after each request like plain ones, so the
    // faults come first, before any connection could be pooled.
    let words = ["unreachable", "TLS handshake failed"];
    for fault in [Fault::Status(400, None), Fault::Garbage] {
        let what = format!("{fault:?}");
        b.proxy.set(fault.clone()).await;
        let e = b.sync_error("slow").await;
        assert_eq!(e.code, UPSTREAM_ERROR, "{e:?}");
        names(&e.message, &words, &what);
        // Held past the threshold, the handshake fails after the handle.
        b.proxy.set_held(fault).await;
        let id = b.task_of("slow").await;
        b.proxy.release();
        let err = b.failed(&id).await;
        names(err["message"].as_str().unwrap(), &words, &what);
        b.nothing_working().await;
    }
    b.proxy.set(Fault::Pass).await;
    b.works("through TLS once the fault clears").await;
    b.stop().await;
}

/// The first request tasklift sends is the era probe (`server/discover`): a fault
/// there is reported, and does not make tasklift take the modern upstream for a
/// legacy one.
#[tokio::test]
async fn a_fault_during_the_era_probe_does_not_settle_the_era() {
    for (fault, words) in [
        (Fault::ResetBeforeHeaders, &["dropped the connection"][..]),
        (Fault::ResetMidBody, &["response broke off"][..]),
        (Fault::Garbage, &["not http"][..]),
        (Fault::Status(500, None), &["HTTP 500", "protocol era"][..]),
        // The probe runs before the threshold: no answer is bounded too (10 s).
        (Fault::Hang, &["did not answer the protocol era probe"][..]),
    ] {
        let what = format!("{fault:?}");
        let b = Bench::start(|_| {}).await;
        b.proxy.set(fault.clone()).await;
        let e = b.sync_error("echo").await;
        assert_eq!(e.code, UPSTREAM_ERROR, "{what}: {e:?}");
        names(&e.message, words, &what);
        if fault == Fault::Hang {
            // A caller that declared the extension: the call probes again inside
            // the threshold race, so it gets a handle, and the task fails.
            let id = b.task_of("echo").await;
            let err = b.failed(&id).await;
            names(err["message"].as_str().unwrap(), words, &what);
        } else {
            // Failing at once, it makes no task.
            let e =
                rpc_err(guarded("a task call", b.h.client().call_tool("echo", json!({}))).await);
            names(&e.message, words, &what);
            assert_eq!(stored_tasks(&b.h).await, 0, "{what}");
        }
        b.nothing_working().await;
        b.proxy.set(Fault::Pass).await;
        b.works(&format!("after {what} cleared")).await;
        assert!(
            b.h.received("initialize").is_empty(),
            "{what}: tasklift took the modern upstream for a legacy one"
        );
        b.stop().await;
    }
}
