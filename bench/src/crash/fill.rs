//! `tasklift-bench crash --store sled --fill-and-free`: a full disk under load,
//! again and again, on the embedded store (issue 29). The real `tasklift serve`
//! (one process, never restarted) keeps its data directory on a tmpfs of its own,
//! in front of the fixture upstream; clients that declare the tasks extension make
//! a steady load of calls: some answered before the threshold, slow ones (0.3–2 s)
//! with small results (kept in sled) and with results of about 100 KB (kept as
//! result files). Each cycle:
//!
//! 1. three calls that run across the coming fill are made and get their handles
//!    (their tools end while the disk is full, so their outcomes meet it);
//! 2. the filesystem is filled to the last byte at once (one file written until
//!    ENOSPC, as `dd if=/dev/zero of=ballast` does);
//! 3. the load goes on for `--full-for`: every call must still be answered, and
//!    synchronously (no handle is given on a full disk), with the whole result;
//! 4. the file is deleted, and slow calls are made every 100 ms until one becomes
//!    a task again: the time from the delete to that handle is the cycle's figure,
//!    which must stay under `--tasks-again-max`;
//! 5. after `--room-for` more load, every open or recent handle is read back.
//!
//! Every handle given must end `completed` with its whole, correct result (the
//! call's unique label, checked byte for byte), none `failed` (for lack of space
//! or anything else), none `working` once the run has drained, none lost; every
//! synchronous answer must be correct, and no call may go unanswered; tasklift
//! must be the same process (same PID) at the end. The harness exits 1 otherwise.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::book::{self, Answered, Call, Conns, Expect, Got, Rng, Shared, State};
use super::cluster::{Fixture, Instance, Store};
use super::{beside_me, commit, CrashArgs, StoreKind};

/// The tasks' TTL: short, so that finished tasks and their result files go and
/// the load does not fill the volume by itself over a long run.
const TTL: Duration = Duration::from_secs(60);
/// Handles created this recently are read back again in every cycle's check
/// (older ones were read terminal, and their tasks expire at [`TTL`]).
const RECHECK_FOR: Duration = Duration::from_secs(40);
/// Results of the large calls: about 100 KB, above sled's 6 KiB record limit and
/// the 64 KiB `large_result_bytes`, so they are written as result files.
const LARGE: std::ops::Range<u64> = 80_000..120_000;
/// The longest a cycle waits for a slow call to become a task again.
const TASKS_AGAIN_GIVE_UP: Duration = Duration::from_secs(60);

/// The tmpfs the data directory is on; unmounted when dropped (after tasklift,
/// which is started later and so dropped first).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Ok(Self(dir.to_path_buf())),
            Ok(o) => bail!(
                "cannot mount a tmpfs on {} (mount -t tmpfs needs root): {} {}",
                dir.display(),
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => bail!(
                "cannot mount a tmpfs on {} (mount -t tmpfs needs root): running mount: {e}",
                dir.display()
            ),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let umount = |lazy: bool| {
            let mut c = std::process::Command::new("umount");
            if lazy {
                c.arg("-l");
            }
            c.arg(&self.0)
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        // tasklift has just been stopped: its files may take a moment to close.
        for _ in 0..20 {
            if umount(false) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if !umount(true) {
            eprintln!("could not unmount the tmpfs on {}", self.0.display());
        }
    }
}

/// Bytes available on `dir`'s filesystem.
// The field types differ between platforms (u32 on some).
#[allow(clippy::unnecessary_cast)]
fn free_bytes(dir: &Path) -> u64 {
    nix::sys::statvfs::statvfs(dir)
        .map(|s| (s.blocks_available() as u64).saturating_mul(s.fragment_size() as u64))
        .unwrap_or(0)
}

/// Write `path` until the filesystem refuses (ENOSPC): the bytes written.
fn fill(path: &Path) -> std::io::Result<u64> {
    let mut f = std::fs::File::create(path)?;
    let chunk = vec![0u8; 4 << 20];
    let mut written = 0u64;
    loop {
        match f.write(&chunk) {
            Ok(0) => return Ok(written),
            Ok(n) => written += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.raw_os_error() == Some(28) => return Ok(written),
            Err(e) => return Err(e),
        }
    }
}

/// What the soak records beside the handle book.
struct Soak {
    started: Instant,
    /// While the disk is full: when the fill ended (unique to the cycle).
    full: Option<Instant>,
    /// Calls sent while the disk was full.
    sent_full: u64,
    /// Calls sent and answered while the disk was full.
    calls_full: u64,
    sync_full: u64,
    /// Handles given for calls sent and answered while the disk was full.
    handles_full: Vec<String>,
    /// Calls that got an error or no answer.
    call_errors: Vec<String>,
    /// Synchronous answers other than the upstream's.
    wrong_sync: Vec<String>,
    /// `tasks/get` that got an error or no answer (all, and while full).
    get_errors: u64,
    get_errors_full: u64,
    get_error_examples: Vec<String>,
    /// Tasks whose `tasks/get` failed at least once.
    get_error_tasks: std::collections::HashSet<String>,
    /// Tasks whose `tasks/get` fails now, since when.
    failing_since: std::collections::HashMap<String, Instant>,
    /// The longest a task's `tasks/get` kept failing.
    longest_failing: Duration,
}

type SoakRef = Arc<Mutex<Soak>>;

impl Soak {
    fn at(&self) -> String {
        format!("{:.1} s", self.started.elapsed().as_secs_f64())
    }
}

/// Make `c`, recording when it was made and answered against the full windows,
/// and checking a synchronous answer. `None` if it got an error or no answer.
async fn call(
    shared: &Shared,
    soak: &SoakRef,
    conns: &mut Conns,
    rng: &mut Rng,
    c: Call,
) -> Option<Answered> {
    let full_at_send = {
        let mut s = soak.lock().unwrap();
        s.sent_full += u64::from(s.full.is_some());
        s.full
    };
    let want = match &c.expect {
        Expect::Computed(t) => t.clone(),
        e => unreachable!("the soak makes only slow_compute calls, not {e:?}"),
    };
    let r = book::make_call(shared, conns, rng, Some(c), None).await;
    let mut s = soak.lock().unwrap();
    let full_throughout = full_at_send.is_some() && s.full == full_at_send;
    let a = match r {
        Ok(a) => a,
        Err(e) => {
            let at = s.at();
            s.call_errors.push(format!(
                "at {at}{}: {e:#}",
                if full_throughout { ", disk full" } else { "" }
            ));
            return None;
        }
    };
    if full_throughout {
        s.calls_full += 1;
    }
    match &a {
        Answered::Sync(r) => {
            if full_throughout {
                s.sync_full += 1;
            }
            let text = r["content"][0]["text"].as_str().unwrap_or_default();
            if text != want || r["isError"] == serde_json::json!(true) {
                let at = s.at();
                s.wrong_sync.push(format!(
                    "at {at}: answered {} ({} bytes of text), not the upstream's {} bytes",
                    crate::wire::snippet(r.to_string().as_bytes()),
                    text.len(),
                    want.len()
                ));
            }
        }
        Answered::Task(id) => {
            if full_throughout {
                s.handles_full.push(id.clone());
            }
        }
    }
    Some(a)
}

/// A slow call: 0.3–2 s, its result small (in sled) or about 100 KB (a file).
fn slow(rng: &mut Rng, tag: &str, large: bool) -> Call {
    let secs = rng.range(3, 21) as f64 / 10.0;
    let len = if large {
        rng.range(LARGE.start, LARGE.end)
    } else {
        rng.range(16, 2_000)
    } as usize;
    book::compute_sized(rng, tag, secs, len)
}

/// A client: calls until `stop`, with short pauses: 15% answered before the
/// threshold, 45% slow with a small result, 40% slow with a 100 KB result.
async fn client(shared: Shared, soak: SoakRef, stop: Arc<AtomicBool>, seed: u64, tag: String) {
    let mut rng = Rng(seed | 1);
    let mut conns = Conns::default();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let t = format!("{tag}n{n}-");
        let c = match rng.range(0, 20) {
            0..3 => {
                let len = rng.range(16, 2_000) as usize;
                book::compute_sized(&mut rng, &t, 0.02, len)
            }
            3..12 => slow(&mut rng, &t, false),
            _ => slow(&mut rng, &t, true),
        };
        if call(&shared, &soak, &mut conns, &mut rng, c)
            .await
            .is_none()
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        tokio::time::sleep(Duration::from_millis(rng.range(10, 150))).await;
    }
}

/// A poller: `tasks/get` on the handles not yet seen terminal, as a client waiting
/// for its results does, until `stop`; counts the reads that fail.
async fn poller(shared: Shared, soak: SoakRef, stop: Arc<AtomicBool>) {
    let mut conns = Conns::default();
    while !stop.load(Ordering::Relaxed) {
        let (open, live) = book::open_handles(&shared);
        let Some((gen, ep)) = live.first().cloned() else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        for id in open {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let full = soak.lock().unwrap().full.is_some();
            let failed = match conns.get_task(gen, &ep, &id).await {
                Ok(Got::Terminal(seen)) => {
                    let mut st = shared.lock().unwrap();
                    if st.handles.get(&id).is_some_and(book::Handle::is_open) {
                        book::first_sight(&mut st, &id, seen, true);
                    }
                    None
                }
                Ok(Got::Open(_)) => None,
                Ok(Got::Error(e)) => Some(e),
                Err(e) => Some(format!("{e:#}")),
            };
            let mut s = soak.lock().unwrap();
            let Some(e) = failed else {
                s.failing_since.remove(&id);
                continue;
            };
            {
                let since = *s
                    .failing_since
                    .entry(id.clone())
                    .or_insert_with(Instant::now);
                s.longest_failing = s.longest_failing.max(since.elapsed());
                let first = s.get_error_tasks.insert(id.clone());
                s.get_errors += 1;
                if full {
                    s.get_errors_full += 1;
                }
                if first && s.get_error_examples.len() < 10 {
                    let at = s.at();
                    s.get_error_examples.push(format!(
                        "at {at}{}: {id}: {e}",
                        if full { ", disk full" } else { "" }
                    ));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// From the free at `freed`: make a slow call every 100 ms until one becomes a
/// task; how long after the free its handle came (`None`: not within
/// [`TASKS_AGAIN_GIVE_UP`]).
async fn tasks_again(
    shared: &Shared,
    soak: &SoakRef,
    rng: &mut Rng,
    cycle: usize,
    freed: Instant,
) -> Option<Duration> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let mut probes = tokio::task::JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut k = 0;
    let got = loop {
        tokio::select! {
            Some(at) = rx.recv() => break Some(at - freed),
            _ = tick.tick() => {
                if freed.elapsed() > TASKS_AGAIN_GIVE_UP {
                    break None;
                }
                k += 1;
                let c = book::compute_sized(rng, &format!("probe-c{cycle}-{k}-"), 0.5, 64);
                let (shared, soak, tx) = (shared.clone(), soak.clone(), tx.clone());
                let mut r = Rng(rng.next() | 1);
                probes.spawn(async move {
                    let mut conns = Conns::default();
                    if let Some(Answered::Task(_)) = call(&shared, &soak, &mut conns, &mut r, c).await {
                        let _ = tx.send(Instant::now());
                    }
                });
            }
        }
    };
    // The probes still running are answered like any call (and checked).
    while probes.join_next().await.is_some() {}
    got
}

/// Open file descriptors of `pid`: all of them, and those of files under `data`.
fn open_files(pid: u32, data: &Path) -> (usize, usize) {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return (0, 0);
    };
    let targets: Vec<PathBuf> = dir
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .collect();
    let under = targets.iter().filter(|t| t.starts_with(data)).count();
    (targets.len(), under)
}

/// What the data directory holds.
struct Usage {
    /// Bytes under `db/` (sled).
    db: u64,
    result_files: usize,
    /// Bytes under `results/`.
    results: u64,
    /// Bytes available on the filesystem.
    free: u64,
}

impl Usage {
    fn of(data: &Path) -> Self {
        fn walk(p: &Path, files: &mut usize) -> u64 {
            let Ok(dir) = std::fs::read_dir(p) else {
                return 0;
            };
            let mut bytes = 0;
            for e in dir.flatten() {
                match e.metadata() {
                    Ok(m) if m.is_dir() => bytes += walk(&e.path(), files),
                    Ok(m) => {
                        *files += 1;
                        bytes += m.len();
                    }
                    Err(_) => {}
                }
            }
            bytes
        }
        let mut n = 0;
        let db = walk(&data.join("db"), &mut n);
        let mut result_files = 0;
        let results = walk(&data.join("results"), &mut result_files);
        Self {
            db,
            result_files,
            results,
            free: free_bytes(data),
        }
    }
}

/// Lines of `log` that contain `what`.
fn count_in(log: &str, what: &str) -> usize {
    log.lines().filter(|l| l.contains(what)).count()
}

/// Seconds of the day of a log line's timestamp (`2026-12-04T21:55:23.807610Z …`).
fn log_time(line: &str) -> Option<f64> {
    let t = line.get(11..26)?;
    let mut parts = t.split(':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    Some(h * 3600.0 + m * 60.0 + s)
}

/// How long each reopen of the store took, from tasklift's log: from "reopening
/// it again" to "reopened" (reads wait meanwhile).
fn reopen_times(log: &str) -> Vec<f64> {
    let mut out = Vec::new();
    let mut from = None;
    for l in log.lines() {
        if l.contains("closing it to open it again") {
            from = log_time(l);
        } else if l.contains("reopened the task store after a write error") {
            if let (Some(a), Some(b)) = (from.take(), log_time(l)) {
                out.push(if b >= a { b - a } else { b + 86_400.0 - a });
            }
        }
    }
    out
}

/// The `q` quantile (nearest rank) of sorted `v`.
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

/// Run the soak; `Ok(true)` when nothing was lost, stuck, failed or late.
pub async fn run(args: CrashArgs) -> anyhow::Result<bool> {
    if args.store != StoreKind::Sled {
        bail!("--fill-and-free is for the embedded store: --store sled");
    }
    if args.cycles == 0 {
        bail!("--cycles: at least 1");
    }
    let seed = super::seed(&args);
    let tasklift = beside_me(&args.tasklift, "tasklift")?;
    let fixture_bin = beside_me(&args.fixture, "tasklift-fixture")?;
    let dir = crate::procs::TempDir::new("fill")?;
    println!(
        "fill-and-free soak: store sled on a {} tmpfs, min_free_bytes {}, {} cycles, seed {seed}, {} clients, disk full for {:?} each cycle, {:?} of load with room between, tasks again within {:?}, commit {}",
        args.tmpfs_size,
        args.min_free_bytes,
        args.cycles,
        args.clients,
        args.full_for,
        args.room_for,
        args.tasks_again_max,
        commit(),
    );
    println!("tasklift: {}", tasklift.display());
    let fs = Tmpfs::mount(&dir.path().join("data"), &args.tmpfs_size)?;
    let result = soak(&args, seed, &tasklift, &fixture_bin, dir.path(), fs).await;
    super::kept_if_failed(result, dir, args.keep, "logs")
}

async fn soak(
    args: &CrashArgs,
    seed: u64,
    tasklift: &Path,
    fixture_bin: &Path,
    dir: &Path,
    // Dropped after what follows: once tasklift has stopped.
    fs: Tmpfs,
) -> anyhow::Result<bool> {
    let started = Instant::now();
    let mut rng = Rng(seed);
    let data = fs.0.clone();
    let size = free_bytes(&data);
    let fixture = Fixture::start(fixture_bin, dir).await?;
    let store = Store::SledOn {
        data_dir: data.clone(),
        min_free_bytes: args.min_free_bytes,
        ttl: TTL,
    };
    let mut proc_ = Instance::start(tasklift, dir, 0, 1, &store, &fixture.url).await?;
    let pid = proc_.pid()?;
    let mem_start = crate::procs::mem(pid)?;
    let mut rss_max = mem_start.rss_kib;
    // The reserve is written at start while there is room.
    let reserve = data.join("space.reserve");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !reserve.is_file() {
        if Instant::now() > deadline {
            bail!(
                "tasklift wrote no space reserve ({}) within 10 s",
                reserve.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let shared: Shared = Arc::new(Mutex::new(State::default()));
    shared.lock().unwrap().live = vec![(proc_.gen, proc_.ep.clone())];
    let soak: SoakRef = Arc::new(Mutex::new(Soak {
        started,
        full: None,
        sent_full: 0,
        calls_full: 0,
        sync_full: 0,
        handles_full: Vec::new(),
        call_errors: Vec::new(),
        wrong_sync: Vec::new(),
        get_errors: 0,
        get_errors_full: 0,
        get_error_examples: Vec::new(),
        get_error_tasks: Default::default(),
        failing_since: Default::default(),
        longest_failing: Duration::ZERO,
    }));
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    for i in 0..args.clients {
        load.push(tokio::spawn(client(
            shared.clone(),
            soak.clone(),
            stop.clone(),
            rng.next(),
            format!("c{i}"),
        )));
    }
    let poll = tokio::spawn(poller(shared.clone(), soak.clone(), stop.clone()));
    // A task open this long past its tool's end (the disk full meanwhile, and the
    // driver's retries backing off up to 5 s) counts as stuck: a hang guard.
    let grace = args.grace + args.full_for + Duration::from_secs(5);
    let recent = |h: &book::Handle| h.is_open() || h.created.elapsed() < RECHECK_FOR;
    tokio::time::sleep(args.room_for).await;

    let mut again: Vec<f64> = Vec::new();
    let mut late: Vec<String> = Vec::new();
    let mut filled_min = u64::MAX;
    let mut free_after_max = 0u64;
    for cycle in 1..=args.cycles {
        let before = shared.lock().unwrap().order.len();
        // Calls whose tools end while the disk is full: their outcomes meet it.
        let pre_end = args.full_for.saturating_sub(Duration::from_millis(300));
        let mut pre = Vec::new();
        for k in 0..3 {
            let secs = rng.range(5, (pre_end.as_millis() as u64 / 100).max(6)) as f64 / 10.0;
            let len = if k < 2 {
                rng.range(LARGE.start, LARGE.end)
            } else {
                200
            } as usize;
            let c = book::compute_sized(&mut rng, &format!("fill-c{cycle}-{k}-"), secs, len);
            let (shared, soak) = (shared.clone(), soak.clone());
            let mut r = Rng(rng.next() | 1);
            pre.push(tokio::spawn(async move {
                let mut conns = Conns::default();
                call(&shared, &soak, &mut conns, &mut r, c).await
            }));
        }
        for p in pre {
            p.await.context("a call before the fill panicked")?;
        }
        let open_at_fill = {
            let st = shared.lock().unwrap();
            st.handles.values().filter(|h| h.is_open()).count()
        };

        // The disk fills to the last byte at once.
        let ballast = data.join("ballast");
        let b = ballast.clone();
        let bytes = tokio::task::spawn_blocking(move || fill(&b))
            .await?
            .with_context(|| format!("filling {}", ballast.display()))?;
        let fill_end = Instant::now();
        let free_after = free_bytes(&data);
        filled_min = filled_min.min(bytes);
        free_after_max = free_after_max.max(free_after);
        soak.lock().unwrap().full = Some(fill_end);
        tokio::time::sleep(args.full_for).await;
        proc_.check_alive()?;

        // Freed: how long until a slow call becomes a task again.
        soak.lock().unwrap().full = None;
        std::fs::remove_file(&ballast)
            .with_context(|| format!("deleting {}", ballast.display()))?;
        let freed = Instant::now();
        let took = tasks_again(&shared, &soak, &mut rng, cycle, freed).await;
        let took_s = match took {
            Some(d) => {
                again.push(d.as_secs_f64());
                if d > args.tasks_again_max {
                    late.push(format!("cycle {cycle}: {:.2} s", d.as_secs_f64()));
                }
                format!("{:.2} s", d.as_secs_f64())
            }
            None => {
                late.push(format!(
                    "cycle {cycle}: no task within {TASKS_AGAIN_GIVE_UP:?}"
                ));
                "NEVER".to_string()
            }
        };
        proc_.check_alive()?;
        if proc_.pid()? != pid {
            bail!("tasklift's process id changed: it was restarted");
        }

        tokio::time::sleep(args.room_for).await;
        book::check_where(&shared, 4, grace, recent).await;
        let rss = crate::procs::mem(pid)?.rss_kib;
        rss_max = rss_max.max(rss);
        let (fds, fds_data) = open_files(pid, &data);
        let st = shared.lock().unwrap();
        let s = soak.lock().unwrap();
        println!(
            "cycle {cycle}/{}: {open_at_fill} handles open at the fill; filled {:.1} MiB ({free_after} bytes free after); tasks again after {took_s}; {} new handles; RSS {:.1} MiB, {fds} open files ({fds_data} in the data directory); so far: {} calls answered while full ({} synchronous, {} handles), call errors {}, missing {}, stuck {}, failed or changed {}",
            args.cycles,
            bytes as f64 / 1048576.0,
            st.order.len() - before,
            rss as f64 / 1024.0,
            s.calls_full,
            s.sync_full,
            s.handles_full.len(),
            s.call_errors.len(),
            st.findings.missing.len(),
            st.findings.stuck.len(),
            st.findings.changed.len(),
        );
    }

    // Drain: the load stops, every handle must end.
    stop.store(true, Ordering::Relaxed);
    for l in load {
        tokio::time::timeout(Duration::from_secs(60), l)
            .await
            .context("a client did not stop within 60 s")?
            .context("a client panicked")?;
    }
    let deadline = Instant::now() + Duration::from_secs(2) + grace;
    loop {
        let open = {
            let st = shared.lock().unwrap();
            st.handles.values().filter(|h| h.is_open()).count()
        };
        if open == 0 || Instant::now() > deadline {
            break;
        }
        book::check_where(&shared, 4, grace, book::Handle::is_open).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    book::check_where(&shared, 4, Duration::ZERO, recent).await;
    poll.await.context("the poller panicked")?;
    proc_.check_alive()?;
    let pid_end = proc_.pid()?;
    let mem_end = crate::procs::mem(pid_end)?;
    let (fds_end, fds_data_end) = open_files(pid_end, &data);
    let log = std::fs::read_to_string(&proc_.log).unwrap_or_default();
    let usage = Usage::of(&data);
    drop(proc_);
    drop(fixture);
    drop(fs);

    let st = shared.lock().unwrap();
    let s = soak.lock().unwrap();
    let f = &st.fig;
    let handles = st.order.len();
    let mut completed = 0usize;
    let mut failed = 0usize;
    let mut failed_space = 0usize;
    let mut open = 0usize;
    for h in st.handles.values() {
        match &h.seen {
            None => open += 1,
            Some(seen) if seen.status == "completed" => completed += 1,
            Some(seen) if seen.status == "failed" => {
                failed += 1;
                let e = seen.error.as_deref().unwrap_or_default().to_lowercase();
                if ["space", "full", "could not store", "os error 28"]
                    .iter()
                    .any(|w| e.contains(w))
                {
                    failed_space += 1;
                }
            }
            Some(_) => {}
        }
    }
    // Completed with a result other than the upstream's, or changed later.
    let wrong = st
        .findings
        .changed
        .keys()
        .filter(|id| {
            st.handles[*id]
                .seen
                .as_ref()
                .is_some_and(|x| x.status == "completed")
        })
        .count();
    let correct = completed.saturating_sub(wrong);
    let mut sorted = again.clone();
    sorted.sort_by(f64::total_cmp);
    let kept = count_in(&log, "could not record the task's final state; keeping it");
    let landed = count_in(&log, "recorded the task's final state after retrying");
    let gave_up = count_in(&log, "tasklift could not store this task's outcome");
    let reopened = count_in(&log, "reopened the task store after a write error");
    let reopen_longest = reopen_times(&log).into_iter().fold(0.0, f64::max);
    let reserve_given = count_in(&log, "gave back the data directory's space reserve");
    let stayed_sync = count_in(
        &log,
        "low on space at the threshold; the call stays synchronous",
    );
    let refused_new = count_in(&log, "cannot store a new task; the call stays synchronous");
    let read_failed = count_in(&log, "task store read failed");

    println!();
    println!("seed: {seed}");
    println!("cycles: {}", args.cycles);
    println!(
        "tmpfs: {:.1} MiB free at start; each fill wrote at least {:.1} MiB and left at most {free_after_max} bytes free",
        size as f64 / 1048576.0,
        if filled_min == u64::MAX { 0.0 } else { filled_min as f64 / 1048576.0 }
    );
    println!(
        "calls: {} ({} answered synchronously, {} got an error or no answer)",
        f.calls,
        f.sync_answers,
        s.call_errors.len()
    );
    println!(
        "calls made while the disk was full: {}; made and answered while it was full: {} ({} answered synchronously, {} became tasks)",
        s.sent_full,
        s.calls_full,
        s.sync_full,
        s.handles_full.len()
    );
    println!(
        "synchronous answers other than the upstream's: {}",
        s.wrong_sync.len()
    );
    println!("handles given: {handles}");
    println!("completed with the whole, correct result: {correct}");
    println!("failed: {failed} (for lack of space: {failed_space})");
    println!("completed with a wrong result, or changed: {wrong}");
    println!("handles lost: {}", st.findings.missing.len());
    println!(
        "tasks stuck: {} (open at the end: {open})",
        st.findings.stuck.len()
    );
    println!(
        "outcomes that met the full disk (kept and retried, from tasklift's log): {kept}; written after retrying: {landed}; given up: {gave_up}"
    );
    println!(
        "store reopened in the running process: {reopened} (longest {:.0} ms); reserve given back: {reserve_given}; calls kept synchronous at the threshold for low space: {stayed_sync}; new tasks the store refused: {refused_new}",
        reopen_longest * 1000.0
    );
    println!(
        "tasks/get errors: {} ({} while the disk was full), on {} tasks, the longest for {:.2} s; read errors in tasklift's log: {read_failed}",
        s.get_errors,
        s.get_errors_full,
        s.get_error_tasks.len(),
        s.longest_failing.as_secs_f64()
    );
    println!(
        "time to tasks again after each free: p50 {:.2} s, p99 {:.2} s, max {:.2} s ({} of {} cycles measured; limit {:.1} s, over it or never: {})",
        quantile(&sorted, 0.5),
        quantile(&sorted, 0.99),
        sorted.last().copied().unwrap_or(0.0),
        sorted.len(),
        args.cycles,
        args.tasks_again_max.as_secs_f64(),
        late.len()
    );
    println!(
        "tasklift restarts: {} (pid {pid} throughout)",
        usize::from(pid_end != pid)
    );
    println!(
        "data directory at the end: sled {:.1} MiB, {} result files ({:.1} MiB), {:.1} MiB free",
        usage.db as f64 / 1048576.0,
        usage.result_files,
        usage.results as f64 / 1048576.0,
        usage.free as f64 / 1048576.0
    );
    println!(
        "tasklift RSS: {:.1} MiB at start, {:.1} MiB at the end (largest after a cycle {:.1} MiB); open files at the end: {fds_end} ({fds_data_end} in the data directory)",
        mem_start.rss_kib as f64 / 1024.0,
        mem_end.rss_kib as f64 / 1024.0,
        rss_max as f64 / 1024.0
    );
    println!(
        "result bytes read back: {} (largest result {} bytes); handle reads in checks: {}; wall time {:.0} s",
        f.result_bytes,
        f.largest_result,
        f.handle_checks,
        started.elapsed().as_secs_f64()
    );
    let few = |v: &[String]| {
        let mut out = String::new();
        for x in v.iter().take(10) {
            out.push_str(&format!("\n    {x}"));
        }
        if v.len() > 10 {
            out.push_str(&format!("\n    … and {} more", v.len() - 10));
        }
        out
    };
    if !s.call_errors.is_empty() {
        println!("call errors:{}", few(&s.call_errors));
    }
    if !s.wrong_sync.is_empty() {
        println!("wrong synchronous answers:{}", few(&s.wrong_sync));
    }
    if !s.handles_full.is_empty() {
        println!("handles given on a full disk:{}", few(&s.handles_full));
    }
    if !late.is_empty() {
        println!("slow to become tasks again:{}", few(&late));
    }
    if !s.get_error_examples.is_empty() {
        println!(
            "tasks/get errors (the first of each task):{}",
            few(&s.get_error_examples)
        );
    }
    if !st.findings.missing.is_empty() {
        println!("lost:{}", book::first_few(&st.findings.missing));
    }
    if !st.findings.stuck.is_empty() {
        println!("stuck:{}", book::first_few(&st.findings.stuck));
    }
    if !st.findings.changed.is_empty() {
        println!("failed or wrong:{}", book::first_few(&st.findings.changed));
    }
    Ok(s.call_errors.is_empty()
        && s.get_errors == 0
        && s.wrong_sync.is_empty()
        && s.handles_full.is_empty()
        && late.is_empty()
        && st.findings.missing.is_empty()
        && st.findings.stuck.is_empty()
        && st.findings.changed.is_empty()
        && failed == 0
        && open == 0
        && pid_end == pid
        && again.len() == args.cycles)
}
