//! `[[webhooks]]` as `check-config` and `serve` see it: a bad value stops both
//! with exit 64 naming the key, and the printed configuration hides the secret.

use std::path::Path;
use std::time::Duration;

use crate::support::cli::{run, text};

const UP: &str = "[[upstreams]]\nurl = \"http://127.0.0.1:9/mcp\"\n";
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn write(dir: &Path, body: &str) -> String {
    let p = dir.join("w.toml");
    std::fs::write(&p, body).unwrap();
    p.display().to_string()
}

#[test]
fn check_config_prints_a_webhook_with_its_secret_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let body =
        format!("{UP}[[webhooks]]\nurl = \"https://hooks.example.com/t\"\nsecret = \"{SECRET}\"\n");
    let out = run(
        &["check-config", &write(dir.path(), &body)],
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("https://hooks.example.com/t"), "{stdout}");
    assert!(
        stdout.contains(r#"max_age = "24h""#),
        "the defaults are shown: {stdout}"
    );
    assert!(
        !stdout.contains("MfKQ9r8"),
        "the secret is redacted: {stdout}"
    );
}

#[test]
fn bad_webhook_values_stop_check_config_and_serve_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let s = format!("secret = \"{SECRET}\"");
    for (table, key) in [
        (
            format!("url = \"ftp://hooks.example.com/\"\n{s}"),
            "webhooks[0].url",
        ),
        (
            format!("url = \"http://hooks.example.com/\"\n{s}"),
            "webhooks[0].url",
        ),
        (
            "url = \"https://h/\"\nsecret = \"not-a-secret\"".to_string(),
            "webhooks[0].secret",
        ),
        (
            format!("url = \"https://h/\"\n{s}\nevents = [\"task.finished\"]"),
            "webhooks[0].events",
        ),
    ] {
        let file = write(dir.path(), &format!("{UP}[[webhooks]]\n{table}\n"));
        for cmd in [
            vec!["check-config", &file],
            vec!["serve", "--config", &file],
        ] {
            let out = run(&cmd, Duration::from_secs(30));
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(64), "{cmd:?} {table}: {stderr}");
            assert!(stderr.contains(key), "{cmd:?} names {key}: {stderr}");
        }
    }
}
