//! Helpers shared by the input-bridging tests (`input/`, `tasks/listen.rs`): a caller
//! with input capabilities and its MRTR retries, the demo upstream over HTTP or
//! stdio, and task polling.

#![allow(dead_code)]

use std::time::Duration;

use serde_json::{json, Value};
use tasklift::cli::client::Client;
use tasklift::config::{RawConfig, RawToolRule};
use tasklift_fixture::FixtureServer;

use crate::support::harness::*;

/// clientCapabilities: the tasks extension (or not) plus these input capabilities.
pub fn caps(tasks: bool, input: &[&str]) -> Value {
    let mut c = json!({});
    if tasks {
        c["extensions"] = json!({"io.modelcontextprotocol/tasks": {}});
    }
    for k in input {
        c[*k] = json!({});
    }
    c
}

/// A caller of one tool. Its capabilities, arguments and credentials stay the same
/// on the first call and on the retries (new ids, `inputResponses`, `requestState`).
#[derive(Clone)]
pub struct Caller {
    url: String,
    tool: String,
    args: Value,
    caps: Value,
    token: Option<String>,
}

impl Caller {
    /// Calls `tool` declaring the tasks extension and elicitation.
    pub fn new(h: &Harness, tool: &str, args: Value) -> Self {
        Self::new_at(&h.url, tool, args)
    }

    /// The same, of the tasklift endpoint at `url`.
    pub fn new_at(url: &str, tool: &str, args: Value) -> Self {
        Self {
            url: url.to_string(),
            tool: tool.into(),
            args,
            caps: caps(true, &["elicitation"]),
            token: None,
        }
    }

    /// Declare these capabilities instead.
    pub fn caps(mut self, caps: Value) -> Self {
        self.caps = caps;
        self
    }

    /// Authenticate with this bearer token.
    pub fn token(mut self, t: &str) -> Self {
        self.token = Some(t.into());
        self
    }

    /// Call another tool.
    pub fn tool(mut self, tool: &str, args: Value) -> Self {
        self.tool = tool.into();
        self.args = args;
        self
    }

    /// The `tools/call` POST, with `extra` params.
    pub fn post(&self, id: u64, extra: Value) -> Post {
        let mut params = json!({"name": self.tool, "arguments": self.args,
            "_meta": {"io.modelcontextprotocol/clientCapabilities": self.caps}});
        if let Value::Object(e) = extra {
            for (k, v) in e {
                params[k] = v;
            }
        }
        let tasks = self.caps.get("extensions").is_some();
        let p = Post::new(&self.url, id, "tools/call", params, tasks);
        match &self.token {
            Some(t) => p.header("authorization", &format!("Bearer {t}")),
            None => p,
        }
    }

    /// The first call.
    pub async fn call(&self, id: u64) -> Raw {
        self.post(id, json!({})).send().await
    }

    /// The retry POST of an `InputRequiredResult`.
    pub fn retry_post(&self, id: u64, answers: Value, state: &Value) -> Post {
        self.post(
            id,
            json!({"inputResponses": answers, "requestState": state}),
        )
    }

    /// Retry with these answers and state.
    pub async fn retry(&self, id: u64, answers: Value, state: &Value) -> Raw {
        self.retry_post(id, answers, state).send().await
    }
}

/// The result of an answer (panics on an error).
pub fn result(r: &Raw) -> Value {
    let m = r.response();
    m.get("result")
        .cloned()
        .unwrap_or_else(|| panic!("expected a result, got {m}"))
}

/// The one key of `inputRequests` whose message contains `text`.
pub fn key_for(reqs: &Value, text: &str) -> String {
    let obj = reqs.as_object();
    let found: Vec<&String> = obj
        .unwrap_or_else(|| panic!("inputRequests must be an object: {reqs}"))
        .iter()
        .filter(|(_, r)| {
            r["params"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(text))
        })
        .map(|(k, _)| k)
        .collect();
    assert_eq!(found.len(), 1, "one request asking {text:?}: {reqs}");
    found[0].clone()
}

/// A config tweak giving `tool` this rule.
pub fn with_tool(tool: &str, rule: RawToolRule) -> impl FnOnce(&mut RawConfig) + '_ {
    move |c| {
        c.upstreams[0].tools.insert(tool.into(), rule);
    }
}

/// A tool rule with this threshold.
pub fn threshold(t: &str) -> RawToolRule {
    RawToolRule {
        threshold: Some(t.into()),
        ..Default::default()
    }
}

/// tasklift in front of the demo tools: the HTTP fixture, or the stdio fixture
/// (`tasklift-fixture --stdio`, logging its events to `fixture.log` in the store
/// directory).
pub async fn demo(stdio: bool, tweak: impl FnOnce(&mut RawConfig)) -> Harness {
    if !stdio {
        return Harness::start(FixtureServer::demo(), tweak).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("fixture.log").display().to_string();
    let exe = crate::support::harness::fixture_bin();
    Harness::front(FixtureServer::new(), "", dir, |c| {
        c.upstreams[0].url = String::new();
        c.upstreams[0].command = vec![exe, "--stdio".into(), "--log".into(), log];
        tweak(c)
    })
    .await
}

/// The answers the HTTP fixture got to its requests to the client (every JSON-RPC
/// response it received; its request ids are numbers or names).
pub fn answers_upstream_got(h: &Harness) -> Vec<Value> {
    let stats = h.upstream.stats();
    let bodies = stats.bodies.lock().unwrap();
    bodies
        .iter()
        .filter(|b| b.get("method").is_none())
        .cloned()
        .collect()
}

/// Start `tool` as a task for a caller that can elicit; its id.
pub async fn task_of(h: &Harness, tool: &str, args: Value) -> String {
    let r = result(&Caller::new(h, tool, args).call(1).await);
    assert_eq!(r["resultType"], "task", "{r}");
    r["taskId"].as_str().unwrap().to_string()
}

/// Poll `tasks/get` until `cond` holds.
pub async fn wait_for(c: &Client, id: &str, what: &str, cond: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let t = c.get_task(id).await.expect("tasks/get");
        if cond(&t) {
            return t;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}: {t}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `tasks/update`, checking it is acknowledged (as it is even for keys not outstanding).
pub async fn update(c: &Client, id: &str, answers: Value) {
    let params = json!({"taskId": id, "inputResponses": answers});
    let r = c.request("tasks/update", params).await;
    let ack = r.expect("tasks/update").result;
    assert_eq!(
        ack,
        json!({"resultType": "complete"}),
        "the acknowledgement"
    );
}
