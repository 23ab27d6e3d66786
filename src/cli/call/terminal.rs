//! The terminal side of one call: `Cx` (everything a call needs: the client, its
//! flags, the status line, Ctrl-C and stdin), `Interrupt` (Ctrl-C, watched from the
//! start), `Stdin` (answers read from stdin for `form`), and `ask`, which answers
//! the server's requests there.

use std::io::{BufRead, Write};

use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::exit::{fail, Fail, EXIT_FAILED, EXIT_INTERRUPTED};
use super::form;
use super::status::StatusLine;
use crate::cli::client::Client;

/// Ctrl-C, listened for from the start (so it never kills the process mid-call).
pub(super) struct Interrupt {
    #[cfg(unix)]
    sig: tokio::signal::unix::Signal,
}

impl Interrupt {
    pub(super) fn new() -> std::io::Result<Self> {
        Ok(Self {
            #[cfg(unix)]
            sig: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?,
        })
    }

    pub(super) async fn recv(&mut self) {
        #[cfg(unix)]
        {
            self.sig.recv().await;
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Prompts on stderr, answers from stdin (read by a thread started at the first
/// question, so stdin is left alone when nothing is asked).
pub(super) struct Stdin {
    pub(super) lines: Option<mpsc::UnboundedReceiver<String>>,
}

impl form::Terminal for Stdin {
    fn say(&mut self, text: &str) {
        eprintln!("{text}");
    }

    async fn ask(&mut self, prompt: &str) -> Option<String> {
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        let rx = self.lines.get_or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            std::thread::spawn(move || {
                let stdin = std::io::stdin();
                loop {
                    let mut line = String::new();
                    match stdin.lock().read_line(&mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            let line = line.trim_end_matches(['\n', '\r']).to_string();
                            if tx.send(line).is_err() {
                                break;
                            }
                        }
                    }
                }
            });
            rx
        });
        let line = rx.recv().await;
        if line.is_none() {
            eprintln!();
        }
        line
    }
}

/// Everything one call needs.
pub(super) struct Cx {
    pub(super) client: Client,
    pub(super) url: String,
    pub(super) tool: String,
    pub(super) json: bool,
    /// Someone can answer questions.
    pub(super) interactive: bool,
    pub(super) status: StatusLine,
    pub(super) interrupt: Interrupt,
    pub(super) stdin: Stdin,
}

/// Answer the server's requests at the terminal (Ctrl-C exits with 130).
pub(super) async fn ask(
    cx: &mut Cx,
    requests: &Map<String, Value>,
) -> Result<Map<String, Value>, Fail> {
    if !cx.interactive {
        let methods: Vec<&str> = requests
            .values()
            .filter_map(|r| r["method"].as_str())
            .collect();
        return Err(fail(
            EXIT_FAILED,
            format!(
                "the server asks for input ({}), but with --json and no terminal nobody can answer; run without --json, or in a terminal",
                methods.join(", ")
            ),
        ));
    }
    let answered = tokio::select! {
        a = form::answer_all(requests, &cx.url, &mut cx.stdin) => a,
        _ = cx.interrupt.recv() => {
            eprintln!();
            return Err(fail(EXIT_INTERRUPTED, "interrupted while answering the server"));
        }
    };
    answered.map_err(|m| fail(EXIT_FAILED, m))
}
