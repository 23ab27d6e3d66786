//! The front door: what tasklift accepts and how it rejects the rest, as a
//! 2026-07-28 Streamable HTTP server must.

use std::sync::atomic::Ordering;

use serde_json::{json, Value};
use tasklift_fixture::{FixtureServer, Tool};

use crate::support::harness::*;

async fn harness() -> Harness {
    Harness::start(
        FixtureServer::new()
            .tool(Tool::new("echo"))
            .tool(Tool::new("Hello, 世界")),
        |c| c.server.allowed_origins = vec!["https://app.example.com".into()],
    )
    .await
}

fn call(h: &Harness, name: &str) -> Post {
    Post::new(
        &h.url,
        7,
        "tools/call",
        json!({"name": name, "arguments": {}}),
        false,
    )
}

/// A 400 with this JSON-RPC code, the request id echoed.
fn assert_rejected(r: &Raw, code: i64, id: Value) {
    assert_eq!(r.status, 400, "{r:?}");
    let v = r.json();
    assert_eq!(v["error"]["code"], code, "{v}");
    assert_eq!(v["id"], id, "{v}");
}

#[tokio::test]
async fn get_and_delete_answer_405_with_allow_post() {
    let h = harness().await;
    for m in ["GET", "DELETE"] {
        let r = raw(m, &h.url, &[("accept", "text/event-stream")], "").await;
        assert_eq!(r.status, 405, "{m}: {r:?}");
        assert_eq!(r.headers["allow"], "POST");
    }
    h.stop().await;
}

#[tokio::test]
async fn unknown_path_is_404_and_wrong_content_type_is_415() {
    let h = harness().await;
    let other = h.url.replace("/mcp", "/elsewhere");
    let r = call(&h, "echo").into_url(&other).send().await;
    assert_eq!(r.status, 404, "{r:?}");
    assert!(r.body.contains("/elsewhere"), "{}", r.body);
    let r = call(&h, "echo")
        .header("content-type", "text/plain")
        .send()
        .await;
    assert_eq!(r.status, 415, "{r:?}");
    assert!(r.body.contains("application/json"), "{}", r.body);
    h.stop().await;
}

#[tokio::test]
async fn protocol_version_header_must_be_present_and_match() {
    let h = harness().await;
    let r = call(&h, "echo")
        .without("mcp-protocol-version")
        .send()
        .await;
    assert_rejected(&r, -32020, json!(7));
    let r = call(&h, "echo")
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await;
    assert_rejected(&r, -32020, json!(7));
    assert!(r.body.contains("2025-11-25"), "{}", r.body);
    h.stop().await;
}

#[tokio::test]
async fn mcp_method_header_must_be_present_and_match() {
    let h = harness().await;
    let r = call(&h, "echo").without("mcp-method").send().await;
    assert_rejected(&r, -32020, json!(7));
    let r = call(&h, "echo")
        .header("mcp-method", "tools/list")
        .send()
        .await;
    assert_rejected(&r, -32020, json!(7));
    h.stop().await;
}

#[tokio::test]
async fn mcp_name_header_is_checked_against_the_body_after_decoding() {
    let h = harness().await;
    let r = call(&h, "echo").without("mcp-name").send().await;
    assert_rejected(&r, -32020, json!(7));
    let r = call(&h, "echo").header("mcp-name", "other").send().await;
    assert_rejected(&r, -32020, json!(7));
    // The base64 form is accepted when it decodes to the body value...
    let r = call(&h, "Hello, 世界")
        .header("mcp-name", "=?base64?SGVsbG8sIOS4lueVjA==?=")
        .send()
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.response()["result"]["content"][0]["text"],
        "Hello, 世界 done"
    );
    // ...also for a plain ASCII name ("echo")...
    let r = call(&h, "echo")
        .header("mcp-name", "=?base64?ZWNobw==?=")
        .send()
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    // ...and rejected when it decodes to something else, or does not decode.
    let r = call(&h, "echo")
        .header("mcp-name", "=?base64?b3RoZXI=?=")
        .send()
        .await;
    assert_rejected(&r, -32020, json!(7));
    let r = call(&h, "echo")
        .header("mcp-name", "=?base64?!!!?=")
        .send()
        .await;
    assert_rejected(&r, -32020, json!(7));
    // For tasks/* the name header carries the task id.
    let r = Post::new(&h.url, 8, "tasks/get", json!({"taskId": "abc"}), true)
        .header("mcp-name", "xyz")
        .send()
        .await;
    assert_rejected(&r, -32020, json!(8));
    assert_eq!(h.upstream.stats().calls.load(Ordering::Relaxed), 2);
    h.stop().await;
}

#[tokio::test]
async fn missing_meta_fields_are_invalid_params() {
    let h = harness().await;
    let r = call(&h, "echo")
        .edit(|b| {
            b["params"]["_meta"]
                .as_object_mut()
                .unwrap()
                .remove("io.modelcontextprotocol/protocolVersion");
        })
        .send()
        .await;
    assert_rejected(&r, -32602, json!(7));
    assert!(r.body.contains("protocolVersion"), "{}", r.body);
    let r = call(&h, "echo")
        .edit(|b| {
            b["params"]["_meta"]
                .as_object_mut()
                .unwrap()
                .remove("io.modelcontextprotocol/clientCapabilities");
        })
        .send()
        .await;
    assert_rejected(&r, -32602, json!(7));
    assert!(r.body.contains("clientCapabilities"), "{}", r.body);
    h.stop().await;
}

#[tokio::test]
async fn unsupported_version_lists_the_supported_ones() {
    let h = harness().await;
    let r = call(&h, "echo")
        .header("mcp-protocol-version", "2030-01-01")
        .edit(|b| {
            b["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2030-01-01")
        })
        .send()
        .await;
    assert_rejected(&r, -32022, json!(7));
    assert_eq!(
        r.json()["error"]["data"]["supported"],
        json!(["2026-07-28"])
    );
    h.stop().await;
}

#[tokio::test]
async fn malformed_json_is_a_parse_error() {
    let h = harness().await;
    let r = raw(
        "POST",
        &h.url,
        &[
            ("content-type", "application/json"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
        ],
        "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ",
    )
    .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.json()["error"]["code"], -32700);
    h.stop().await;
}

#[tokio::test]
async fn responses_and_batches_are_invalid_requests() {
    let h = harness().await;
    for body in [
        json!({"jsonrpc": "2.0", "id": 5, "result": {}}),
        json!([{"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {}}]),
    ] {
        let r = call(&h, "echo").edit(|b| *b = body.clone()).send().await;
        assert_eq!(r.status, 400, "{body}: {r:?}");
        assert_eq!(r.json()["error"]["code"], -32600);
    }
    h.stop().await;
}

#[tokio::test]
async fn oversized_body_is_413_naming_the_limit() {
    let h = Harness::start(FixtureServer::new().tool(Tool::new("echo")), |c| {
        c.server.max_body_bytes = 2048
    })
    .await;
    let r = call(&h, "echo")
        .edit(|b| b["params"]["arguments"]["blob"] = json!("x".repeat(4096)))
        .send()
        .await;
    assert_eq!(r.status, 413, "{r:?}");
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("too large") && msg.contains("2048"), "{msg}");
    // Just under the limit still goes through.
    let r = call(&h, "echo")
        .edit(|b| b["params"]["arguments"]["blob"] = json!("x".repeat(1024)))
        .send()
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(h.upstream.stats().calls.load(Ordering::Relaxed), 1);
    let page = raw("GET", &h.url.replace("/mcp", "/metrics"), &[], "")
        .await
        .body;
    assert!(
        page.contains("tasklift_limit_hits_total{limit=\"max_body_bytes\"} 1"),
        "{page}"
    );
    h.stop().await;
}

#[tokio::test]
async fn origins_are_checked_against_the_allow_list() {
    let h = harness().await;
    let r = call(&h, "echo")
        .header("origin", "https://evil.example")
        .send()
        .await;
    assert_eq!(r.status, 403, "{r:?}");
    for ok in [
        "http://localhost:5173",
        "http://127.0.0.1:3000",
        "https://app.example.com",
    ] {
        let r = call(&h, "echo").header("origin", ok).send().await;
        assert_eq!(r.status, 200, "{ok}: {r:?}");
        assert_eq!(r.response()["result"]["content"][0]["text"], "echo done");
    }
    assert_eq!(h.upstream.stats().calls.load(Ordering::Relaxed), 3);
    h.stop().await;
}

#[tokio::test]
async fn a_method_the_upstream_lacks_is_404_method_not_found() {
    let h = harness().await;
    let r = post(&h.url, 3, "prompts/list", json!({}), false).await;
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(r.json()["error"]["code"], -32601);
    assert_eq!(r.json()["id"], 3);
    h.stop().await;
}

#[tokio::test]
async fn tasks_result_and_tasks_list_are_not_methods() {
    let h = harness().await;
    for m in ["tasks/result", "tasks/list"] {
        let r = post(&h.url, 4, m, json!({"taskId": "abc"}), true).await;
        assert_eq!(r.json()["error"]["code"], -32601, "{m}: {r:?}");
        assert_eq!(r.status, 404);
    }
    h.stop().await;
}

#[tokio::test]
async fn notifications_are_accepted_with_202() {
    let h = harness().await;
    let r = call(&h, "echo")
        .edit(|b| {
            *b = json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed", "params": {}})
        })
        .header("mcp-method", "notifications/roots/list_changed")
        .without("mcp-name")
        .send()
        .await;
    assert_eq!(r.status, 202, "{r:?}");
    assert!(r.body.is_empty());
    let got = h.upstream.stats().bodies.lock().unwrap().clone();
    assert!(
        got.iter()
            .any(|b| b["method"] == "notifications/roots/list_changed"),
        "the notification reached the upstream: {got:?}"
    );
    h.stop().await;
}

/// `Mcp-Param-*` headers are checked against the tool's `x-mcp-header` parameters,
/// which the legacy upstream itself knows nothing about.
#[tokio::test]
async fn mcp_param_headers_must_match_the_annotated_arguments() {
    let schema = json!({"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "limits": {"type": "object", "properties": {"max": {"type": "integer", "x-mcp-header": "Max"}}},
    }});
    let h = Harness::start(
        FixtureServer::new().tool(Tool::new("deploy").schema(schema)),
        |_| {},
    )
    .await;
    let list = post(&h.url, 1, "tools/list", json!({}), false).await;
    assert_eq!(list.status, 200, "{list:?}");
    let deploy = |args: Value| {
        Post::new(
            &h.url,
            9,
            "tools/call",
            json!({"name": "deploy", "arguments": args}),
            false,
        )
    };
    let args = json!({"region": "Hello, 世界", "limits": {"max": 42}});
    let encoded = "=?base64?SGVsbG8sIOS4lueVjA==?=";
    // Matching headers (base64 for the non-ASCII value, numbers compared as numbers).
    let ok = deploy(args.clone())
        .header("mcp-param-region", encoded)
        .header("mcp-param-max", "42.0")
        .send()
        .await;
    assert_eq!(ok.status, 200, "{ok:?}");
    assert!(ok.json()["error"].is_null(), "{}", ok.body);
    // A value in the body without its header.
    let missing = deploy(args.clone())
        .header("mcp-param-region", encoded)
        .send()
        .await;
    assert_rejected(&missing, -32020, json!(9));
    assert!(
        missing.body.contains("Mcp-Param-Max") || missing.body.contains("mcp-param-max"),
        "{}",
        missing.body
    );
    // A header that says something else than the body, and broken base64.
    for (region, why) in [("elsewhere", "different"), ("=?base64?!!?=", "bad base64")] {
        let r = deploy(args.clone())
            .header("mcp-param-region", region)
            .header("mcp-param-max", "42")
            .send()
            .await;
        assert_rejected(&r, -32020, json!(9));
        assert!(r.status == 400, "{why}: {r:?}");
    }
    // The same header twice (a proxy in between might read the other one): rejected.
    let twice = deploy(args.clone())
        .header("mcp-param-region", encoded)
        .header("mcp-param-max", "42")
        .also_header("mcp-param-max", "43")
        .send()
        .await;
    assert_rejected(&twice, -32020, json!(9));
    // No value, no header: fine; a header without a value: rejected.
    let none = deploy(json!({})).send().await;
    assert_eq!(none.status, 200, "{none:?}");
    let extra = deploy(json!({})).header("mcp-param-max", "1").send().await;
    assert_rejected(&extra, -32020, json!(9));
    assert_eq!(
        h.received("tools/call").len(),
        2,
        "rejected calls never went upstream"
    );
    h.stop().await;
}

/// A request tasklift's own HTTP/1.1 reader does not take (a chunked body)
/// hands the connection, with the bytes read, to hyper's server: the request is
/// answered, and so is the next one on the same connection.
#[tokio::test]
async fn a_chunked_request_is_answered_and_its_connection_goes_on() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let h = harness().await;
    let addr = h
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    let mut wire = Vec::new();
    for (id, chunked) in [(7, true), (8, false)] {
        let p = Post::new(
            &h.url,
            id,
            "tools/call",
            json!({"name": "echo", "arguments": {}}),
            false,
        );
        let body = p.body.to_string();
        let mut head = String::from("POST /mcp HTTP/1.1\r\nhost: x\r\n");
        for (k, v) in &p.headers {
            head += &format!("{k}: {v}\r\n");
        }
        if chunked {
            let (a, b) = body.split_at(body.len() / 2);
            head += "transfer-encoding: chunked\r\n\r\n";
            head += &format!("{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n", a.len(), b.len());
        } else {
            head += &format!(
                "connection: close\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
        }
        wire.extend_from_slice(head.as_bytes());
    }
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    s.write_all(&wire).await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(10), s.read_to_end(&mut got))
        .await
        .expect("both answered and the connection closed")
        .unwrap();
    let text = String::from_utf8_lossy(&got);
    assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 2, "{text}");
    for id in [7, 8] {
        assert!(
            text.contains(&format!("\"id\":{id},\"result\"")),
            "{id} answered: {text}"
        );
    }
    h.stop().await;
}

/// A client that never finishes its request headers (slow loris) is cut off after
/// `server.header_read_timeout`, and counted.
#[tokio::test]
async fn a_client_too_slow_to_send_its_headers_is_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let h = Harness::start(FixtureServer::new(), |c| {
        c.server.header_read_timeout = "300ms".into()
    })
    .await;
    let addr = h
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    s.write_all(b"POST /mcp HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let read =
        tokio::time::timeout(std::time::Duration::from_secs(10), s.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "the connection was never closed");
    let page = raw("GET", &h.url.replace("/mcp", "/metrics"), &[], "")
        .await
        .body;
    assert!(
        page.contains("tasklift_limit_hits_total{limit=\"header_read_timeout\"} 1"),
        "{page}"
    );
    h.stop().await;
}

/// `server.workers = 4`: the front door runs on four threads that share one
/// listening socket. Calls that become tasks on one connection are polled to
/// their own results on others (whichever worker accepted them), and fast calls
/// answer on every connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_front_door_workers_serve_every_connection() {
    let up = FixtureServer::new()
        .tool(
            Tool::new("slow")
                .sleep(std::time::Duration::from_millis(400))
                .reply(|a| format!("slow {}", a["n"])),
        )
        .tool(Tool::new("fast").reply(|a| format!("fast {}", a["n"])));
    let h = Harness::start(up, |c| {
        c.server.workers = 4;
        c.tasks.threshold = "100ms".into();
        // On a loaded machine a fast call can take longer than 100 ms: it is
        // never a task, so it always answers on its own connection.
        c.upstreams[0].tools.insert("fast".into(), rule("never"));
    })
    .await;
    let mut calls = tokio::task::JoinSet::new();
    for n in 0..24 {
        let url = h.url.clone();
        calls.spawn(async move {
            // A client of its own: its own connections.
            let c = tasklift::cli::client::Client::new(&url).unwrap();
            let a = c.call_tool("fast", json!({"n": n})).await.unwrap();
            assert_eq!(
                a.result["content"][0]["text"],
                format!("fast {n}"),
                "{}",
                a.result
            );
            let a = c.call_tool("slow", json!({"n": n})).await.unwrap();
            assert_eq!(a.result["resultType"], "task", "{}", a.result);
            let id = a.result["taskId"].as_str().unwrap().to_string();
            let poller = tasklift::cli::client::Client::new(&url).unwrap();
            let t = wait_terminal(&poller, &id, std::time::Duration::from_secs(20)).await;
            assert_eq!(t["status"], "completed", "{t}");
            assert_eq!(t["result"]["content"][0]["text"], format!("slow {n}"));
        });
    }
    while let Some(r) = calls.join_next().await {
        r.unwrap();
    }
    h.stop().await;
}

/// What an operator sees of `--workers 3` in `top -H`: two `tasklift-wN`
/// threads beside the main one (worker 0), and calls answered through them.
#[tokio::test]
async fn a_tasklift_process_runs_the_workers_it_was_given() {
    let up = FixtureServer::new()
        .tool(Tool::new("echo"))
        .start("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = up.url();
    let p = crate::support::proc::Proc::start(
        &[
            "serve",
            "--upstream",
            &url,
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            dir.path().to_str().unwrap(),
            "--workers",
            "3",
        ],
        "with three workers",
    )
    .await;
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", p.child.id()))
        .unwrap()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|c| c.trim().to_string())
        .filter(|c| c.starts_with("tasklift-w"))
        .collect();
    names.sort();
    assert_eq!(names, ["tasklift-w1", "tasklift-w2"], "{}", p.logs());
    for _ in 0..8 {
        let c = tasklift::cli::client::Client::new(&p.url).unwrap();
        let a = c.call_tool("echo", json!({})).await.unwrap();
        assert!(a.result.get("content").is_some(), "{}", a.result);
    }
}

/// Several workers share one socket bound once: a port another process holds
/// still stops tasklift at start, naming the address.
#[tokio::test]
async fn a_taken_port_fails_the_start_with_several_workers() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut raw = config("http://127.0.0.1:9/mcp", dir.path());
    raw.server.listen = addr.to_string();
    raw.server.workers = 3;
    let err = match tasklift::app::start(raw.validate().unwrap()).await {
        Ok(_) => panic!("tasklift started on a port in use"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains(&addr.to_string()), "{err}");
}
