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
        let mut s = svg_start(
            w,
            h,
            &format!(
                "Requests per second, closed loop, {} connections (median of {}; bars min–max)",
                args.concurrency, args.reps
            ),
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
        let mut s = svg_start(w, h, &xml(&title));
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

/// `n` in few characters: 100, 1k, 10k, 2.5k, 1M.
fn compact(n: usize) -> String {
    let (v, unit) = match n {
        0..=999 => return n.to_string(),
        1000..=999_999 => (n as f64 / 1e3, "k"),
        _ => (n as f64 / 1e6, "M"),
    };
    let s = format!("{v:.1}");
    format!("{}{unit}", s.strip_suffix(".0").unwrap_or(&s))
}

/// An upper bound for an axis from 0 that shows `max` with at most five round
/// ticks: the bound and the tick step.
fn axis_top(max: f64) -> (f64, f64) {
    let max = max.max(1e-6);
    let mag = 10f64.powf((max / 5.0).log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .map(|step| ((max / step).ceil() * step, step))
        .find(|(top, step)| top / step <= 5.0 + 1e-9)
        .unwrap_or((10.0 * mag * 5.0, 10.0 * mag))
}

/// A tick's label: as many decimals as the step has.
fn tick(v: f64, step: f64) -> String {
    let d = if (step - step.round()).abs() < 1e-9 {
        0
    } else if (step * 10.0 - (step * 10.0).round()).abs() < 1e-9 {
        1
    } else {
        2
    };
    format!("{v:.d$}")
}

/// A value as a point label: 3 significant-ish digits.
fn short(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

impl Report {
    /// `scale.svg`: tasklift's RSS, its CPU to start the tasks and its store's size
    /// against the number of running tasks (log scale), a panel each; `None`
    /// without the scale scenario.
    pub(super) fn scale_svg(&self) -> Option<String> {
        let sc = self.scale.as_ref()?;
        if sc.levels.is_empty() {
            return None;
        }
        let mib = 1048576.0;
        let top_level = sc.levels.last().map(|l| l.running).unwrap_or(0);
        // The RSS target applies from 100,000 running tasks: drawn where it does.
        let rss_target =
            (top_level >= plan::SCALE_AT).then(|| plan::SCALE_RSS_MAX_KIB as f64 / 1024.0);
        let panels: [(&str, &str, Vec<f64>, Option<f64>); 3] = [
            (
                "tasklift RSS, MiB",
                "#e67e22",
                sc.levels
                    .iter()
                    .map(|l| l.mem.rss_kib as f64 / 1024.0)
                    .collect(),
                rss_target,
            ),
            (
                "CPU to start them, s (cumulative)",
                "#2e86de",
                sc.levels.iter().map(|l| l.cpu_ramps).collect(),
                None,
            ),
            (
                "store on disk, MiB (allocated)",
                "#27ae60",
                sc.levels
                    .iter()
                    .map(|l| l.store.allocated as f64 / mib)
                    .collect(),
                None,
            ),
        ];
        let xs: Vec<f64> = sc
            .levels
            .iter()
            .map(|l| (l.running.max(1) as f64).log10())
            .collect();
        let (lo, hi) = (
            xs.iter().copied().fold(f64::MAX, f64::min) - 0.3,
            xs.iter().copied().fold(f64::MIN, f64::max) + 0.3,
        );
        let (w, h, topm, bottom) = (840.0, 340.0, 70.0, 55.0);
        let panel_w = w / 3.0;
        let (pl, pr) = (58.0, 18.0);
        let plot_w = panel_w - pl - pr;
        let plot_h = h - topm - bottom;
        let mut s = svg_start(w, h, "Cost of running tasks on one tasklift (HTTP/2 upstream), against running tasks (log scale)");
        for (p, (title, color, values, target)) in panels.iter().enumerate() {
            let x0 = panel_w * p as f64;
            let left = x0 + pl;
            let max = values
                .iter()
                .copied()
                .chain(*target)
                .fold(0.0_f64, f64::max)
                * 1.12;
            let (ymax, step) = axis_top(max);
            let x = |v: f64| left + plot_w * (v - lo) / (hi - lo);
            let y = |v: f64| topm + plot_h * (1.0 - v / ymax);
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="13">{}</text>"#,
                left + plot_w / 2.0,
                topm - 18.0,
                xml(title)
            );
            let mut i = 0;
            while step * i as f64 <= ymax + step * 0.01 {
                let v = step * i as f64;
                let yy = y(v);
                let _ = writeln!(
                    s,
                    r##"<line x1="{left:.1}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                    left + plot_w,
                    left - 6.0,
                    yy + 4.0,
                    tick(v, step)
                );
                i += 1;
            }
            for (l, xv) in sc.levels.iter().zip(&xs) {
                let xx = x(*xv);
                let _ = writeln!(
                    s,
                    r##"<line x1="{xx:.1}" x2="{xx:.1}" y1="{topm}" y2="{:.1}" stroke="#eee"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                    topm + plot_h,
                    topm + plot_h + 18.0,
                    compact(l.running)
                );
            }
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#555">running tasks</text>"##,
                left + plot_w / 2.0,
                h - 14.0
            );
            if let Some(t) = target {
                let yy = y(*t);
                let _ = writeln!(
                    s,
                    r##"<line x1="{left:.1}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}" stroke="#c0392b" stroke-dasharray="5,4"/><text x="{:.1}" y="{:.1}" fill="#c0392b">target at {}: {} MiB</text>"##,
                    left + plot_w,
                    left + 4.0,
                    yy - 5.0,
                    compact(plan::SCALE_AT),
                    short(*t)
                );
            }
            let pts: Vec<String> = xs
                .iter()
                .zip(values)
                .map(|(xv, v)| format!("{:.1},{:.1}", x(*xv), y(*v)))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
                pts.join(" ")
            );
            for (xv, v) in xs.iter().zip(values) {
                let (xx, yy) = (x(*xv), y(*v));
                let _ = writeln!(
                    s,
                    r#"<circle cx="{xx:.1}" cy="{yy:.1}" r="3.5" fill="{color}"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                    yy - 8.0,
                    short(*v)
                );
            }
            let _ = writeln!(
                s,
                r#"<line x1="{left:.1}" x2="{left:.1}" y1="{topm}" y2="{:.1}" stroke="black"/><line x1="{left:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="black"/>"#,
                topm + plot_h,
                left + plot_w,
                topm + plot_h,
                topm + plot_h
            );
        }
        let _ = writeln!(s, "</svg>");
        Some(s)
    }
}

/// An SVG document's opening: its size, a white background and a centred title.
fn svg_start(w: f64, h: f64, title: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{title}</text>"#,
        w / 2.0
    );
    s
}

#[cfg(test)]
mod tests {
    use super::{axis_top, compact, tick};

    #[test]
    fn task_counts_are_short() {
        assert_eq!(compact(100), "100");
        assert_eq!(compact(1000), "1k");
        assert_eq!(compact(2500), "2.5k");
        assert_eq!(compact(100_000), "100k");
        assert_eq!(compact(1_000_000), "1M");
    }

    #[test]
    fn axes_end_on_a_round_tick_above_the_data() {
        assert_eq!(axis_top(1150.0), (1250.0, 250.0));
        assert_eq!(axis_top(2300.0), (2500.0, 500.0));
        assert_eq!(axis_top(100.0), (100.0, 20.0));
        let (top, step) = axis_top(0.7);
        assert!(
            (top - 0.8).abs() < 1e-9 && (step - 0.2).abs() < 1e-9,
            "{top} {step}"
        );
        assert_eq!(tick(2.5, 2.5), "2.5");
        assert_eq!(tick(500.0, 250.0), "500");
        assert_eq!(tick(0.4, 0.2), "0.4");
    }
}
