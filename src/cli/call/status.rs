//! What `tasklift call` shows on stderr while it waits: a spinner (or a progress bar
//! when the status message starts with a count such as "3/10 – indexing"), redrawn in
//! place with `\r` when stderr is a terminal; plain lines, one per change, otherwise.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const FRAMES_UTF8: &[&str] = &["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
const FRAMES_ASCII: &[&str] = &["|", "/", "-", "\\"];
/// Cells of the progress bar.
const BAR: usize = 20;

/// The status line.
pub(crate) struct StatusLine {
    inner: Arc<Mutex<Inner>>,
    drawer: Option<tokio::task::JoinHandle<()>>,
}

struct Inner {
    /// stderr is a terminal: draw in place.
    tty: bool,
    /// Print nothing on a non-terminal (`--json`).
    quiet: bool,
    /// Drawing (not paused for a prompt, not finished).
    active: bool,
    /// A line is on screen that the next output must clear.
    drawn: bool,
    label: String,
    message: Option<String>,
    /// Last plain line printed (non-terminal), to print changes only.
    last_plain: String,
    started: Instant,
    frame: usize,
    ascii: bool,
    width: usize,
}

impl StatusLine {
    /// A status line on stderr; `quiet` silences it when stderr is not a terminal.
    /// Must be made inside a tokio runtime (a terminal's spinner is redrawn by a task).
    pub(crate) fn new(tty: bool, quiet: bool) -> Self {
        let utf8 = ["LC_ALL", "LC_CTYPE", "LANG"]
            .iter()
            .filter_map(|k| std::env::var(k).ok())
            .find(|v| !v.is_empty())
            .is_some_and(|v| v.to_ascii_uppercase().contains("UTF-8"));
        let width = std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.parse::<usize>().ok())
            .filter(|&c| c >= 20)
            .unwrap_or(80);
        let inner = Arc::new(Mutex::new(Inner {
            tty,
            quiet,
            active: false,
            drawn: false,
            label: String::new(),
            message: None,
            last_plain: String::new(),
            started: Instant::now(),
            frame: 0,
            ascii: !utf8,
            width,
        }));
        let drawer = tty.then(|| {
            let inner = inner.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let mut i = inner.lock().expect("status lock");
                    if i.active {
                        i.frame += 1;
                        i.draw();
                    }
                }
            })
        });
        Self { inner, drawer }
    }

    /// Show `label` (e.g. `working`) and the status message; draws at once.
    pub(crate) fn set(&self, label: &str, message: Option<&str>) {
        let mut i = self.inner.lock().expect("status lock");
        i.label = label.to_string();
        i.message = message.map(str::to_string);
        i.active = true;
        if i.tty {
            i.draw();
        } else if !i.quiet {
            let line = match message {
                Some(m) => format!("{label}: {m}"),
                None => label.to_string(),
            };
            if line != i.last_plain {
                eprintln!("tasklift call: {line}");
                i.last_plain = line;
            }
        }
    }

    /// Print a line of information on stderr (above the spinner, which goes on).
    pub(crate) fn note(&self, text: &str) {
        let mut i = self.inner.lock().expect("status lock");
        if i.quiet && !i.tty {
            return;
        }
        i.clear();
        eprintln!("tasklift call: {text}");
        if i.active && i.tty {
            i.draw();
        }
    }

    /// Clear the line and stop drawing (before a prompt or the final output).
    pub(crate) fn pause(&self) {
        let mut i = self.inner.lock().expect("status lock");
        i.active = false;
        i.clear();
    }

    /// Seconds since the call began.
    pub(crate) fn elapsed(&self) -> Duration {
        self.inner.lock().expect("status lock").started.elapsed()
    }
}

impl Drop for StatusLine {
    fn drop(&mut self) {
        if let Some(d) = self.drawer.take() {
            d.abort();
        }
        self.pause();
    }
}

impl Inner {
    fn clear(&mut self) {
        if self.drawn {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[2K");
            let _ = e.flush();
            self.drawn = false;
        }
    }

    fn draw(&mut self) {
        let frames = if self.ascii {
            FRAMES_ASCII
        } else {
            FRAMES_UTF8
        };
        let line = render(
            frames[self.frame % frames.len()],
            &self.label,
            self.message.as_deref(),
            self.started.elapsed(),
            self.ascii,
            self.width,
        );
        let mut e = std::io::stderr().lock();
        let _ = write!(e, "\r\x1b[2K{line}");
        let _ = e.flush();
        self.drawn = true;
    }
}

/// One status line: spinner, label, progress bar or message, elapsed time; at most
/// `width - 1` characters, so it never wraps.
pub(crate) fn render(
    frame: &str,
    label: &str,
    message: Option<&str>,
    elapsed: Duration,
    ascii: bool,
    width: usize,
) -> String {
    let secs = elapsed.as_secs();
    let time = if secs >= 60 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{secs}s")
    };
    let dot = if ascii { "-" } else { "·" };
    let mut line = format!("{frame} {label}");
    match message.map(|m| (m, parse_progress(m))) {
        Some((_, Some(p))) => {
            let filled = ((p.fraction * BAR as f64).round() as usize).min(BAR);
            line.push_str(&format!(
                " [{}{}] {}",
                "#".repeat(filled),
                "-".repeat(BAR - filled),
                p.count
            ));
            if !p.rest.is_empty() {
                line.push_str(&format!(" {}", p.rest));
            }
        }
        Some((m, None)) => line.push_str(&format!(" {dot} {m}")),
        None => {}
    }
    line.push_str(&format!(" {dot} {time}"));
    let max = width.saturating_sub(1).max(10);
    if line.chars().count() > max {
        line = line.chars().take(max - 1).collect();
        line.push(if ascii { '>' } else { '…' });
    }
    line
}

/// A status message that starts with a count.
#[derive(Debug, PartialEq)]
pub(crate) struct Progress {
    /// Done, from 0 to 1.
    pub fraction: f64,
    /// The count as written ("3/10", "40%").
    pub count: String,
    /// The rest of the message.
    pub rest: String,
}

/// "3/10 – indexing", "3/10: indexing", "40% done": the count and the rest.
pub(crate) fn parse_progress(message: &str) -> Option<Progress> {
    let m = message.trim_start();
    let end = m
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '/' | '%')))
        .unwrap_or(m.len());
    let count = &m[..end];
    let fraction = if let Some((a, b)) = count.split_once('/') {
        let (a, b) = (a.parse::<f64>().ok()?, b.parse::<f64>().ok()?);
        if b <= 0.0 {
            return None;
        }
        a / b
    } else {
        count.strip_suffix('%')?.parse::<f64>().ok()? / 100.0
    };
    if !fraction.is_finite() {
        return None;
    }
    let rest = m[end..]
        .trim_start()
        .trim_start_matches(['–', '—', '-', ':'])
        .trim();
    Some(Progress {
        fraction: fraction.clamp(0.0, 1.0),
        count: count.to_string(),
        rest: rest.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_read_from_status_messages() {
        let p = parse_progress("3/10 – indexing").unwrap();
        assert_eq!((p.count.as_str(), p.rest.as_str()), ("3/10", "indexing"));
        assert!((p.fraction - 0.3).abs() < 1e-9);
        assert_eq!(parse_progress("40% - done").unwrap().rest, "done");
        assert_eq!(parse_progress("0.5/2: half").unwrap().fraction, 0.25);
        assert_eq!(parse_progress("12/10").unwrap().fraction, 1.0);
        assert_eq!(parse_progress("2/5").unwrap().rest, "");
        for no in ["indexing", "3/0 x", "/5", "3 of 10", "1.2.3", ""] {
            assert_eq!(parse_progress(no), None, "{no}");
        }
    }

    #[test]
    fn lines_show_a_bar_or_the_message_and_never_wrap() {
        let l = render(
            "|",
            "working",
            Some("1/4 – step one"),
            Duration::from_secs(75),
            true,
            80,
        );
        assert_eq!(l, "| working [#####---------------] 1/4 step one - 1m15s");
        let l = render("|", "working", Some("thinking"), Duration::ZERO, false, 80);
        assert_eq!(l, "| working · thinking · 0s");
        let l = render(
            "|",
            "working",
            Some(&"x".repeat(200)),
            Duration::ZERO,
            true,
            40,
        );
        assert_eq!(l.chars().count(), 39);
        assert!(l.ends_with('>'));
    }
}
