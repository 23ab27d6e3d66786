//! The agent clients people run, through tasklift, as a user would run them: Claude
//! Code (interactive in tmux, and `claude -p`), Codex CLI (`codex exec`), Gemini CLI
//! (`gemini -p`) and Mastra's MCP client (the TypeScript SDK v2 client), pinned in
//! tests/agents/package.json and installed by scripts/install-agents. Each is
//! pointed at a scripted stand-in for its vendor's model API (tests/agents/*_api.py,
//! driven by tests/agents/model.py) that calls the slow tool, follows
//! `tasklift_wait` when told to, retries a failed call twice, and records every
//! tool result the client hands its model.
//!
//! tests/agents/bed.py runs one conversation in a network namespace with only
//! loopback (`unshare -n`): a legacy MCP server (the Python SDK mcp==1.30) whose
//! `slow` counts its runs, tasklift in front with a 2 s threshold, the client with
//! a 5 s MCP tool timeout. The model calls `slow` for 0.5 s, then for 12 s. These
//! tests assert, for each client and mode (the defaults, `tool_handles`, `detach`),
//! what the model was handed and how many times the upstream ran the tool.
//!
//! A binary of its own: cargo runs test binaries one after another, so it never
//! runs beside the integration suite (the clients are heavy processes and the
//! integration tests time things). Skipped (failing under `CI`) when the clients
//! are not installed.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The repository root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Client {
    /// Claude Code, interactive (tmux): declares the tasks extension.
    Claude,
    /// `claude -p`: 2026-07-28, no tasks, no session.
    ClaudeP,
    /// `codex exec`: rmcp, 2025-06-18 session.
    Codex,
    /// `gemini -p`: TypeScript SDK v1, 2025-06-18 session.
    Gemini,
    /// `@mastra/mcp` MCPClient: TypeScript SDK v2, 2026-07-28, no session.
    Mastra,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Defaults,
    ToolHandles,
    Detach,
}

impl Client {
    fn module(self) -> &'static str {
        match self {
            Client::Claude => "claude",
            Client::ClaudeP => "claude_p",
            Client::Codex => "codex",
            Client::Gemini => "gemini",
            Client::Mastra => "mastra",
        }
    }

    /// What must be installed for it.
    fn installed(self) -> PathBuf {
        let nm = root().join("target/tools/agents/node_modules");
        match self {
            Client::Claude | Client::ClaudeP => nm.join(".bin/claude"),
            Client::Codex => nm.join(".bin/codex"),
            Client::Gemini => nm.join(".bin/gemini"),
            Client::Mastra => nm.join("@mastra/mcp/package.json"),
        }
    }

    /// Whether a retry of its call can be matched to the first one under
    /// `auth.mode = "none"`: it keeps a legacy session.
    fn has_session(self) -> bool {
        matches!(self, Client::Codex | Client::Gemini)
    }
}

impl Mode {
    fn arg(self) -> &'static str {
        match self {
            Mode::Defaults => "defaults",
            Mode::ToolHandles => "tool_handles",
            Mode::Detach => "detach",
        }
    }
}

/// What one conversation left: bed.py's report.
struct Report {
    v: Value,
}

impl Report {
    fn results(&self) -> Vec<(&str, &str, bool)> {
        self.v["toolResults"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|r| {
                        (
                            r["tool"].as_str().unwrap_or_default(),
                            r["text"].as_str().unwrap_or_default(),
                            r["isError"].as_bool().unwrap_or(false),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The upstream's counter `what` for the call of `seconds`.
    fn runs(&self, seconds: &str, what: &str) -> u64 {
        self.v["runs"][seconds][what].as_u64().unwrap_or(0)
    }

    fn handed(&self, needle: &str) -> bool {
        self.results().iter().any(|(_, t, _)| t.contains(needle))
    }

    /// Results handed to the model that are a client's timeout.
    fn timeouts(&self) -> Vec<String> {
        self.results()
            .iter()
            .filter(|(_, t, _)| {
                let t = t.to_lowercase();
                t.contains("timed out") || t.contains("timeout")
            })
            .map(|(tool, t, _)| format!("{tool}: {t}"))
            .collect()
    }

    fn still_running_answers(&self) -> usize {
        self.results()
            .iter()
            .filter(|(_, t, _)| t.contains("is still running in the background"))
            .count()
    }

    fn metric(&self, name: &str) -> u64 {
        self.v["metrics"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}",
            serde_json::to_string_pretty(&self.v).unwrap_or_default()
        )
    }
}

/// Run `client` in `mode` through tasklift; `None` when it is not installed.
fn converse(client: Client, mode: Mode) -> Option<Report> {
    let ci = std::env::var_os("CI").is_some();
    let needed = [
        client.installed(),
        root().join("target/tools/py-mcp130/bin/python"),
    ];
    if let Some(missing) = needed.iter().find(|p| !p.exists()) {
        assert!(
            !ci,
            "{} is missing: run scripts/install-agents and scripts/install-test-tools",
            missing.display()
        );
        eprintln!(
            "skipped: {} not installed (scripts/install-agents)",
            missing.display()
        );
        return None;
    }
    let out = tempfile::Builder::new()
        .prefix(&format!("agents-{}-{}-", client.module(), mode.arg()))
        .tempdir()
        .unwrap()
        .keep();
    let bed = format!(
        "ip link set lo up && exec python3 {} --client {} --mode {} --tasklift {} --out {}",
        root().join("tests/agents/bed.py").display(),
        client.module(),
        mode.arg(),
        env!("CARGO_BIN_EXE_tasklift"),
        out.display()
    );
    let started = Instant::now();
    let child = Command::new("unshare")
        .args(["-n", "--", "sh", "-c", &bed])
        .current_dir(root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("unshare runs (root, util-linux)");
    let output = wait_with_limit(child, Duration::from_secs(240));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "bed.py failed ({:?}) after {:?}:\n{stderr}\n{stdout}\nlogs in {}",
        output.status,
        started.elapsed(),
        out.display()
    );
    let v: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("bed.py printed no report ({e}):\n{stdout}\n{stderr}"));
    eprintln!(
        "{} {}: {} results handed to the model, runs {}, {:.0?}",
        client.module(),
        mode.arg(),
        v["toolResults"].as_array().map_or(0, Vec::len),
        v["runs"],
        started.elapsed()
    );
    Some(Report { v })
}

/// Wait for `child`, killing it (and the namespace's processes with it) past `limit`.
fn wait_with_limit(mut child: std::process::Child, limit: Duration) -> std::process::Output {
    let end = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return child.wait_with_output().unwrap(),
            Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(200)),
            _ => {
                let _ = child.kill();
                let out = child.wait_with_output().unwrap();
                panic!(
                    "bed.py ran past {limit:?}:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
}

/// What every conversation shows, whatever the mode: the fast call answered
/// inline, once, and the slow job never ran to its end twice.
fn common(r: &Report) {
    assert!(r.handed("slept 0.5s"), "the fast call's result: {r}");
    assert_eq!(r.runs("0.5", "started"), 1, "the fast call ran once: {r}");
    assert!(
        r.runs("12.0", "completed") <= 1,
        "the slow job ran to its end more than once: {r}"
    );
    assert!(
        r.v["modelRequests"].as_u64().unwrap_or(0) >= 2,
        "the client asked the model at least twice: {r}"
    );
}

/// The slow call's real result reached the model, with no timeout error on the
/// way, and the upstream ran the job once.
fn gets_the_result_once(r: &Report) {
    assert!(r.handed("slept 12.0s"), "the slow job's result: {r}");
    assert_eq!(r.timeouts(), Vec::<String>::new(), "no timeout shown: {r}");
    assert_eq!(r.runs("12.0", "started"), 1, "one upstream run: {r}");
    assert_eq!(r.runs("12.0", "completed"), 1, "{r}");
}

/// The client's own timeout reached the model (tasklift in the way changes
/// nothing here), and the upstream call was cancelled each time, never finished.
fn times_out_and_cancels(r: &Report) {
    assert!(!r.handed("slept 12.0s"), "{r}");
    assert!(!r.timeouts().is_empty(), "the client's timeout: {r}");
    assert!(r.runs("12.0", "started") >= 1, "{r}");
    assert_eq!(r.runs("12.0", "completed"), 0, "{r}");
    assert_eq!(
        r.runs("12.0", "cancelled"),
        r.runs("12.0", "started"),
        "each left call was cancelled upstream: {r}"
    );
}

fn check(client: Client, mode: Mode) {
    let Some(r) = converse(client, mode) else {
        return;
    };
    common(&r);
    let declares = client == Client::Claude;
    match mode {
        // The client that declares the extension gets a real task in every mode.
        _ if declares => {
            gets_the_result_once(&r);
            assert_eq!(r.metric("tasklift_tasks_created_total"), 1, "{r}");
            assert_eq!(r.still_running_answers(), 0, "no tool handles: {r}");
        }
        Mode::Defaults => times_out_and_cancels(&r),
        Mode::ToolHandles => {
            gets_the_result_once(&r);
            assert!(
                r.still_running_answers() >= 1,
                "the model was told the job runs on: {r}"
            );
            // Every still-running answer named what to call next, in whatever part
            // of the result the client showed.
            for (tool, text, _) in r.results() {
                if text.contains("is still running in the background") {
                    assert!(text.contains("tasklift_wait"), "{tool}: {text}");
                }
            }
            assert_eq!(r.metric("tasklift_tool_handles_total"), 1, "{r}");
        }
        Mode::Detach if client.has_session() => {
            // The retry joined the detached call: one run, its result.
            assert!(r.handed("slept 12.0s"), "{r}");
            assert_eq!(r.runs("12.0", "started"), 1, "{r}");
            assert_eq!(r.runs("12.0", "completed"), 1, "{r}");
            assert_eq!(r.metric("tasklift_detached_calls_total"), 1, "{r}");
        }
        // No session, no principal, no key: a retry could never be matched, so
        // the call is not detached, and nothing runs twice.
        Mode::Detach => {
            times_out_and_cancels(&r);
            assert_eq!(r.metric("tasklift_detached_calls_total"), 0, "{r}");
        }
    }
    // Passed: its logs are not needed (a failed run keeps them, named in the panic).
    if let Some(out) = r.v["out"].as_str() {
        let _ = std::fs::remove_dir_all(out);
    }
}

macro_rules! agent_tests {
    ($($name:ident: $client:expr, $mode:expr;)*) => {$(
        #[test]
        fn $name() {
            check($client, $mode);
        }
    )*};
}

agent_tests! {
    claude_interactive_defaults: Client::Claude, Mode::Defaults;
    claude_interactive_tool_handles: Client::Claude, Mode::ToolHandles;
    claude_interactive_detach: Client::Claude, Mode::Detach;
    claude_print_defaults: Client::ClaudeP, Mode::Defaults;
    claude_print_tool_handles: Client::ClaudeP, Mode::ToolHandles;
    claude_print_detach: Client::ClaudeP, Mode::Detach;
    codex_defaults: Client::Codex, Mode::Defaults;
    codex_tool_handles: Client::Codex, Mode::ToolHandles;
    codex_detach: Client::Codex, Mode::Detach;
    gemini_defaults: Client::Gemini, Mode::Defaults;
    gemini_tool_handles: Client::Gemini, Mode::ToolHandles;
    gemini_detach: Client::Gemini, Mode::Detach;
    mastra_defaults: Client::Mastra, Mode::Defaults;
    mastra_tool_handles: Client::Mastra, Mode::ToolHandles;
    mastra_detach: Client::Mastra, Mode::Detach;
}
