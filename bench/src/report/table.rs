//! The table printed on stdout: each label's figures, then the verdicts.

use std::fmt::Write as _;

use crate::loadgen::quantile;
use crate::plan;

use super::figures::creation_of;
use super::verdicts::{pass_text, Verdict};
use super::Report;

impl Report {
    pub(super) fn table(&self, verdicts: &[Verdict]) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "{:<42} {:>10} {:>19} {:>9} {:>9} {:>9} {:>9} {:>8}",
            "target", "req/s", "(min–max)", "p50 ms", "p90 ms", "p99 ms", "max ms", "errors"
        );
        for (label, m) in self.summaries() {
            let _ = writeln!(
                t,
                "{:<42} {:>10.0} {:>19} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>8}",
                label,
                m.rps.med,
                format!("({:.0}–{:.0})", m.rps.min, m.rps.max),
                m.p50 / 1000.0,
                m.p90 / 1000.0,
                m.p99.med / 1000.0,
                m.max / 1000.0,
                m.errors
            );
        }
        let _ = writeln!(
            t,
            "\n{:<42} {:>11} {:>10} {:>13} {:>15} {:>18} {:>16}",
            "CPU (share of a core)",
            "load gen",
            "proxy",
            "upstream",
            "proxy µs/req",
            "upstream µs/req",
            "elsewhere (max)"
        );
        for (label, m) in self.summaries() {
            let _ = writeln!(
                t,
                "{:<42} {:>10.0}% {:>9.0}% {:>12.0}% {:>15.1} {:>18.1} {:>15.0}%",
                label,
                m.cpu_client * 100.0,
                m.cpu_proxy * 100.0,
                m.cpu_upstream * 100.0,
                m.proxy_us,
                m.upstream_us,
                m.cpu_other * 100.0
            );
        }
        if !self.fsync.is_empty() {
            let _ = writeln!(
                t,
                "\nfsync in the store's filesystem: p50 {:.2} ms, p99 {:.2} ms",
                quantile(&self.fsync, 0.5) as f64 / 1000.0,
                quantile(&self.fsync, 0.99) as f64 / 1000.0
            );
        }
        if let Some(c) = creation_of(&self.creation_pg) {
            let _ = writeln!(
                t,
                "\ntask creation with the PostgreSQL store ({} tasks): time to handle p50 {:.3} p99 {:.3} max {:.3} ms; \
                 completed visible after sleep + p50 {:.3} p99 {:.3} ms; errors {}",
                c.handle_sorted.len(),
                quantile(&c.handle_sorted, 0.5) as f64 / 1000.0,
                quantile(&c.handle_sorted, 0.99) as f64 / 1000.0,
                c.handle_sorted.last().copied().unwrap_or(0) as f64 / 1000.0,
                quantile(&c.over_sorted, 0.5) as f64 / 1000.0,
                quantile(&c.over_sorted, 0.99) as f64 / 1000.0,
                c.errors
            );
        }
        if let Some(c) = self.creation_all() {
            let _ = writeln!(
                t,
                "\ntask creation ({} tasks, threshold {} ms, upstream sleep {} ms): time to handle p50 {:.3} p90 {:.3} p99 {:.3} max {:.3} ms; \
                 completed visible after sleep + p50 {:.3} p99 {:.3} max {:.3} ms; errors {}",
                c.handle_sorted.len(),
                plan::CREATION_THRESHOLD.as_millis(),
                plan::CREATION_SLEEP.as_millis(),
                quantile(&c.handle_sorted, 0.5) as f64 / 1000.0,
                quantile(&c.handle_sorted, 0.9) as f64 / 1000.0,
                quantile(&c.handle_sorted, 0.99) as f64 / 1000.0,
                c.handle_sorted.last().copied().unwrap_or(0) as f64 / 1000.0,
                quantile(&c.over_sorted, 0.5) as f64 / 1000.0,
                quantile(&c.over_sorted, 0.99) as f64 / 1000.0,
                c.over_sorted.last().copied().unwrap_or(0) as f64 / 1000.0,
                c.errors
            );
        }
        for (via, m) in [("HTTP/1.1", &self.memory), ("HTTP/2", &self.memory_h2)] {
            let Some(m) = m else { continue };
            let _ = writeln!(
                t,
                "\nmemory, {via} upstream: {} running tasks: RSS idle {} KiB → {} KiB ({:.2} KiB/task), PSS {} → {} KiB ({:.2} KiB/task); \
                 fds {} → {}; handles in {:.2} s; drained in {:.2} s; {} completed, {} errors",
                m.tasks,
                m.idle.rss_kib,
                m.loaded.rss_kib,
                m.per_task_kib(),
                m.idle.pss_kib,
                m.loaded.pss_kib,
                m.per_task_pss_kib(),
                m.idle_fds,
                m.loaded_fds,
                m.to_handles.as_secs_f64(),
                m.drain.as_secs_f64(),
                m.completed,
                m.errors
            );
        }
        if let Some(sc) = &self.scale {
            let _ = writeln!(
                t,
                "\nscale, HTTP/2 upstream: idle RSS {} KiB, store {:.1} MiB\n{:>10} {:>8} {:>10} {:>9} {:>9} {:>9} {:>10} {:>11} {:>6} {:>9} {:>9} {:>9} {:>7}",
                sc.idle.rss_kib,
                sc.idle_store.allocated as f64 / 1048576.0,
                "running",
                "ramp s",
                "RSS MiB",
                "KiB/task",
                "CPU s",
                "step s",
                "holding %",
                "store MiB",
                "fds",
                "get p50",
                "get p99",
                "get max",
                "errors"
            );
            for l in &sc.levels {
                let q = |x: f64| quantile(&l.get_lat, x) as f64 / 1000.0;
                let _ = writeln!(
                    t,
                    "{:>10} {:>8.2} {:>10.1} {:>9.2} {:>9.2} {:>9.2} {:>9.0}% {:>11.1} {:>6} {:>9.3} {:>9.3} {:>9.3} {:>7}",
                    l.running,
                    l.ramp.as_secs_f64(),
                    l.mem.rss_kib as f64 / 1024.0,
                    l.per_task_kib(&sc.idle),
                    l.cpu_total,
                    l.cpu_step,
                    l.cpu_holding * 100.0,
                    l.store.allocated as f64 / 1048576.0,
                    l.fds,
                    q(0.5),
                    q(0.99),
                    q(1.0),
                    l.errors + l.get_errors as usize
                );
            }
            let _ = writeln!(
                t,
                "released: {} of {} completed in {:.2} s ({:.2} s CPU), {} errors; RSS after {} KiB, store {:.1} MiB",
                sc.completed,
                sc.tasks(),
                sc.drain.as_secs_f64(),
                sc.cpu_drain,
                sc.errors(),
                sc.after.map(|m| m.rss_kib).unwrap_or(0),
                sc.after_store.allocated as f64 / 1048576.0
            );
        }
        if let Some(c) = &self.churn {
            let last: Vec<&str> = c.output.lines().rev().take(3).collect();
            let _ = writeln!(
                t,
                "\nstore churn ({:.1} s): {}",
                c.seconds,
                last.into_iter().rev().collect::<Vec<_>>().join(" | ")
            );
        }
        let _ = writeln!(
            t,
            "\n{:<84} {:>16} {:>26} {:>22} {:>6}",
            "ratio", "value", "spread", "target", ""
        );
        for v in verdicts {
            let _ = writeln!(
                t,
                "{:<84} {:>16} {:>26} {:>22} {:>6}",
                v.what,
                v.value,
                v.spread,
                v.target,
                pass_text(v.pass)
            );
        }
        t
    }
}
