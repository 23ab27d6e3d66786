//! The hand-written SVG charts: `throughput.svg` and `latency.svg`.

use std::fmt::Write as _;

use crate::loadgen::quantile;
use crate::plan;
use crate::RunArgs;

use super::figures::{summarize, Summary};
use super::Report;

impl Report {
    pub(super) fn throughput_svg(&self, args: &RunArgs) -> String {
        // Each label keeps its colour whichever others a run skipped.
        let all = ["direct", "nginx", "tasklift", plan::STDIO, "tasks/get"];
        let colors = ["#7f8c8d", "#2e86de", "#e67e22", "#c0392b", "#27ae60"];
        let (labels, colors): (Vec<&str>, Vec<&str>) = all
            .into_iter()
            .zip(colors)
            .filter(|(l, _)| self.samples.contains_key(*l))
            .unzip();
        let sums: Vec<Summary> = labels
            .iter()
            .map(|l| summarize(&self.samples[*l]))
            .collect();
        let top = sums.iter().map(|m| m.rps.max).fold(1.0_f64, f64::max) * 1.15;
        let (w, h, left, bottom, topm) = (640.0, 360.0, 70.0, 50.0, 50.0);
        let plot_h = h - bottom - topm;
        let bw = (w - left - 20.0) / labels.len().max(1) as f64;
        let y = |v: f64| topm + plot_h * (1.0 - v / top);
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="22" text-anchor="middle" font-size="15">Requests per second, closed loop, {} connections (median of {}; bars min–max)</text>"#,
            w / 2.0,
            args.concurrency,
            args.reps
        );
        for i in 0..=4 {
            let v = top / 4.0 * i as f64;
            let yy = y(v);
            let _ = writeln!(
                s,
                r##"<line x1="{left}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{:.0}</text>"##,
                w - 20.0,
                left - 6.0,
                yy + 4.0,
                v
            );
        }
        for (i, (l, m)) in labels.iter().zip(&sums).enumerate() {
            let x = left + bw * i as f64 + bw * 0.15;
            let bwid = bw * 0.7;
            let yy = y(m.rps.med);
            let _ = writeln!(
                s,
                r#"<rect x="{x:.1}" y="{yy:.1}" width="{bwid:.1}" height="{:.1}" fill="{}"/>"#,
                topm + plot_h - yy,
                colors[i]
            );
            let cx = x + bwid / 2.0;
            let _ = writeln!(
                s,
                r##"<line x1="{cx:.1}" x2="{cx:.1}" y1="{:.1}" y2="{:.1}" stroke="#333"/>"##,
                y(m.rps.min),
                y(m.rps.max)
            );
            let _ = writeln!(
                s,
                r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle">{:.0}/s</text>"#,
                y(m.rps.max) - 18.0,
                m.rps.med
            );
            let _ = writeln!(
                s,
                r##"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" fill="#555">p99 {:.2} ms</text>"##,
                y(m.rps.max) - 5.0,
                m.p99.med / 1000.0
            );
            // A long label on two lines: "tasklift (stdio upstream)".
            let (first, second) = match l.split_once(" (") {
                Some((a, b)) => (a.to_string(), format!("({b}")),
                None => (l.to_string(), String::new()),
            };
            let _ = writeln!(
                s,
                r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-size="13">{}<tspan x="{cx:.1}" dy="15">{}</tspan></text>"#,
                h - bottom + 18.0,
                xml(&first),
                xml(&second)
            );
        }
        let _ = writeln!(
            s,
            r#"<line x1="{left}" x2="{left}" y1="{topm}" y2="{}" stroke="black"/>"#,
            topm + plot_h
        );
        let _ = writeln!(s, "</svg>");
        s
    }

    pub(super) fn latency_svg(&self, args: &RunArgs) -> String {
        // Percentile curves of the open-loop runs (all repetitions pooled), else of
        // the closed-loop runs.
        let open: Vec<String> = ["direct", "nginx", "tasklift"]
            .iter()
            .map(|l| format!("{l} @{:.0}/s", args.rate))
            .filter(|l| self.samples.contains_key(l))
            .collect();
        let (labels, title) = if open.is_empty() {
            (
                ["direct", "nginx", "tasklift", "tasks/get"]
                    .iter()
                    .map(|s| s.to_string())
                    .filter(|l| self.samples.contains_key(l))
                    .collect::<Vec<_>>(),
                format!(
                    "Latency by percentile, closed loop, {} connections",
                    args.concurrency
                ),
            )
        } else {
            (
                open,
                format!("Latency by percentile, open loop at {:.0} req/s", args.rate),
            )
        };
        let qs = [0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 0.9999, 1.0];
        let qnames = ["p50", "p75", "p90", "p95", "p99", "p99.9", "p99.99", "max"];
        let curves: Vec<(String, Vec<f64>)> = labels
            .iter()
            .map(|l| {
                let mut all: Vec<u32> = self.samples[l]
                    .iter()
                    .flat_map(|x| x.lat.iter().copied())
                    .collect();
                all.sort_unstable();
                (
                    l.clone(),
                    qs.iter()
                        .map(|q| quantile(&all, *q).max(1) as f64)
                        .collect(),
                )
            })
            .collect();
        let maxv = curves
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .fold(10.0_f64, f64::max);
        let minv = curves
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .fold(f64::MAX, f64::min)
            .min(maxv / 10.0);
        let (lo, hi) = (
            minv.log10().floor(),
            maxv.log10().ceil().max(minv.log10().floor() + 1.0),
        );
        let (w, h, left, bottom, topm, right) = (640.0, 360.0, 70.0, 50.0, 50.0, 130.0);
        let plot_w = w - left - right;
        let plot_h = h - bottom - topm;
        let x = |i: usize| left + plot_w * i as f64 / (qs.len() - 1) as f64;
        let y = |v: f64| topm + plot_h * (1.0 - (v.log10() - lo) / (hi - lo));
        let colors = ["#7f8c8d", "#2e86de", "#e67e22", "#27ae60"];
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
            w / 2.0,
            xml(&title)
        );
        let mut e = lo;
        while e <= hi {
            let v = 10f64.powf(e);
            let yy = y(v);
            let _ = writeln!(
                s,
                r##"<line x1="{left}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                left + plot_w,
                left - 6.0,
                yy + 4.0,
                if v >= 1000.0 {
                    format!("{} ms", v / 1000.0)
                } else {
                    format!("{v} µs")
                }
            );
            e += 1.0;
        }
        for (i, q) in qnames.iter().enumerate() {
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{q}</text>"#,
                x(i),
                h - bottom + 18.0
            );
        }
        for (k, (l, v)) in curves.iter().enumerate() {
            let c = colors[k % colors.len()];
            let pts: Vec<String> = v
                .iter()
                .enumerate()
                .map(|(i, v)| format!("{:.1},{:.1}", x(i), y(*v)))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"/>"#,
                pts.join(" ")
            );
            let ly = topm + 14.0 + 18.0 * k as f64;
            let _ = writeln!(
                s,
                r#"<line x1="{:.1}" x2="{:.1}" y1="{ly:.1}" y2="{ly:.1}" stroke="{c}" stroke-width="2"/><text x="{:.1}" y="{:.1}">{}</text>"#,
                left + plot_w + 10.0,
                left + plot_w + 30.0,
                left + plot_w + 35.0,
                ly + 4.0,
                xml(l)
            );
        }
        let _ = writeln!(s, "</svg>");
        s
    }
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
