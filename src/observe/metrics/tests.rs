//! The exposition `/metrics` serves: every family with the name, type, help text
//! and label sets it has always had.

use super::*;

#[test]
fn renders_counters_gauges_and_a_cumulative_histogram() {
    let m = Metrics::default();
    m.task_created();
    m.task_finished(Finished::Completed);
    m.request("tools/call", "task");
    m.request("made/up", "error");
    {
        let _a = m.call_started("reports");
        assert_eq!(m.in_flight("reports"), 1);
    }
    assert_eq!(m.in_flight("reports"), 0);
    let mut snap = Snapshot::default();
    snap.tasks_by_status.insert("working", 2);
    snap.upstreams.push(("reports".into(), true, None));
    let text = m.render(&snap);
    for line in [
        "tasklift_tasks_created_total 1",
        "tasklift_tasks_finished_total{status=\"completed\"} 1",
        "tasklift_tasks{status=\"working\"} 2",
        "tasklift_requests_total{method=\"tools/call\",outcome=\"task\"} 1",
        "tasklift_requests_total{method=\"other\",outcome=\"error\"} 1",
        "tasklift_upstream_calls_in_flight{upstream=\"reports\"} 0",
        "tasklift_upstream_call_duration_seconds_bucket{upstream=\"reports\",le=\"+Inf\"} 1",
        "tasklift_upstream_call_duration_seconds_count{upstream=\"reports\"} 1",
        "tasklift_upstream_ready{upstream=\"reports\"} 1",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}

/// Every family's HELP and TYPE lines, as the hand-written exposition had them
/// (and before any series of its own).
#[test]
fn every_family_keeps_its_name_type_and_help() {
    let m = Metrics::default();
    let snap = Snapshot {
        store_free_bytes: Some(5),
        store_low_space: Some(false),
        ..Snapshot::default()
    };
    let text = m.render(&snap);
    let families = [
        ("tasklift_tasks_created_total", "counter", "Tasks created (a call that outlived its threshold, or a 2025-11-25 task request)."),
        ("tasklift_tasks_finished_total", "counter", "Tasks that reached a terminal status."),
        ("tasklift_tasks_expired_total", "counter", "Tasks deleted at the end of their TTL."),
        ("tasklift_tool_handles_total", "counter", "Still-running answers naming tasklift_wait, given to clients without the tasks extension."),
        ("tasklift_detached_calls_total", "counter", "Synchronous calls that passed their threshold and run on as tasks their callers wait on (on_disconnect = detach)."),
        ("tasklift_trace_spans_total", "counter", "Spans sent to the OTLP collector (exported), dropped with the export queue full (dropped), or lost to an export that failed (failed)."),
        ("tasklift_replays_total", "counter", "Retried calls answered from the task of an identical earlier call instead of running the tool again."),
        ("tasklift_tasks", "gauge", "Tasks in the store by current status."),
        ("tasklift_requests_total", "counter", "Requests answered, by method and outcome."),
        ("tasklift_limit_hits_total", "counter", "Requests or tasks refused or held back by a limit, by its setting."),
        ("tasklift_upstream_calls_in_flight", "gauge", "Upstream calls running now."),
        ("tasklift_upstream_call_duration_seconds", "histogram", "How long upstream calls ran (tools/call and relayed requests)."),
        ("tasklift_upstream_ready", "gauge", "Whether the upstream can take calls (1) or not (0)."),
        ("tasklift_stdio_restarts_total", "counter", "Times a stdio upstream's child process was restarted."),
        ("tasklift_store_disk_bytes", "gauge", "Bytes the task store uses on disk."),
        ("tasklift_store_free_bytes", "gauge", "Bytes free on the filesystem of the data directory."),
        ("tasklift_store_low_space", "gauge", "1 while free space is below store.min_free_bytes or the database refuses writes (no new tasks are created)."),
        ("tasklift_legacy_sessions", "gauge", "Open legacy client sessions."),
        ("tasklift_webhook_deliveries_total", "counter", "Webhook attempts by destination and outcome (delivered, refused, error, timeout), and events given up at max_age or dropped past max_pending."),
        ("tasklift_webhook_outbox_events", "gauge", "Webhook events waiting in the outbox, by destination."),
        ("tasklift_webhook_outbox_oldest_age_seconds", "gauge", "Age of the oldest webhook event waiting in the outbox, by destination (0 when none wait)."),
    ];
    for (name, kind, help) in families {
        let lines = format!("# HELP {name} {help}\n# TYPE {name} {kind}\n");
        assert!(text.contains(&lines), "missing {lines:?} in\n{text}");
    }
    assert_eq!(text.matches("# TYPE ").count(), families.len(), "{text}");
    for line in [
        "tasklift_tasks_created_total 0",
        "tasklift_tasks_finished_total{status=\"cancelled\"} 0",
        "tasklift_trace_spans_total{outcome=\"dropped\"} 0",
        "tasklift_replays_total{outcome=\"stored\"} 0",
        "tasklift_tasks{status=\"input_required\"} 0",
        "tasklift_limit_hits_total{limit=\"min_free_bytes\"} 0",
        "tasklift_store_disk_bytes 0",
        "tasklift_store_free_bytes 5",
        "tasklift_store_low_space 0",
        "tasklift_legacy_sessions 0",
    ] {
        assert!(
            text.contains(&format!("{line}\n")),
            "missing {line:?} in\n{text}"
        );
    }
    assert!(
        !text.contains("# EOF"),
        "the 0.0.4 text format has no EOF line"
    );
    let unwatched = m.render(&Snapshot::default());
    assert!(
        !unwatched.contains("tasklift_store_free_bytes"),
        "{unwatched}"
    );
    assert!(
        !unwatched.contains("tasklift_store_low_space"),
        "{unwatched}"
    );
}

#[test]
fn counts_land_on_their_series() {
    let m = Metrics::default();
    m.task_finished(Finished::Failed);
    m.task_finished(Finished::Cancelled);
    m.task_finished(Finished::Cancelled);
    m.replayed(Replay::Stored);
    m.spans(Spans::Exported, 7);
    m.spans(Spans::Failed, 2);
    m.tasks_expired(3);
    m.tool_handle();
    m.detached();
    m.limit_hit("max_body_bytes");
    m.limit_hit("store_full");
    for _ in 0..3 {
        m.request("tasks/get", "ok");
    }
    m.request("tasks/get", "brand_new");
    assert_eq!(m.replays(), (0, 1));
    let mut snap = Snapshot::default();
    snap.upstreams.push(("child".into(), false, Some(4)));
    snap.upstreams.push(("web".into(), true, None));
    let text = m.render(&snap);
    for line in [
        "tasklift_tasks_finished_total{status=\"completed\"} 0",
        "tasklift_tasks_finished_total{status=\"failed\"} 1",
        "tasklift_tasks_finished_total{status=\"cancelled\"} 2",
        "tasklift_replays_total{outcome=\"joined\"} 0",
        "tasklift_replays_total{outcome=\"stored\"} 1",
        "tasklift_trace_spans_total{outcome=\"exported\"} 7",
        "tasklift_trace_spans_total{outcome=\"failed\"} 2",
        "tasklift_tasks_expired_total 3",
        "tasklift_tool_handles_total 1",
        "tasklift_detached_calls_total 1",
        "tasklift_limit_hits_total{limit=\"max_body_bytes\"} 1",
        "tasklift_requests_total{method=\"tasks/get\",outcome=\"ok\"} 3",
        "tasklift_requests_total{method=\"tasks/get\",outcome=\"brand_new\"} 1",
        "tasklift_upstream_ready{upstream=\"child\"} 0",
        "tasklift_stdio_restarts_total{upstream=\"child\"} 4",
        "tasklift_upstream_calls_in_flight{upstream=\"web\"} 0",
        "tasklift_upstream_call_duration_seconds_count{upstream=\"web\"} 0",
    ] {
        assert!(
            text.contains(&format!("{line}\n")),
            "missing {line:?} in\n{text}"
        );
    }
    assert!(!text.contains("store_full"), "not a setting: {text}");
    assert!(!text.contains("restarts_total{upstream=\"web\"}"), "{text}");
}

/// The buckets of the hand-written histogram, cumulative, with `le` as Go's
/// clients write it, and an upstream's name escaped.
#[test]
fn the_histogram_keeps_its_buckets_and_escapes_names() {
    let m = Metrics::default();
    drop(m.call_started("a \"quoted\"\\name"));
    let text = m.render(&Snapshot::default());
    let name = "upstream=\"a \\\"quoted\\\"\\\\name\"";
    let les: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("tasklift_upstream_call_duration_seconds_bucket{"))
        .map(|l| {
            assert!(l.contains(name), "{l}");
            assert!(l.ends_with(" 1"), "one fast call in every bucket: {l}");
            l.split("le=\"").nth(1).unwrap().split('"').next().unwrap()
        })
        .collect();
    assert_eq!(
        les,
        [
            "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30",
            "60", "300", "+Inf"
        ]
    );
    assert!(text.contains(&format!(
        "tasklift_upstream_call_duration_seconds_count{{{name}}} 1\n"
    )));
}

/// A configured upstream's series are there before its first call, and its
/// calls count on them as on any other upstream's.
#[test]
fn configured_upstreams_show_from_the_start_and_count_their_calls() {
    let m = Metrics::for_upstreams(["reports", "search"]);
    let text = m.render(&Snapshot::default());
    for line in [
        "tasklift_upstream_calls_in_flight{upstream=\"search\"} 0",
        "tasklift_upstream_call_duration_seconds_count{upstream=\"reports\"} 0",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    let a = m.call_started("reports");
    let b = m.call_started("elsewhere");
    assert_eq!((m.in_flight("reports"), m.in_flight("elsewhere")), (1, 1));
    drop((a, b));
    assert_eq!((m.in_flight("reports"), m.in_flight("search")), (0, 0));
    let text = m.render(&Snapshot::default());
    for line in [
        "tasklift_upstream_call_duration_seconds_count{upstream=\"reports\"} 1",
        "tasklift_upstream_call_duration_seconds_count{upstream=\"search\"} 0",
        "tasklift_upstream_call_duration_seconds_count{upstream=\"elsewhere\"} 1",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}
