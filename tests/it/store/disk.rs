//! Disk use under task churn (issue 2): tasks with results are created and expire
//! over and over, and the data directory must not grow with what was written, only
//! with what is live. The store API is used directly; figures are printed
//! (`cargo test disk -- --nocapture`). `examples/store_churn.rs` runs the same churn
//! for longer.
//!
//! The bound every round must respect: `disk <= 2 × peak live + SLED_ALLOWANCE`.
//! Live data is the JSON of the results not yet deleted. Result files cost what
//! they hold, and deleting one frees it; the 2× leaves room for a second batch (a
//! proxy writes the next results before the sweeper runs). sled costs a fixed
//! amount, its log of 512 KiB segments, which it recycles: 2.5 MiB (five
//! segments), 3.0 MiB at most, in every run here and of `store_churn` up to 1,000
//! rounds. SLED_ALLOWANCE gives that well over 2× room. And the overhead (disk −
//! live) of the last rounds must not exceed that of the early ones by more than
//! GROWTH_SLACK (sled filling its segments).
//!
//! Before the store kept its records under 6 KiB, 8–60 KB results stayed inside
//! sled and leaked sled blob files (`db/blobs/`): 8 MiB on disk after 2 rounds of
//! 50 tasks, 19 MiB after 100, 114 MiB after 1,000, for 1.3 MiB live (see
//! `src/store/sled_store.rs`). In the 40 short rounds here that leak stays under
//! the bound (6.5 MiB for 0.64 MiB live), so those tests also check directly that
//! no blob file is written.

use std::path::Path;
use std::time::Instant;

use serde_json::json;
use tasklift::store::{NewTask, Settle, SledStore, TaskOutcome, TaskRecord, TaskStore};

const KIB: usize = 1024;
const MIB: u64 = 1024 * 1024;
/// sled's fixed share of the data directory, whatever the churn (see above).
const SLED_ALLOWANCE: u64 = 8 * MIB;
/// How much the overhead (disk − live) may differ between the early and the late
/// rounds: sled filling up its segments, not a leak.
const GROWTH_SLACK: u64 = 3 * MIB;
const ROUNDS: usize = 40;

fn mib(b: u64) -> f64 {
    b as f64 / MIB as f64
}

/// One measurement, after a round's sweep and flush.
struct Round {
    live: u64,
    disk: u64,
}

struct Churn {
    dir: tempfile::TempDir,
    store: SledStore,
    rounds: Vec<Round>,
    peak_live: u64,
    written: u64,
}

/// `rounds` rounds: create one task per entry of `sizes` (a result whose text has
/// that many bytes), `working` first and then `completed`, like the engine; then
/// sweep everything of the earlier rounds through `expired()` + `delete()` and
/// flush. Each task expires at its round number, long in the past, so one batch is
/// live at each measurement: the steady state of a busy proxy.
async fn churn(name: &str, rounds: usize, sizes: &[usize], large_result_bytes: usize) -> Churn {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path(), large_result_bytes).unwrap();
    let noise = noise(sizes.iter().copied().max().unwrap_or(0));
    let empty_len = serde_json::to_vec(&result("")).unwrap().len();
    let started = Instant::now();
    let mut out = Vec::new();
    let (mut peak_live, mut written) = (0, 0);
    println!("{name}: {rounds} rounds x {} tasks", sizes.len());
    println!(
        "{:>6} {:>10} {:>10} {:>10}",
        "round", "live MiB", "disk MiB", "over MiB"
    );
    for round in 0..rounds as u64 {
        let mut live_bytes = 0;
        for &n in sizes {
            let mut rec = record(round + 1);
            store.create(&rec).await.unwrap();
            rec.settle(Settle::Completed(serde_json::Value::Null))
                .unwrap();
            rec.outcome = Some(result(&noise[..n]));
            store.put(&rec).await.unwrap();
            // The outcome's JSON (the text needs no escaping).
            let len = (empty_len + n) as u64;
            written += len;
            live_bytes += len;
        }
        // Everything of the earlier rounds expired: only this batch stays live.
        sweep(&store, round).await;
        store.flush().await.unwrap();
        let stats = store.stats().await.unwrap();
        assert_eq!(stats.tasks, sizes.len() as u64, "one batch is live");
        peak_live = peak_live.max(live_bytes);
        println!(
            "{round:>6} {:>10.2} {:>10.2} {:>10.2}",
            mib(live_bytes),
            mib(stats.disk_bytes),
            mib(stats.disk_bytes.saturating_sub(live_bytes))
        );
        out.push(Round {
            live: live_bytes,
            disk: stats.disk_bytes,
        });
    }
    println!("{name}: {:.1} s", started.elapsed().as_secs_f64());
    Churn {
        dir,
        store,
        rounds: out,
        peak_live,
        written,
    }
}

/// Delete every task that expired at or before `now_ms`, as the sweeper does.
async fn sweep(store: &SledStore, now_ms: u64) {
    loop {
        let ids = store.expired(now_ms, 64).await.unwrap();
        if ids.is_empty() {
            return;
        }
        for id in ids {
            store.delete(&id).await.unwrap();
        }
    }
}

/// The bounds every churn must respect; returns the final overhead (disk − live).
fn assert_bounded(name: &str, c: &Churn) -> u64 {
    let bound = 2 * c.peak_live + SLED_ALLOWANCE;
    for (i, r) in c.rounds.iter().enumerate() {
        assert!(
            r.disk <= bound,
            "{name}: round {i} uses {:.2} MiB on disk for {:.2} MiB live; bound {:.2} MiB",
            mib(r.disk),
            mib(r.live),
            mib(bound)
        );
    }
    // No growth round over round: the overhead of the last rounds is that of the
    // early ones (after the first few, when sled opens its segments).
    let overhead = |rs: &[Round]| {
        rs.iter()
            .map(|r| r.disk.saturating_sub(r.live))
            .max()
            .unwrap()
    };
    let n = c.rounds.len();
    let early = overhead(&c.rounds[3..8]);
    let late = overhead(&c.rounds[n - 5..]);
    assert!(
        late <= early + GROWTH_SLACK,
        "{name}: overhead grew from {:.2} MiB (rounds 3-7) to {:.2} MiB (last 5 rounds)",
        mib(early),
        mib(late)
    );
    println!(
        "{name}: wrote {:.1} MiB, peak live {:.2} MiB, bound {:.2} MiB, \
         overhead {:.2} -> {:.2} MiB, final disk / peak live {:.2}",
        mib(c.written),
        mib(c.peak_live),
        mib(bound),
        mib(early),
        mib(late),
        c.rounds[n - 1].disk as f64 / c.peak_live as f64
    );
    late
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_results_churn_frees_their_space() {
    // Mostly above the 64 KiB file threshold; 2.9 MiB a round, 114 MiB in all.
    let sizes = [2 << 20, 512 * KIB, 256 * KIB, 96 * KIB, KIB, 12 * KIB];
    let c = churn("large results", ROUNDS, &sizes, 64 * KIB).await;
    assert_bounded("large results", &c);
    // A result reads back from its file.
    let ids = c.store.expired(u64::MAX, 1).await.unwrap();
    let rec = c.store.get(&ids[0]).await.unwrap().unwrap();
    assert!(matches!(rec.outcome, Some(TaskOutcome::Result(_))));
    // Sweeping the last batch leaves sled's share and no result file.
    sweep(&c.store, u64::MAX).await;
    c.store.flush().await.unwrap();
    let disk = c.store.stats().await.unwrap().disk_bytes;
    println!(
        "large results: {:.2} MiB on disk once all expired",
        mib(disk)
    );
    assert_eq!(files_in(&c.dir.path().join("results")), 0);
    assert_eq!(files_in(&c.dir.path().join("db/blobs")), 0, "no sled blob");
    assert!(disk <= SLED_ALLOWANCE, "{:.2} MiB left", mib(disk));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mid_size_results_churn_stays_bounded() {
    // 8–60 KB: under the 64 KiB file threshold. Kept in sled, these leaked sled
    // blob files; the store now keeps records under 6 KiB and writes these to files.
    let sizes: Vec<usize> = (0..20).map(|i| (8 + (i * 52) / 19) * 1000).collect();
    let c = churn("8-60 KB results", ROUNDS, &sizes, 64 * KIB).await;
    assert_bounded("8-60 KB results", &c);
    assert_eq!(
        files_in(&c.dir.path().join("results")),
        sizes.len(),
        "results over 6 KiB live in files"
    );
    assert_eq!(files_in(&c.dir.path().join("db/blobs")), 0, "no sled blob");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_results_churn_inside_sled_stays_bounded() {
    // The worst case that stays in sled: every record just under the 6 KiB limit,
    // so sled's leaves (up to 17 records) are as large as they get.
    let sizes = [5200; 34];
    let c = churn("5 KB results in sled", ROUNDS, &sizes, 64 * KIB).await;
    let late = assert_bounded("5 KB results in sled", &c);
    assert_eq!(files_in(&c.dir.path().join("results")), 0, "all inline");
    assert_eq!(files_in(&c.dir.path().join("db/blobs")), 0, "no sled blob");
    assert!(late <= SLED_ALLOWANCE);
}

#[tokio::test]
async fn a_result_file_goes_when_the_outcome_shrinks_into_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path(), 64 * KIB).unwrap();
    let mut rec = record(u64::MAX);
    store.create(&rec).await.unwrap();
    rec.settle(Settle::Completed(serde_json::Value::Null))
        .unwrap();
    rec.outcome = Some(TaskOutcome::Result(json!({"text": noise(200 * KIB)})));
    store.put(&rec).await.unwrap();
    assert_eq!(files_in(&dir.path().join("results")), 1);
    rec.outcome = Some(TaskOutcome::Result(json!({"text": "short"})));
    store.put(&rec).await.unwrap();
    assert_eq!(
        files_in(&dir.path().join("results")),
        0,
        "stale file removed"
    );
    let got = store.get(&rec.id).await.unwrap().unwrap();
    assert_eq!(got.outcome, rec.outcome);
}

#[tokio::test]
async fn files_a_crash_left_behind_are_removed_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    let mut rec = record(u64::MAX);
    {
        let store = SledStore::open(dir.path(), 64 * KIB).unwrap();
        store.create(&rec).await.unwrap();
        rec.settle(Settle::Completed(serde_json::Value::Null))
            .unwrap();
        rec.outcome = Some(TaskOutcome::Result(json!({"text": noise(100 * KIB)})));
        store.put(&rec).await.unwrap();
        store.flush().await.unwrap();
    }
    // A result written just before a crash, its record never durable; and a
    // result file interrupted mid-write.
    let orphan = uuid::Uuid::new_v4();
    std::fs::write(results.join(format!("{orphan}.json")), "{}").unwrap();
    std::fs::write(results.join(format!("{orphan}.tmp")), "{").unwrap();
    assert_eq!(files_in(&results), 3);
    let store = SledStore::open(dir.path(), 64 * KIB).unwrap();
    assert_eq!(files_in(&results), 1, "only the live task's result stays");
    let got = store.get(&rec.id).await.unwrap().unwrap();
    assert_eq!(got.outcome, rec.outcome);
}

fn result(text: &str) -> TaskOutcome {
    TaskOutcome::Result(json!({
        "content": [{"type": "text", "text": text}],
        "isError": false,
    }))
}

fn record(expires_at_ms: u64) -> TaskRecord {
    {
        let mut rec = TaskRecord::new(NewTask {
            id: uuid::Uuid::new_v4().to_string(),
            owner: "0123456789abcdef0123456789abcdef".into(),
            upstream: "default".into(),
            tool: "big_report".into(),
            created_at_ms: 1,
            ttl_ms: 1,
            poll_interval_ms: 1000,
        });
        rec.expires_at_ms = expires_at_ms;
        rec
    }
}

/// `n` bytes of varied ASCII that needs no JSON escaping.
fn noise(n: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/";
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ALPHABET[(x >> 58) as usize] as char
        })
        .collect()
}

fn files_in(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|rd| rd.flatten().filter(|e| e.path().is_file()).count())
        .unwrap_or(0)
}
