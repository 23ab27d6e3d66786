//! `tasklift demo`: a bundled slow MCP server, tasklift in front of it, and a client
//! that walks through the task lifecycle, printing each step. Needs nothing else.

use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::cli::client::Client;
use crate::config::{RawConfig, RawUpstream};
use tasklift_fixture::FixtureServer;

/// Run the demo.
pub async fn run(keep_data: bool) -> anyhow::Result<()> {
    let data_dir = std::env::temp_dir().join(format!("tasklift-demo-{}", std::process::id()));
    let upstream = FixtureServer::demo()
        .start("127.0.0.1:0".parse().expect("valid"))
        .await
        .context("starting the bundled slow MCP server")?;
    let mut raw = RawConfig::default();
    raw.server.listen = "127.0.0.1:0".into();
    raw.tasks.threshold = "1s".into();
    raw.tasks.poll_interval = "500ms".into();
    raw.store.data_dir = data_dir.display().to_string();
    let mut up = RawUpstream {
        url: upstream.url(),
        // Clients without the tasks extension get tool-level handles (step 6).
        non_task_clients: "tool_handles".into(),
        ..RawUpstream::default()
    };
    // Always a task, however quickly it ends: shows how a failed call looks.
    up.tools.insert(
        "protocol_error_job".into(),
        crate::config::RawToolRule {
            mode: Some("always".into()),
            ..Default::default()
        },
    );
    up.tools.insert(
        "confirm_delete".into(),
        crate::config::RawToolRule {
            mode: Some("always".into()),
            ..Default::default()
        },
    );
    raw.upstreams.push(up);
    let proxy = crate::app::start(raw.validate()?)
        .await
        .context("starting tasklift")?;
    let url = format!("http://{}/mcp", proxy.addr);
    println!("tasklift demo");
    println!(
        "  bundled slow MCP server (legacy 2025-11-25): {}",
        upstream.url()
    );
    println!("  tasklift in front of it (2026-07-28 + tasks): {url}");
    println!("  threshold 1s: a tools/call still running after 1 s becomes a task\n");

    let result = walk(&url).await;
    proxy.shutdown().await;
    upstream.stop().await;
    if keep_data {
        println!("\ntask store kept in {}", data_dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&data_dir);
    }
    result
}

fn text_of(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or("(no text)")
        .to_string()
}

/// The client's side of the demo: each step of the lifecycle, printed as it goes.
async fn walk(url: &str) -> anyhow::Result<()> {
    let mut client = Client::new(url)?;
    // It can show the user a form (elicitation), so servers may ask it for input.
    client.capabilities.insert("elicitation".into(), json!({}));
    fast_call(&client).await?;
    slow_call(&client).await?;
    cancelled_task(&client).await?;
    failed_task(&client).await?;
    input_required(&client).await?;
    tool_handles(url).await?;
    println!("Done: fast calls stay synchronous, slow calls become durable tasks you can poll, answer or cancel,");
    println!("      and clients that never heard of tasks follow a tool-level handle to the same result.");
    Ok(())
}

/// Step 1: under the threshold, tasklift changes nothing.
async fn fast_call(client: &Client) -> anyhow::Result<()> {
    println!("1. A fast call is answered directly");
    println!("   → tools/call greet {{\"name\": \"tasklift\"}}");
    let a = client
        .call_tool("greet", json!({"name": "tasklift"}))
        .await?;
    println!(
        "   ← {} (resultType {})\n",
        text_of(&a.result),
        a.result["resultType"]
    );
    Ok(())
}

/// Step 2: past the threshold, a handle, then polling to the result.
async fn slow_call(client: &Client) -> anyhow::Result<()> {
    println!("2. A slow call becomes a task");
    println!("   → tools/call generate_report {{\"pages\": 4}}");
    let a = client
        .call_tool("generate_report", json!({"pages": 4}))
        .await?;
    if a.result["resultType"] != "task" {
        bail!("expected a task handle, got {}", a.result);
    }
    let id = a.result["taskId"].as_str().context("taskId")?.to_string();
    println!(
        "   ← task {id} is {} (ttlMs {}, pollIntervalMs {})",
        a.result["status"], a.result["ttlMs"], a.result["pollIntervalMs"]
    );
    let done = poll(client, &id, "   ").await?;
    println!("   ← completed: {}\n", text_of(&done["result"]));
    Ok(())
}

/// Step 3: `tasks/cancel` reaches the upstream call.
async fn cancelled_task(client: &Client) -> anyhow::Result<()> {
    println!("3. A task can be cancelled");
    println!("   → tools/call slow_compute {{\"seconds\": 30}}");
    let a = client
        .call_tool("slow_compute", json!({"seconds": 30, "label": "demo"}))
        .await?;
    let id = handle_id(&a.result)?;
    println!("   ← task {id} is {}", a.result["status"]);
    println!("   → tasks/cancel");
    let ack = client.cancel_task(&id).await?;
    println!("   ← acknowledged ({ack})");
    let t = poll(client, &id, "   ").await?;
    println!("   ← final status: {}\n", t["status"]);
    Ok(())
}

/// Step 4: a JSON-RPC error from the upstream is the task's `error`.
async fn failed_task(client: &Client) -> anyhow::Result<()> {
    println!("4. A call that fails at the protocol level ends as a failed task");
    println!(
        "   → tools/call protocol_error_job (configured as mode = \"always\": a task at once)"
    );
    let a = client.call_tool("protocol_error_job", json!({})).await?;
    let id = handle_id(&a.result)?;
    println!("   ← task {id} is {}", a.result["status"]);
    let t = poll(client, &id, "   ").await?;
    println!("   ← failed with JSON-RPC error {}\n", t["error"]);
    Ok(())
}

/// Step 5: the upstream's elicitation becomes the task's `inputRequests`, answered
/// with `tasks/update`.
async fn input_required(client: &Client) -> anyhow::Result<()> {
    println!("5. A task that needs an answer from the user goes input_required");
    println!("   → tools/call confirm_delete {{\"filename\": \"report.pdf\"}} (the server asks for confirmation)");
    let a = client
        .call_tool("confirm_delete", json!({"filename": "report.pdf"}))
        .await?;
    let id = handle_id(&a.result)?;
    let t = poll_until(client, &id, "   ", |s| s == "input_required").await?;
    let (key, request) = t["inputRequests"]
        .as_object()
        .and_then(|m| m.iter().next())
        .context("inputRequests")?;
    println!(
        "   ← the server asks {}: {}",
        request["method"], request["params"]["message"]
    );
    println!("   → tasks/update {{\"{key}\": accept, confirm = true}}");
    let answer = json!({"taskId": id, "inputResponses": {key: {"action": "accept", "content": {"confirm": true}}}});
    client.request("tasks/update", answer).await?;
    let t = poll(client, &id, "   ").await?;
    println!("   ← completed: {}\n", text_of(&t["result"]));
    Ok(())
}

/// The `taskId` of a call's answer, which must be a task handle.
fn handle_id(result: &Value) -> anyhow::Result<String> {
    Ok(result["taskId"]
        .as_str()
        .context("expected a task handle")?
        .to_string())
}

/// Step 6: a client without the tasks extension (most clients today), and a
/// "model" that only reads the text it is answered.
async fn tool_handles(url: &str) -> anyhow::Result<()> {
    let mut client = Client::new(url)?;
    client.tasks = false;
    println!("6. A client that never heard of tasks gets a tool-level handle (non_task_clients = \"tool_handles\")");
    let list = client.request("tools/list", json!({})).await?;
    let extra: Vec<&str> = list.result["tools"]
        .as_array()
        .context("tools")?
        .iter()
        .filter_map(|t| t["name"].as_str())
        .filter(|n| n.starts_with("tasklift_"))
        .collect();
    println!("   tools/list also offers it: {}", extra.join(", "));
    println!("   → tools/call generate_report {{\"pages\": 3}} (no tasks extension declared)");
    let mut answer = client
        .call_tool("generate_report", json!({"pages": 3}))
        .await?
        .result;
    while let Some(id) = answer["structuredContent"]["taskId"]
        .as_str()
        .map(str::to_string)
    {
        let text = text_of(&answer);
        let first = text.split(". ").next().unwrap_or(&text);
        println!(
            "   ← \"{first}.\" (status {})",
            answer["structuredContent"]["status"]
        );
        println!("   → the model follows the text: tools/call tasklift_wait {{\"taskId\": \"{id}\", \"waitSeconds\": 2}}");
        answer = client
            .call_tool("tasklift_wait", json!({"taskId": id, "waitSeconds": 2}))
            .await?
            .result;
    }
    if answer["isError"] == json!(true) {
        bail!("the job failed: {}", text_of(&answer));
    }
    println!("   ← the tool's own result: {}\n", text_of(&answer));
    Ok(())
}

/// Poll `tasks/get` at the suggested interval until the task is terminal, printing changes.
async fn poll(client: &Client, id: &str, indent: &str) -> anyhow::Result<Value> {
    poll_until(client, id, indent, |_| false).await
}

/// Poll until the task is terminal or its status satisfies `stop`.
async fn poll_until(
    client: &Client,
    id: &str,
    indent: &str,
    stop: impl Fn(&str) -> bool,
) -> anyhow::Result<Value> {
    let mut last = String::new();
    loop {
        let t = client.get_task(id).await?;
        let status = t["status"].as_str().unwrap_or("?").to_string();
        let line = format!(
            "{status}{}",
            t["statusMessage"]
                .as_str()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default()
        );
        if line != last {
            println!("{indent}  tasks/get → {line}");
            last = line;
        }
        if stop(&status) || matches!(status.as_str(), "completed" | "failed" | "cancelled") {
            return Ok(t);
        }
        let wait = t["pollIntervalMs"].as_u64().unwrap_or(500);
        tokio::time::sleep(Duration::from_millis(wait)).await;
    }
}
