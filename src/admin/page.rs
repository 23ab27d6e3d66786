//! The status page the admin listener serves at `/`: what it shows, gathered at
//! request time ([`Status::collect`]), and its HTML ([`Status::render`]), every
//! text from upstreams or clients escaped.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http::{header, Response, StatusCode};

use super::webhooks;
use crate::config::Transport;
use crate::front::State;
use crate::serving::body::{self, RespBody};
use crate::store::{TaskRecord, TaskStatus};
use crate::upstream::Era;
use crate::webhooks::{DestinationStatus, Webhooks};

/// How many recent tasks the page lists.
pub const RECENT_TASKS: usize = 20;

pub(super) async fn page(
    state: &State,
    started: Instant,
    hooks: Option<&Webhooks>,
) -> Response<RespBody> {
    let mut status = Status::collect(state, started.elapsed()).await;
    if let Some(h) = hooks {
        status.webhooks = h.destinations().await;
    }
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
        .header(header::CACHE_CONTROL, "no-store")
        .header("x-content-type-options", "nosniff")
        .header(
            "content-security-policy",
            "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
        )
        .body(body::full(status.render()))
        .expect("valid response")
}

/// One upstream's line on the page.
#[derive(Debug, Clone)]
pub struct UpstreamStatus {
    /// Configured name.
    pub name: String,
    /// Mount path.
    pub path: String,
    /// Era, when configured or already detected.
    pub era: Option<Era>,
    /// `http://host:port/path` (no credentials, no query) or `stdio: command`.
    pub transport: String,
    /// `Err(reason)` when it cannot take calls.
    pub ready: Result<(), String>,
    /// Upstream calls running now.
    pub in_flight: i64,
    /// stdio restarts (`None`: not stdio).
    pub restarts: Option<u64>,
    /// Open legacy client sessions at its path.
    pub sessions: usize,
}

/// Everything the status page shows, gathered at request time.
#[derive(Debug, Clone)]
pub struct Status {
    /// tasklift's version.
    pub version: &'static str,
    /// Time since start.
    pub uptime: Duration,
    /// The MCP front door's configured address.
    pub listen: SocketAddr,
    /// Upstreams by name.
    pub upstreams: Vec<UpstreamStatus>,
    /// Tasks in the store by status, or why the store could not be read.
    pub tasks: Result<BTreeMap<&'static str, u64>, String>,
    /// Calls with a background owner now (tasks being driven).
    pub running: usize,
    /// Retried calls answered from an identical earlier call's task: (joined it
    /// running, answered from its stored result).
    pub replays: (u64, u64),
    /// Bytes the store uses on disk.
    pub disk_bytes: Option<u64>,
    /// Bytes free for the embedded store and whether that is below the watermark,
    /// when watched.
    pub free_space: Option<(Option<u64>, Option<String>)>,
    /// The most recent tasks, newest first (records without outcomes).
    pub recent: Vec<TaskRecord>,
    /// Each webhook destination (none unless configured).
    pub webhooks: Vec<DestinationStatus>,
    /// Now, unix milliseconds (for ages).
    pub now_ms: u64,
}

impl Status {
    /// Read the figures now (checking each upstream's reachability, as `/readyz` does).
    pub async fn collect(state: &State, uptime: Duration) -> Self {
        crate::health::check_upstreams(&state.mounts).await;
        let mut upstreams: Vec<UpstreamStatus> = state
            .mounts
            .values()
            .map(|m| UpstreamStatus {
                name: m.cfg.name.clone(),
                path: m.cfg.path.clone(),
                era: m.upstream.known_era(),
                transport: transport(&m.cfg.transport),
                ready: m.upstream.health(),
                in_flight: state.metrics.in_flight(&m.cfg.name),
                restarts: m.upstream.restarts(),
                sessions: state.legacy.sessions_at(&m.cfg.path),
            })
            .collect();
        upstreams.sort_by(|a, b| a.name.cmp(&b.name));
        let (tasks, recent) = match state.engine.list(None).await {
            Ok(all) => {
                let mut counts = BTreeMap::new();
                for r in &all {
                    *counts.entry(r.status().as_str()).or_default() += 1;
                }
                let recent = all.into_iter().take(RECENT_TASKS).collect();
                (Ok(counts), recent)
            }
            // The page says the store cannot be read; the store's own error follows.
            Err(crate::tasks::TaskError::Read(e)) => (Err(e.to_string()), Vec::new()),
            Err(e) => (Err(e.to_string()), Vec::new()),
        };
        Self {
            version: crate::VERSION,
            uptime,
            listen: state.cfg.listen,
            upstreams,
            tasks,
            running: state.engine.running_count(),
            replays: state.metrics.replays(),
            disk_bytes: state.engine.health().await.ok().map(|s| s.disk_bytes),
            free_space: state
                .engine
                .disk()
                .map(|d| (d.free_bytes(), d.is_low().then(|| d.why_low()))),
            recent,
            webhooks: Vec::new(),
            now_ms: state.engine.now_ms(),
        }
    }

    /// The page, section by section.
    pub fn render(&self) -> String {
        let mut o = String::with_capacity(8192);
        self.write_head(&mut o);
        self.write_upstreams(&mut o);
        self.write_task_counts(&mut o);
        self.write_activity(&mut o);
        webhooks::write(&mut o, &self.webhooks, self.now_ms);
        self.write_recent(&mut o);
        o
    }

    /// The document head and the title line: version, uptime, front door.
    fn write_head(&self, o: &mut String) {
        let _ = write!(
            o,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta http-equiv=\"refresh\" content=\"5\">\
             <title>tasklift status</title><style>{CSS}</style></head><body>\n\
             <h1>tasklift <span class=\"dim\">{}</span></h1>\n\
             <p class=\"dim\">up <span id=\"uptime\">{}</span> · MCP front door on {} · \
             refreshes every 5 s · read-only</p>\n",
            escape(self.version),
            human(self.uptime),
            escape(&self.listen.to_string()),
        );
    }

    /// Each upstream: path, era, transport, readiness, calls in flight, restarts, sessions.
    fn write_upstreams(&self, o: &mut String) {
        o.push_str("<h2>Upstreams</h2>\n<table id=\"upstreams\"><thead><tr><th>name</th><th>path</th><th>era</th><th>transport</th><th>ready</th><th>in flight</th><th>restarts</th><th>legacy sessions</th></tr></thead><tbody>\n");
        for u in &self.upstreams {
            let era = match &u.era {
                Some(Era::Modern) => "modern",
                Some(Era::Legacy) => "legacy",
                None => "not yet known",
            };
            let ready = match &u.ready {
                Ok(()) => "<td class=\"ok\">ready</td>".to_string(),
                Err(why) => format!(
                    "<td class=\"bad\">not ready: <span class=\"reason\">{}</span></td>",
                    escape(why)
                ),
            };
            let restarts = u.restarts.map_or("–".to_string(), |r| r.to_string());
            let _ = writeln!(
                o,
                "<tr class=\"upstream\"><td class=\"name\">{}</td><td>{}</td><td>{era}</td><td class=\"transport\">{}</td>{ready}<td class=\"num\">{}</td><td class=\"num\">{restarts}</td><td class=\"num\">{}</td></tr>",
                escape(&u.name),
                escape(&u.path),
                escape(&u.transport),
                u.in_flight,
                u.sessions,
            );
        }
        o.push_str("</tbody></table>\n");
    }

    /// Tasks by status, or why the store could not be read.
    fn write_task_counts(&self, o: &mut String) {
        o.push_str("<h2>Tasks</h2>\n");
        match &self.tasks {
            Ok(counts) => {
                o.push_str("<table id=\"counts\"><thead><tr>");
                for s in TaskStatus::ALL {
                    let _ = write!(o, "<th>{}</th>", s.as_str());
                }
                o.push_str("<th>total</th></tr></thead><tbody><tr>");
                for s in TaskStatus::ALL {
                    let n = counts.get(s.as_str()).copied().unwrap_or(0);
                    let _ = write!(o, "<td class=\"num\" id=\"count-{}\">{n}</td>", s.as_str());
                }
                let _ = writeln!(
                    o,
                    "<td class=\"num\" id=\"count-total\">{}</td></tr></tbody></table>",
                    counts.values().sum::<u64>()
                );
            }
            Err(e) => {
                let _ = writeln!(
                    o,
                    "<p class=\"bad\">the task store cannot be read: {}</p>",
                    escape(e)
                );
            }
        }
    }

    /// Work in the background, replays, and the store's space.
    fn write_activity(&self, o: &mut String) {
        let legacy: usize = self.upstreams.iter().map(|u| u.sessions).sum();
        let disk = self
            .disk_bytes
            .map_or("unknown".to_string(), |b| format!("{b} bytes"));
        let _ = writeln!(
            o,
            "<p>calls driven in the background: <span id=\"running\">{}</span> · \
             legacy client sessions: <span id=\"legacy-sessions\">{legacy}</span> · \
             store on disk: {disk}</p>",
            self.running
        );
        let _ = writeln!(
            o,
            "<p>retried calls replayed instead of run again (on_disconnect = detach): \
             joined a running call <span id=\"replays-joined\">{}</span> · \
             answered from a stored result <span id=\"replays-stored\">{}</span></p>",
            self.replays.0, self.replays.1
        );
        if let Some((free, low)) = &self.free_space {
            let free = free.map_or("unknown".to_string(), |b| format!("{b} bytes"));
            let _ = match low {
                Some(why) => writeln!(
                    o,
                    "<p class=\"bad\" id=\"low-space\">{}: \
                     no new tasks are created (calls run synchronously) until space is freed</p>",
                    escape(why)
                ),
                None => writeln!(o, "<p>free space: {free}</p>"),
            };
        }
    }

    /// The newest tasks, without arguments, results or owners; then the page's end.
    fn write_recent(&self, o: &mut String) {
        let _ = writeln!(
            o,
            "<h2>Recent tasks</h2>\n<p class=\"dim\">the {RECENT_TASKS} newest; \
             arguments, results and owners are never shown</p>"
        );
        o.push_str("<table id=\"recent\"><thead><tr><th>task</th><th>upstream</th><th>tool</th><th>status</th><th>age</th><th>status message</th></tr></thead><tbody>\n");
        if self.recent.is_empty() {
            o.push_str("<tr><td colspan=\"6\" class=\"dim\">no tasks</td></tr>\n");
        }
        for t in &self.recent {
            let age = Duration::from_millis(self.now_ms.saturating_sub(t.created_at_ms));
            let _ = writeln!(
                o,
                "<tr class=\"task\"><td class=\"id\">{}</td><td>{}</td><td class=\"tool\">{}</td><td class=\"status {}\">{}</td><td class=\"num\">{}</td><td class=\"message\">{}</td></tr>",
                escape(&shorten(&t.id, 8)),
                escape(&t.upstream),
                escape(&shorten(&t.tool, 64)),
                t.status().as_str(),
                t.status().as_str(),
                age_text(age),
                escape(&shorten(t.status_message.as_deref().unwrap_or(""), 80)),
            );
        }
        o.push_str("</tbody></table>\n</body></html>\n");
    }
}

const CSS: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}\
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}\
.dim{color:#777;font-weight:normal}\
table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}\
th{background:#eef}td.num{text-align:right}td.id{font-family:monospace}\
.ok{background:#dfd}.bad{background:#fdd}.working,.input_required{background:#ffd}\
.completed{background:#dfd}.failed{background:#fdd}.cancelled{background:#eee}";

/// Where an upstream is, without anything secret: an HTTP URL without credentials
/// or query, or a stdio program with its argument count (arguments may carry tokens;
/// the environment is never shown).
fn transport(t: &Transport) -> String {
    match t {
        Transport::Http { url, .. } => {
            let host = url.host().unwrap_or("");
            let port = url.port_u16().map(|p| format!(":{p}")).unwrap_or_default();
            format!(
                "{}://{host}{port}{}",
                url.scheme_str().unwrap_or("http"),
                url.path()
            )
        }
        Transport::Stdio(s) => {
            let program = s.command.first().map(String::as_str).unwrap_or("");
            let mut out = match s.command.len().saturating_sub(1) {
                0 => format!("stdio: {program}"),
                1 => format!("stdio: {program} (1 argument)"),
                n => format!("stdio: {program} ({n} arguments)"),
            };
            if s.processes > 1 {
                let _ = write!(out, " (×{})", s.processes);
            }
            out
        }
    }
}

/// Text made safe to put in HTML, as element content or in a quoted attribute.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// At most `max` characters of `s`, with `…` when some were cut.
pub fn shorten(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_string(),
    }
}

/// A task's age in its largest unit: `12s`, `3m`, `5h`, `2d`.
pub fn age_text(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// An uptime in its two largest units: `42s`, `3m 5s`, `2h 10m`, `4d 1h`.
fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86400, s % 86400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_neutralises_markup() {
        assert_eq!(
            escape("<script>alert(1)</script>"),
            "&lt;script&gt;alert(1)&lt;/script&gt;"
        );
        assert_eq!(
            escape(r#"a & "b" 'c'"#),
            "a &amp; &quot;b&quot; &#39;c&#39;"
        );
        assert_eq!(escape("&lt;"), "&amp;lt;", "escaping is not idempotent");
        assert_eq!(escape("plain – ünïcode"), "plain – ünïcode");
    }

    #[test]
    fn shorten_counts_characters_not_bytes() {
        assert_eq!(
            shorten("0123456789abcdef", 8),
            "01234567…",
            "ids keep 8 characters"
        );
        assert_eq!(shorten("short", 8), "short");
        assert_eq!(shorten("exactly8", 8), "exactly8");
        assert_eq!(shorten("ééééééééé", 8), "éééééééé…");
    }

    #[test]
    fn ages_and_uptimes_read_at_a_glance() {
        assert_eq!(age_text(Duration::from_millis(12_400)), "12s");
        assert_eq!(age_text(Duration::from_secs(185)), "3m");
        assert_eq!(age_text(Duration::from_secs(5 * 3600 + 10)), "5h");
        assert_eq!(age_text(Duration::from_secs(3 * 86400)), "3d");
        assert_eq!(human(Duration::from_secs(185)), "3m 5s");
        assert_eq!(human(Duration::from_secs(86400 + 3600)), "1d 1h");
    }

    #[test]
    fn transport_hides_credentials_and_queries() {
        let url = "https://user:pw@reports.internal:8443/mcp?key=secret"
            .parse()
            .unwrap();
        assert_eq!(
            transport(&Transport::Http { url, http2: false }),
            "https://reports.internal:8443/mcp"
        );
    }

    fn record(id: &str, tool: &str, message: &str) -> TaskRecord {
        let mut rec = TaskRecord::new(crate::store::NewTask {
            id: id.into(),
            owner: "bearer:0123456789abcdef-owner-hash".into(),
            upstream: "reports".into(),
            tool: tool.into(),
            created_at_ms: 1_000,
            ttl_ms: 60_000,
            poll_interval_ms: 1_000,
        });
        rec.status_message = Some(message.into());
        rec
    }

    #[test]
    fn the_page_escapes_what_clients_and_upstreams_wrote() {
        let evil = "<script>alert(1)</script>";
        let long = "m".repeat(200);
        let status = Status {
            version: "9.9.9",
            uptime: Duration::from_secs(65),
            listen: "127.0.0.1:8080".parse().unwrap(),
            upstreams: vec![UpstreamStatus {
                name: format!("up{evil}"),
                path: "/mcp".into(),
                era: Some(Era::Legacy),
                transport: "http://127.0.0.1:9000/mcp".into(),
                ready: Err(format!("upstream {evil} is unreachable")),
                in_flight: 2,
                restarts: Some(3),
                sessions: 1,
            }],
            tasks: Ok([("working", 2), ("failed", 1)].into_iter().collect()),
            running: 2,
            replays: (3, 4),
            disk_bytes: Some(4096),
            free_space: None,
            recent: vec![
                record("11111111-2222-3333-4444-555555555555", evil, evil),
                record("abc", "plain", &long),
            ],
            webhooks: Vec::new(),
            now_ms: 13_500,
        };
        let html = status.render();
        assert!(!html.contains("<script"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(html.contains("11111111…"), "{html}");
        assert!(!html.contains("11111111-2222"), "{html}");
        assert!(html.contains(&format!("{}…", "m".repeat(80))), "{html}");
        assert!(!html.contains(&"m".repeat(81)), "{html}");
        assert!(!html.contains("owner-hash"), "{html}");
        assert!(html.contains(">12s<"), "{html}");
        assert!(html.contains("id=\"count-working\">2<"), "{html}");
        assert!(html.contains("id=\"count-total\">3<"), "{html}");
        assert!(html.contains("id=\"replays-joined\">3<"), "{html}");
        assert!(html.contains("id=\"replays-stored\">4<"), "{html}");
        assert!(
            html.contains("up 1m 5s") || html.contains(">1m 5s<"),
            "{html}"
        );
    }
}
