//! `tasklift call` (the binary) against tasklift in front of the demo fixture: in a
//! pseudo terminal (`script` from util-linux) for what a person sees: progress while
//! polling, a question answered at the prompt, Ctrl-C cancelling the task upstream;
//! and with plain pipes for scripts: `--json`, plain status lines, exit codes.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tasklift_fixture::FixtureServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};

use crate::support::call::{bin, call, LIMIT};
use crate::support::harness::*;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Whether util-linux `script` is there to give the binary a pseudo terminal.
fn have_script() -> bool {
    std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `tasklift call <args>` in a pseudo terminal: what it prints (stdout and stderr, as
/// a terminal shows them) and a keyboard.
struct Pty {
    child: Child,
    keys: ChildStdin,
    screen: Arc<Mutex<Vec<u8>>>,
}

impl Pty {
    fn start(args: &[&str]) -> Self {
        let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
        let mut cmd = format!("exec {} call", quote(bin()));
        for a in args {
            cmd.push(' ');
            cmd.push_str(&quote(a));
        }
        let mut child = Command::new("script")
            .args(["-q", "-e", "-f", "-c", &cmd, "/dev/null"])
            .env("SHELL", "/bin/sh")
            .env("COLUMNS", "120")
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("script runs");
        let screen = Arc::new(Mutex::new(Vec::new()));
        for mut r in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let screen = screen.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = r.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    screen.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            });
        }
        let keys = child.stdin.take().unwrap();
        Self {
            child,
            keys,
            screen,
        }
    }

    fn screen(&self) -> String {
        text(&self.screen.lock().unwrap())
    }

    /// Wait until the screen shows `what`; the screen then.
    async fn wait_for(&self, what: &str) -> String {
        let deadline = tokio::time::Instant::now() + LIMIT;
        loop {
            let s = self.screen();
            if s.contains(what) {
                return s;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what:?} not shown in {LIMIT:?}; screen:\n{s}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn type_keys(&mut self, keys: &str) {
        self.keys.write_all(keys.as_bytes()).await.unwrap();
        self.keys.flush().await.unwrap();
    }

    /// Wait for the exit; its code and the whole screen.
    async fn exit(mut self) -> (i32, String) {
        let status = tokio::time::timeout(LIMIT, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("still running after {LIMIT:?}; screen:\n{}", self.screen()))
            .unwrap();
        // The readers drain what is left.
        tokio::time::sleep(Duration::from_millis(100)).await;
        (status.code().unwrap_or(-1), self.screen())
    }
}

macro_rules! need_script {
    () => {
        if !have_script() {
            eprintln!("SKIPPED: util-linux `script` is not installed (no pseudo terminal)");
            return;
        }
    };
}

/// The task id in "task <id> (working), polling every …".
fn task_id(screen: &str) -> String {
    let at = screen.find("tasklift call: task ").expect("a task line") + 20;
    screen[at..].split_whitespace().next().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_is_shown_while_polling_and_the_result_printed() {
    need_script!();
    let h = Harness::start(FixtureServer::demo(), |_| {}).await;
    let pty = Pty::start(&[&h.url, "generate_report", "--arg", "pages=4"]);
    let (code, screen) = pty.exit().await;
    assert_eq!(code, 0, "{screen}");
    assert!(screen.contains("Ctrl-C cancels it"), "a task: {screen}");
    // A progress bar driven by statusMessage ("3/5 – step 3 of 5 done").
    assert!(screen.contains("working [#"), "{screen}");
    assert!(screen.contains("of 5 done"), "{screen}");
    assert!(
        screen.contains("Monthly report: 4 pages, revenue up 12% on last month."),
        "{screen}"
    );
    h.stop().await;
}

/// confirm_delete asks for confirmation: before a handle (an `InputRequiredResult`,
/// answered by a retry) or, as a task from the start, on the task (`tasks/update`).
async fn answer_at_the_prompt(as_task: bool) {
    let h = Harness::start(FixtureServer::demo(), |c| {
        if as_task {
            c.upstreams[0]
                .tools
                .insert("confirm_delete".into(), rule("always"));
        }
    })
    .await;
    let mut pty = Pty::start(&[&h.url, "confirm_delete", "-a", "filename=report.pdf"]);
    let s = pty.wait_for("confirm (y/n, required): ").await;
    assert!(s.contains("Delete report.pdf?"), "{s}");
    assert!(s.contains(&h.url), "the server is named: {s}");
    pty.type_keys("maybe\r").await;
    pty.wait_for("type y or n").await;
    pty.type_keys("y\r").await;
    pty.wait_for("Send {\"confirm\":true}?").await;
    pty.type_keys("\r").await;
    let (code, screen) = pty.exit().await;
    assert_eq!(code, 0, "{screen}");
    assert!(screen.contains("Deleted report.pdf."), "{screen}");
    assert_eq!(
        screen.contains("Ctrl-C cancels it"),
        as_task,
        "a task handle only when configured so: {screen}"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_before_the_handle_is_answered_at_the_prompt() {
    need_script!();
    answer_at_the_prompt(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_elicitation_is_answered_at_the_prompt() {
    need_script!();
    answer_at_the_prompt(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_cancels_the_task_upstream_and_exits_130() {
    need_script!();
    let h = Harness::start(FixtureServer::demo(), |_| {}).await;
    let stats = h.upstream.stats();
    let mut pty = Pty::start(&[&h.url, "slow_compute", "--args-json", r#"{"seconds": 300}"#]);
    let s = pty.wait_for("Ctrl-C cancels it").await;
    let id = task_id(&s);
    pty.type_keys("\x03").await;
    let (code, screen) = pty.exit().await;
    assert_eq!(code, 130, "{screen}");
    assert!(
        screen.contains(&format!("cancelling task {id}")),
        "{screen}"
    );
    upstream_call_cancelled(&stats).await;
    let t = h.client().get_task(&id).await.unwrap();
    assert_eq!(t["status"], "cancelled", "{t}");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_terminal_json_is_the_result_and_status_lines_are_plain() {
    let h = Harness::start(FixtureServer::demo(), |c| {
        c.upstreams[0]
            .tools
            .insert("protocol_error_job".into(), rule("always"));
    })
    .await;
    let args = [h.url.as_str(), "generate_report", "--arg", "pages=2"];

    // --json: stdout is the result and nothing else; stderr stays quiet.
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let out = call(&json_args).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let result: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)));
    assert_eq!(
        result["content"][0]["text"],
        "Monthly report: 2 pages, revenue up 12% on last month."
    );
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));

    // Without --json: the text, and one plain status line per change.
    let out = call(&args).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "Monthly report: 2 pages, revenue up 12% on last month.\n"
    );
    let err = text(&out.stderr);
    assert!(err.contains("tasklift call: working"), "{err}");
    assert!(err.contains("completed after"), "{err}");
    assert!(!err.contains('\r'), "no spinner off a terminal: {err:?}");

    // A tool error (isError) is exit 1, its text still printed.
    let out = call(&[&h.url, "failing_job"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("disk quota exceeded"));
    assert!(text(&out.stderr).contains("isError"));

    // A failed task is exit 1, with the error.
    let out = call(&[&h.url, "protocol_error_job", "--json"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
    assert!(
        text(&out.stderr).contains("failed: protocol_error_job always fails"),
        "{}",
        text(&out.stderr)
    );

    // --json with no terminal cannot answer questions: an error that says so.
    let out = call(&[&h.url, "confirm_delete", "--json"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("elicitation") && err.contains("terminal"),
        "{err}"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_urls_and_usage_are_exit_2_with_a_clear_message() {
    let closed = closed_port_url();
    let out = call(&[&closed, "greet"]).await;
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    let addr = closed
        .trim_start_matches("http://")
        .trim_end_matches("/mcp");
    assert!(
        err.contains(addr) && err.to_lowercase().contains("refused"),
        "{err}"
    );

    let out = call(&["ftp://example.com/mcp", "greet"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("not an http:// or https:// URL"));

    let out = call(&["http://127.0.0.1:9/mcp", "greet", "--arg", "novalue"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("KEY=VALUE"));

    // A reachable tasklift, the wrong path or an unknown tool.
    let h = Harness::start(FixtureServer::demo(), |_| {}).await;
    let out = call(&[&h.url.replace("/mcp", "/nope"), "greet"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let out = call(&[&h.url, "no_such_tool"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("no_such_tool"));
    // And a fast call answered directly: no task, exit 0.
    let out = call(&[&h.url, "greet", "-a", "name=ops"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "Hello, ops!\n");
    h.stop().await;
}
