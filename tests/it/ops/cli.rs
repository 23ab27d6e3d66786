//! The `tasklift` binary: `check-config` and configuration errors at `serve`
//! (exit 64, naming the key, before anything is bound or opened).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use tasklift::config::RawConfig;

use crate::support::cli::{run, run_env, text};

fn write(dir: &Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p.display().to_string()
}

const VALID: &str = r#"
[tasks]
threshold = "750ms"

[[upstreams]]
url = "http://127.0.0.1:9000/mcp"

[upstreams.tools.report]
mode = "required"
ttl = "2h"
"#;

#[test]
fn check_config_prints_the_effective_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "t.toml", VALID);
    let out = run(&["check-config", &file], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("valid"), "{stdout}");
    // What the file says, and the defaults it left out.
    for line in [
        r#"threshold = "750ms""#,
        r#"mode = "required""#,
        r#"ttl = "2h""#,
        r#"ttl = "1h""#,
        r#"listen = "127.0.0.1:8080""#,
        r#"path = "/mcp""#,
        r#"mode = "none""#,
    ] {
        assert!(stdout.contains(line), "missing {line}:\n{stdout}");
    }
    // The printed configuration is itself a valid file.
    let printed = RawConfig::from_toml(&stdout).expect("printed TOML parses");
    printed.validate().expect("printed config is valid");
    // Flags override the file.
    let out = run(
        &["check-config", &file, "--threshold", "5s"],
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains(r#"threshold = "5s""#));
}

#[test]
fn check_config_warns_of_detach_without_a_principal_and_auth_none_beyond_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let body = "[[upstreams]]\nurl = \"http://127.0.0.1:9/mcp\"\non_disconnect = \"detach\"\n";
    let file = write(dir.path(), "d.toml", body);
    let out = run(&["check-config", &file], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let warning = stdout
        .lines()
        .find(|l| l.starts_with("# warning: on_disconnect = \"detach\""))
        .unwrap_or_else(|| panic!("no detach warning:\n{stdout}"));
    assert!(
        warning.contains("cancelled when its client leaves"),
        "{warning}"
    );
    // The printed configuration still parses (the warning is a comment).
    RawConfig::from_toml(&stdout).expect("printed TOML parses");
    // With a principal to tell callers apart, nothing to warn about.
    let file = write(
        dir.path(),
        "b.toml",
        &format!("{body}[auth]\nmode = \"bearer\"\n"),
    );
    let out = run(&["check-config", &file], Duration::from_secs(30));
    assert!(
        !text(&out.stdout).contains("# warning"),
        "{}",
        text(&out.stdout)
    );
    // auth none beyond loopback: the same warning serve logs (the container
    // check looks for it in the image's log).
    let file = write(
        dir.path(),
        "open.toml",
        "[server]\nlisten = \"0.0.0.0:8080\"\n[[upstreams]]\nurl = \"http://127.0.0.1:9/mcp\"\n",
    );
    let out = run(&["check-config", &file], Duration::from_secs(30));
    let want = "# warning: auth.mode = \"none\" on an address other than loopback (0.0.0.0:8080)";
    assert!(text(&out.stdout).contains(want), "{}", text(&out.stdout));
}

/// A stdio child shared between principals shares whatever the server keeps in
/// memory: said at start and by check-config, unless each principal has its own.
#[test]
fn check_config_warns_of_a_shared_stdio_child_under_an_auth_mode_with_principals() {
    let dir = tempfile::tempdir().unwrap();
    let stdio = "[[upstreams]]\nname = \"notes\"\ncommand = [\"notes-server\"]\n";
    let want =
        "# warning: stdio upstream notes runs with scope = \"shared\" under auth.mode = \"bearer\"";
    let bearer = "[auth]\nmode = \"bearer\"\n";
    for (body, warned) in [
        (format!("{bearer}{stdio}"), true),
        (format!("{bearer}{stdio}scope = \"principal\"\n"), false),
        (format!("{bearer}{stdio}scope = \"session\"\n"), false),
        // One principal: nothing is shared with anyone else.
        (stdio.to_string(), false),
    ] {
        let file = write(dir.path(), "s.toml", &body);
        let out = run(&["check-config", &file], Duration::from_secs(30));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert_eq!(stdout.contains(want), warned, "{body}\n{stdout}");
        if !warned {
            assert!(!stdout.contains("scope = \"shared\" under"), "{stdout}");
        }
    }
}

#[test]
fn check_config_rejects_bad_values_with_exit_64_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (body, key) in [
        (
            "[tasks]\nttl = \"forever\"\n[[upstreams]]\nurl = \"http://127.0.0.1:9000/mcp\"\n",
            "tasks.ttl",
        ),
        (
            "[[upstreams]]\nurl = \"http://127.0.0.1:9000/mcp\"\n[upstreams.tools.x]\nmode = \"sometimes\"\n",
            "upstreams[0].tools.x.mode",
        ),
        ("[[upstreams]]\nurl = \"ftp://example/mcp\"\n", "upstreams[0].url"),
        ("[server]\nlisten_on = \"x\"\n", "listen_on"),
        (
            "[server]\nworkers = 1000\n[[upstreams]]\nurl = \"http://127.0.0.1:9000/mcp\"\n",
            "server.workers",
        ),
        (
            "[[upstreams]]\ncommand = [\"some-server\"]\nhttp2 = true\n",
            "upstreams[0].http2",
        ),
        (
            "[[upstreams]]\ncommand = [\"some-server\"]\nscope = \"user\"\n",
            "upstreams[0].scope",
        ),
        (
            "[[upstreams]]\nurl = \"http://127.0.0.1:9000/mcp\"\nscope = \"principal\"\n",
            "upstreams[0].scope",
        ),
        (
            "[[upstreams]]\ncommand = [\"some-server\"]\nscope = \"principal\"\nmax_scopes = 0\n",
            "upstreams[0].max_scopes",
        ),
    ] {
        let file = write(dir.path(), "bad.toml", body);
        let out = run(&["check-config", &file], Duration::from_secs(30));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{body}: {stderr}");
        assert!(stderr.contains(key), "{key} not named: {stderr}");
        assert!(out.stdout.is_empty(), "nothing printed as effective");
    }
}

/// `[telemetry]` from the file, or from the OpenTelemetry SDK's environment
/// variables (which override it, as flags do); export headers are secrets.
#[test]
fn telemetry_comes_from_the_file_or_the_opentelemetry_environment() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "t.toml",
        "[telemetry]\notlp_endpoint = \"http://file-collector:4318/v1/traces\"\nsample_ratio = 0.25\n[telemetry.otlp_headers]\nauthorization = \"Bearer from-the-file\"\n[[upstreams]]\nurl = \"http://127.0.0.1:9000/mcp\"\n",
    );
    let limit = Duration::from_secs(30);
    let out = run(&["check-config", &file], limit);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        stdout.contains(r#"otlp_endpoint = "http://file-collector:4318/v1/traces""#),
        "{stdout}"
    );
    assert!(stdout.contains("sample_ratio = 0.25"), "{stdout}");
    assert!(
        !stdout.contains("from-the-file"),
        "a header is a secret: {stdout}"
    );
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "x-api-key=s%3Dcret,x-team=edge",
        ),
        ("OTEL_SERVICE_NAME", "gateway-eu"),
    ];
    let out = run_env(&["check-config", &file], &env, limit);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        stdout.contains(r#"otlp_endpoint = "http://collector:4318/v1/traces""#),
        "{stdout}"
    );
    assert!(
        stdout.contains(r#"service_name = "gateway-eu""#),
        "{stdout}"
    );
    assert!(
        stdout.contains("x-api-key") && stdout.contains("x-team"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("s=cret") && !stdout.contains("s%3Dcret"),
        "{stdout}"
    );
    // The traces endpoint is taken as it is, and wins over the base one.
    let mut env = env.to_vec();
    env.push((
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "https://traces.example.com/otlp",
    ));
    let out = run_env(&["check-config", &file], &env, limit);
    assert!(text(&out.stdout).contains(r#"otlp_endpoint = "https://traces.example.com/otlp""#));
    for (body, key) in [
        (
            "[telemetry]\notlp_endpoint = \"collector:4318\"\n",
            "telemetry.otlp_endpoint",
        ),
        (
            "[telemetry]\nsample_ratio = 1.5\n",
            "telemetry.sample_ratio",
        ),
        (
            "[telemetry.otlp_headers]\n\"bad header\" = \"x\"\n",
            "telemetry.otlp_headers.bad header",
        ),
    ] {
        let body = format!("{body}[[upstreams]]\nurl = \"http://127.0.0.1:9000/mcp\"\n");
        let file = write(dir.path(), "bad.toml", &body);
        let out = run(&["check-config", &file], limit);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{body}: {stderr}");
        assert!(stderr.contains(key), "{key} not named: {stderr}");
    }
}

#[test]
fn config_example_passes_check_config() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
    if !example.exists() {
        eprintln!("SKIPPED: {} does not exist yet", example.display());
        return;
    }
    let out = run(
        &["check-config", example.to_str().unwrap()],
        Duration::from_secs(30),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "config.example.toml: {}",
        text(&out.stderr)
    );
}

#[test]
fn serve_with_a_bad_flag_exits_64_before_binding_or_opening_anything() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // The port is taken: had tasklift tried to bind, it would fail differently.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = taken.local_addr().unwrap().to_string();
    let base = [
        "serve",
        "--upstream",
        "http://127.0.0.1:9/mcp",
        "--listen",
        &listen,
        "--data-dir",
        data.to_str().unwrap(),
    ];
    for (flag, value, key) in [
        ("--threshold", "soon", "tasks.threshold"),
        ("--auth", "password", "auth.mode"),
        ("--ttl", "0", "tasks.ttl"),
    ] {
        let mut args = base.to_vec();
        args.extend([flag, value]);
        let out = run(&args, Duration::from_secs(30));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{flag} {value}: {stderr}");
        assert!(stderr.contains(key), "{key} not named: {stderr}");
        assert!(!data.exists(), "the store was opened before validation");
    }
    // A valid configuration gets as far as binding, and fails there instead.
    let out = run(&base, Duration::from_secs(30));
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(64), "{stderr}");
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(&listen), "{stderr}");
    drop(taken);
}

/// The README's first command is `cargo run -- demo`: with other binaries in the
/// workspace (the benchmark harness, the fixture server), `cargo run` at the root
/// must still pick the proxy.
#[test]
fn cargo_run_starts_the_proxy() {
    // Only the environment a user's shell would have: the variables cargo sets for
    // tests (CARGO_MANIFEST_DIR, …) would make it rebuild crates whose build
    // scripts watch them.
    let mut cmd = Command::new(env!("CARGO"));
    cmd.env_clear();
    for k in [
        "PATH",
        "HOME",
        "CARGO_HOME",
        "RUSTUP_HOME",
        "RUSTUP_TOOLCHAIN",
        "CARGO_TARGET_DIR",
        "TMPDIR",
    ] {
        if let Some(v) = std::env::var_os(k) {
            cmd.env(k, v);
        }
    }
    let out = cmd
        .args(["run", "-q", "--", "--version"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .output()
        .expect("cargo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.starts_with("tasklift "),
        "cargo run: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The README's first command: the demo walks every step and ends well, the last
/// one a client without the tasks extension following a tool-level handle.
#[test]
fn the_demo_walks_the_whole_lifecycle_and_the_tool_level_handle() {
    let out = run(&["demo"], Duration::from_secs(120));
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    for step in [
        "1. A fast call is answered directly",
        "← completed: Monthly report: 4 pages",
        "← final status: \"cancelled\"",
        "← completed: Deleted report.pdf.",
        "tools/list also offers it: tasklift_wait, tasklift_cancel",
        "the model follows the text: tools/call tasklift_wait",
        "← the tool's own result: Monthly report: 3 pages",
    ] {
        assert!(stdout.contains(step), "missing {step:?} in\n{stdout}");
    }
}

/// `tasklift --version` names the package version and the commit it was built
/// from (build.rs): 7 or more hex digits, `-dirty` when the tree differed, or
/// `unknown` without git history.
#[test]
fn version_names_the_release_and_the_commit() {
    let out = run(&["--version"], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let prefix = format!("tasklift {} (commit ", env!("CARGO_PKG_VERSION"));
    let commit = stdout
        .trim_end()
        .strip_prefix(&prefix)
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("not `{prefix}…)`: {stdout:?}"));
    let sha = commit.strip_suffix("-dirty").unwrap_or(commit);
    assert!(
        sha == "unknown" || (sha.len() >= 7 && sha.chars().all(|c| c.is_ascii_hexdigit())),
        "not a commit: {commit:?}"
    );
    // Built from this repository, so the commit is known.
    if Path::new(env!("CARGO_MANIFEST_DIR")).join(".git").exists() {
        assert_ne!(sha, "unknown", "{stdout}");
    }
}

/// Every key of the configuration, by table: `upstreams` for `[[upstreams]]`,
/// `upstreams.tools.NAME` for any tool's rules. Empty tables (`env`, `headers`)
/// are values.
fn config_keys(v: &toml::Value) -> std::collections::BTreeMap<String, Vec<(String, toml::Value)>> {
    fn walk(
        table: &toml::Table,
        path: &str,
        out: &mut std::collections::BTreeMap<String, Vec<(String, toml::Value)>>,
    ) {
        out.entry(path.to_string()).or_default();
        for (k, v) in table {
            let sub = match path {
                "" => k.clone(),
                "upstreams.tools" => "upstreams.tools.NAME".to_string(),
                p => format!("{p}.{k}"),
            };
            match v {
                toml::Value::Table(t) if !t.is_empty() => walk(t, &sub, out),
                toml::Value::Array(a) if a.first().is_some_and(|e| e.is_table()) => {
                    for e in a {
                        walk(e.as_table().unwrap(), &sub, out);
                    }
                }
                _ if path == "upstreams.tools" => {}
                _ => out
                    .entry(path.to_string())
                    .or_default()
                    .push((k.clone(), v.clone())),
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(v.as_table().expect("a table"), "", &mut out);
    out.remove("");
    out.remove("upstreams.tools");
    for keys in out.values_mut() {
        keys.sort_by(|a, b| a.0.cmp(&b.0));
        keys.dedup_by(|a, b| a.0 == b.0);
    }
    out
}

/// docs/configuration.md as (table, key) → default cell, from the rows of the
/// table under each `` ## `[table]` `` heading.
fn documented_keys(doc: &str) -> std::collections::BTreeMap<(String, String), String> {
    let mut out = std::collections::BTreeMap::new();
    let mut table = None;
    for line in doc.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            let name = h.trim().trim_matches('`').trim_matches(['[', ']']);
            table = h.contains('[').then(|| name.to_string());
            continue;
        }
        let (Some(t), Some(row)) = (&table, line.strip_prefix("| `")) else {
            continue;
        };
        let cells: Vec<&str> = row.split(" | ").collect();
        let key = cells[0].trim_end_matches('`');
        let default = cells.get(1).copied().unwrap_or("").trim().to_string();
        assert!(
            out.insert((t.clone(), key.to_string()), default).is_none(),
            "{t}.{key} documented twice"
        );
    }
    out
}

/// docs/configuration.md and config.example.toml cannot drift from the code: every
/// key `RawConfig` has is in both, each default the page gives is tasklift's, the
/// example shows the defaults it claims to, and every flag and environment
/// variable of `tasklift serve` is named on the page.
#[test]
fn config_reference_matches_the_code() {
    use tasklift::config::{RawConfig, RawToolRule, RawUpstream, RawWebhook};
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/configuration.md")).unwrap();
    let example_text = std::fs::read_to_string(root.join("config.example.toml")).unwrap();

    // The defaults, with one upstream and one tool rule holding every key (no
    // `..Default::default()`: a new rule key must be added here, and so to the docs).
    let mut defaults = RawConfig::default();
    let mut up = RawUpstream::default();
    let s = || Some(String::new());
    up.tools.insert(
        "NAME".into(),
        RawToolRule {
            mode: s(),
            threshold: s(),
            ttl: s(),
            poll_interval: s(),
            non_task_clients: s(),
            on_disconnect: s(),
            replay_window: s(),
        },
    );
    defaults.upstreams.push(up);
    defaults.webhooks.push(RawWebhook::default());
    let code = config_keys(&toml::Value::try_from(&defaults).unwrap());
    let example = config_keys(&toml::Value::Table(
        toml::from_str(&example_text).expect("config.example.toml parses"),
    ));
    let documented = documented_keys(&doc);

    let mut problems = Vec::new();
    for (table, keys) in &code {
        for (key, default) in keys {
            let name = format!("[{table}] {key}");
            let rule = table == "upstreams.tools.NAME";
            match documented.get(&(table.clone(), key.clone())) {
                None => problems.push(format!("{name}: not in docs/configuration.md")),
                Some(cell) if rule => {
                    if !cell.starts_with("inherits ") {
                        problems.push(format!(
                            "{name}: default {cell:?} should say what it inherits"
                        ));
                    }
                }
                Some(cell) => {
                    let literal = cell.strip_prefix('`').and_then(|c| c.strip_suffix('`'));
                    let parsed = literal
                        .and_then(|l| toml::from_str::<toml::Table>(&format!("v = {l}")).ok())
                        .and_then(|mut t| t.remove("v"));
                    if parsed.as_ref() != Some(default) {
                        problems.push(format!(
                            "{name}: docs/configuration.md says the default is {cell}, tasklift's is `{default}`"
                        ));
                    }
                }
            }
            // A webhook in the example would send events: it is shown commented out.
            if table == "webhooks" {
                continue;
            }
            let shown = example
                .get(table)
                .and_then(|keys| keys.iter().find(|(k, _)| k == key));
            match shown {
                None => problems.push(format!("{name}: not in config.example.toml")),
                // The example says "every key is shown with its default"; an
                // upstream needs a URL, and tool rules show examples.
                Some((_, v)) if !rule && name != "[upstreams] url" && v != default => problems
                    .push(format!(
                        "{name}: config.example.toml shows `{v}`, the default is `{default}`"
                    )),
                Some(_) => {}
            }
        }
    }
    for (table, key) in documented.keys() {
        if !code
            .get(table)
            .is_some_and(|keys| keys.iter().any(|(k, _)| k == key))
        {
            problems.push(format!(
                "[{table}] {key}: in docs/configuration.md, but not a key of tasklift's"
            ));
        }
    }
    for (table, keys) in &example {
        for (key, _) in keys {
            if !code
                .get(table)
                .is_some_and(|keys| keys.iter().any(|(k, _)| k == key))
            {
                problems.push(format!(
                    "[{table}] {key}: in config.example.toml, but not a key"
                ));
            }
        }
    }

    // Flags and environment variables of `serve`, as clap knows them.
    use clap::CommandFactory;
    let cli = tasklift::cli::Cli::command();
    let serve = cli.find_subcommand("serve").expect("serve");
    for arg in serve.get_arguments() {
        if let Some(env) = arg.get_env() {
            let env = env.to_string_lossy();
            if !doc.contains(&format!("`{env}`")) {
                problems.push(format!(
                    "environment variable {env}: not in docs/configuration.md"
                ));
            }
        }
        let Some(long) = arg.get_long() else {
            if arg.get_id() == "command" && !doc.contains("`-- COMMAND ARGS`") {
                problems.push("`-- COMMAND ARGS`: not in docs/configuration.md".into());
            }
            continue;
        };
        if ["config", "log-format", "help"].contains(&long) {
            continue;
        }
        if !doc.contains(&format!("`--{long}`")) {
            problems.push(format!("--{long}: not in docs/configuration.md"));
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// A container is configured through its environment: each flag of `serve` has a
/// `TASKLIFT_*` variable (docs/configuration.md), which wins over the file and
/// loses to the flag; `TASKLIFT_CONFIG` names the file.
#[test]
fn serve_flags_can_come_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "t.toml", VALID);
    let check = |env: &[(&str, &str)], args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_tasklift"))
            .arg("check-config")
            .arg(&file)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .expect("tasklift runs");
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let env = [
        ("TASKLIFT_LISTEN", "0.0.0.0:8080"),
        ("TASKLIFT_DATA_DIR", "/data"),
        ("TASKLIFT_THRESHOLD", "5s"),
        (
            "TASKLIFT_ALLOW_ORIGINS",
            "https://a.example,https://b.example",
        ),
        ("TASKLIFT_FORWARD_AUTHORIZATION", "true"),
    ];
    let stdout = check(&env, &[]);
    for line in [
        r#"listen = "0.0.0.0:8080""#,
        r#"data_dir = "/data""#,
        r#"threshold = "5s""#,
        r#""https://a.example","#,
        r#""https://b.example","#,
        "forward_authorization = true",
    ] {
        assert!(stdout.contains(line), "missing {line}:\n{stdout}");
    }
    let stdout = check(&env, &["--threshold", "9s"]);
    assert!(stdout.contains(r#"threshold = "9s""#), "{stdout}");

    // TASKLIFT_CONFIG for `serve`: an invalid file named there is refused (exit 64,
    // naming it) before anything is bound.
    let bad = write(dir.path(), "bad.toml", "[tasks]\nttl = \"forever\"\n");
    let out = Command::new(env!("CARGO_BIN_EXE_tasklift"))
        .args(["serve", "--upstream", "http://127.0.0.1:9/mcp"])
        .env("TASKLIFT_CONFIG", &bad)
        .stdin(Stdio::null())
        .output()
        .expect("tasklift runs");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("tasks.ttl"), "{stderr}");
}
