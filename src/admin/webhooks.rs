//! The status page's webhooks section: each destination's backlog, the outcomes
//! of its attempts and its drops (`webhooks::Webhooks::destinations`).

use std::fmt::Write as _;
use std::time::Duration;

use super::page::{age_text, escape};
use crate::webhooks::DestinationStatus;

/// The section, when webhooks are configured.
pub(super) fn write(o: &mut String, list: &[DestinationStatus], now_ms: u64) {
    if list.is_empty() {
        return;
    }
    o.push_str("<h2>Webhooks</h2>\n<table id=\"webhooks\"><thead><tr><th>destination</th><th>url</th><th>waiting</th><th>oldest</th><th>delivered</th><th>refused</th><th>errors</th><th>timeouts</th><th>given up</th><th>dropped</th></tr></thead><tbody>\n");
    for d in list {
        let pending = d.pending.map_or("unknown".to_string(), |n| n.to_string());
        let oldest = d.oldest_ms.map_or("–".to_string(), |t| {
            age_text(Duration::from_millis(now_ms.saturating_sub(t)))
        });
        let _ = write!(
            o,
            "<tr class=\"webhook\"><td class=\"name\">{}</td><td>{}</td><td class=\"num\" id=\"webhook-pending-{}\">{pending}</td><td>{oldest}</td>",
            escape(&d.name),
            escape(&d.url),
            escape(&d.name),
        );
        for (_, n) in &d.outcomes {
            let _ = write!(o, "<td class=\"num\">{n}</td>");
        }
        let _ = writeln!(o, "<td class=\"num\">{}</td></tr>", d.dropped);
    }
    o.push_str("</tbody></table>\n");
}
