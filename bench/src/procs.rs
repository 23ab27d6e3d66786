//! The processes the harness starts: the baseline upstream, tasklift and nginx,
//! each in its own process group, each stopped (the whole group: nginx's workers
//! too) when its handle is dropped, on success, error or Ctrl-C alike.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::wire::{Conn, Endpoint};

/// A scratch directory under the system's temp dir, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new, empty directory `tasklift-bench-<tag>-<uuid>`.
    pub fn new(tag: &str) -> anyhow::Result<Self> {
        let p = std::env::temp_dir().join(format!(
            "tasklift-bench-{tag}-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&p).with_context(|| format!("creating {}", p.display()))?;
        Ok(Self(p))
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process, in a process group of its own, killed with its group on drop.
pub struct Proc {
    /// What it is, for messages.
    pub name: String,
    child: Child,
}

impl Proc {
    /// Start `program args…`, raising its soft open-files limit to the hard one
    /// first (through `sh -c 'ulimit -n …; exec …'`), stdout piped, stderr to `log`.
    pub fn spawn(name: &str, program: &Path, args: &[String], log: &Path) -> anyhow::Result<Self> {
        let stderr =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(r#"ulimit -n "$(ulimit -Hn)" 2>/dev/null; exec "$0" "$@""#)
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .process_group(0)
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {name} ({})", program.display()))?;
        Ok(Self {
            name: name.to_string(),
            child,
        })
    }

    /// The process id.
    pub fn pid(&self) -> anyhow::Result<u32> {
        self.child
            .id()
            .with_context(|| format!("{} has exited", self.name))
    }

    /// Read stdout lines until one starts with `prefix`; the rest of that line.
    pub async fn stdout_line(&mut self, prefix: &str, limit: Duration) -> anyhow::Result<String> {
        let out = self.child.stdout.take().context("stdout already taken")?;
        let mut lines = BufReader::new(out).lines();
        let found = tokio::time::timeout(limit, async {
            while let Some(l) = lines.next_line().await? {
                if let Some(rest) = l.strip_prefix(prefix) {
                    return Ok::<_, std::io::Error>(Some(rest.trim().to_string()));
                }
            }
            Ok(None)
        })
        .await;
        match found {
            Ok(Ok(Some(s))) => {
                // Keep draining stdout so the child never blocks on a full pipe.
                tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                Ok(s)
            }
            Ok(Ok(None)) => bail!("{} exited before printing {prefix:?}", self.name),
            Ok(Err(e)) => bail!("reading {}'s output: {e}", self.name),
            Err(_) => bail!("{} did not print {prefix:?} within {limit:?}", self.name),
        }
    }

    /// `kill -9` the process (its whole group) and reap it. Fails if it had already
    /// exited on its own: a crash before the kill is a finding, not a kill.
    pub async fn kill9(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("{} exited on its own before the kill ({status})", self.name);
        }
        let id = self.pid()?;
        killpg(Pid::from_raw(id as i32), Signal::SIGKILL)
            .with_context(|| format!("kill -9 {}", self.name))?;
        self.child.wait().await?;
        Ok(())
    }

    /// Fail if the process has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("{} exited ({status})", self.name);
        }
        Ok(())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let Some(id) = self.child.id() else { return };
        let pg = Pid::from_raw(id as i32);
        // Ask first (nginx's master stops its workers on SIGTERM), then make sure.
        let _ = killpg(pg, Signal::SIGTERM);
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        while std::time::Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = killpg(pg, Signal::SIGKILL);
        let _ = self.child.start_kill();
    }
}

/// An address on 127.0.0.1 nothing listens on (bound and released).
pub fn free_port() -> anyhow::Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?)
}

/// Wait until `GET path` on `addr` answers 200 (or the process exits, or `limit`).
pub async fn wait_http_ok(
    proc_: &mut Proc,
    addr: SocketAddr,
    path: &str,
    limit: Duration,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + limit;
    let ep = Endpoint::new(addr, "/");
    loop {
        proc_.check_alive()?;
        let last = match Conn::connect(&ep).await {
            Ok(mut c) => match c.plain("GET", path).await {
                Ok((s, _)) if s.is_success() => return Ok(()),
                Ok((s, b)) => format!("HTTP {s}: {}", crate::wire::snippet(&b)),
                Err(e) => format!("{e:#}"),
            },
            Err(e) => format!("{e:#}"),
        };
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "{} did not answer GET {path} on {addr} within {limit:?} ({last})",
                proc_.name
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Memory of a process from /proc: VmRSS and (if the kernel has smaps_rollup) Pss,
/// in KiB.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mem {
    /// Resident set size.
    pub rss_kib: u64,
    /// Proportional set size (0 when unknown).
    pub pss_kib: u64,
}

fn kib_field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// Read `pid`'s memory.
pub fn mem(pid: u32) -> anyhow::Result<Mem> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let rss_kib = kib_field(&status, "VmRSS:").context("VmRSS in /proc/PID/status")?;
    let pss_kib = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|t| kib_field(&t, "Pss:"))
        .unwrap_or(0);
    Ok(Mem { rss_kib, pss_kib })
}

/// The size of a directory tree on disk, in bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Disk {
    /// The files' lengths summed (`du --apparent-size`).
    pub apparent: u64,
    /// The blocks allocated to them (`du`): sparse files count less, files
    /// preallocated past their data more.
    pub allocated: u64,
}

/// Sum the sizes of every file under `dir` (0 if it does not exist; files removed
/// while it is walked are skipped).
pub fn disk_usage(dir: &Path) -> Disk {
    use std::os::unix::fs::MetadataExt;
    let mut d = Disk::default();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(p) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&p) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                todo.push(e.path());
            } else {
                d.apparent += m.len();
                d.allocated += m.blocks() * 512;
            }
        }
    }
    d
}

/// Open file descriptors of `pid`.
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Raise this process's soft open-files limit to its hard limit (the scale
/// scenario's client connections; the children the harness starts inherit it,
/// and raise theirs again). The limits after, soft and hard.
pub fn raise_nofile() -> anyhow::Result<(u64, u64)> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).context("getrlimit(RLIMIT_NOFILE)")?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).context("setrlimit(RLIMIT_NOFILE)")?;
    }
    Ok(getrlimit(Resource::RLIMIT_NOFILE)?)
}

/// The soft and hard open-files limits of this process.
pub fn nofile_limits() -> (String, String) {
    let text = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    text.lines()
        .find(|l| l.starts_with("Max open files"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f.get(3).unwrap_or(&"?").to_string(),
                f.get(4).unwrap_or(&"?").to_string(),
            )
        })
        .unwrap_or(("?".into(), "?".into()))
}

/// CPU time (user + system) used so far by `pid`, in clock ticks of 1/100 s
/// (`USER_HZ`); 0 if the process is gone.
pub fn cpu_ticks(pid: u32) -> u64 {
    ticks_in(format!("/proc/{pid}/stat"))
}

/// The user and system ticks in a `stat` file of /proc (a process's or a
/// thread's); 0 if it cannot be read.
fn ticks_in(path: impl AsRef<std::path::Path>) -> u64 {
    let Ok(stat) = std::fs::read_to_string(path) else {
        return 0;
    };
    // The command name may hold spaces: the fields start after its closing ')'.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return 0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    n(11) + n(12)
}

/// `pid` and its direct children (nginx's master and workers).
pub fn with_children(pid: u32) -> Vec<u32> {
    let mut v = vec![pid];
    v.extend(children(pid));
    v
}

/// The direct children of `pid` (a stdio upstream tasklift runs).
pub fn children(pid: u32) -> Vec<u32> {
    let mut v = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(child) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            let ppid = stat
                .rfind(')')
                .and_then(|i| stat[i + 2..].split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(pid) {
                v.push(child);
            }
        }
    }
    v
}

/// CPU time of several processes, in seconds.
pub fn cpu_secs(pids: &[u32]) -> f64 {
    pids.iter().map(|p| cpu_ticks(*p)).sum::<u64>() as f64 / 100.0
}

/// Every thread of `pids`: its id and its /proc directory.
fn threads(pids: &[u32]) -> Vec<(u32, std::path::PathBuf)> {
    let mut out = Vec::new();
    for pid in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            if let Some(tid) = t.file_name().to_str().and_then(|n| n.parse().ok()) {
                out.push((tid, t.path()));
            }
        }
    }
    out
}

/// The CPU ticks of every thread of `pids`, by thread id.
pub fn thread_ticks(pids: &[u32]) -> Vec<(u32, u64)> {
    threads(pids)
        .into_iter()
        .map(|(tid, dir)| (tid, ticks_in(dir.join("stat"))))
        .collect()
}

/// Of the CPU the threads in `before` and `after` (two readings of
/// [`thread_ticks`]) used between the readings, the share of the busiest one:
/// 1 when one thread did all the work, 0.5 when two split it evenly. None
/// when they used none.
pub fn busiest_share(before: &[(u32, u64)], after: &[(u32, u64)]) -> Option<f64> {
    let used: Vec<u64> = after
        .iter()
        .map(|&(tid, t1)| {
            let t0 = before.iter().find(|b| b.0 == tid).map_or(0, |b| b.1);
            t1.saturating_sub(t0)
        })
        .collect();
    let total: u64 = used.iter().sum();
    (total > 0).then(|| *used.iter().max().unwrap_or(&0) as f64 / total as f64)
}

/// Context switches (voluntary: the thread waited; involuntary: it was
/// preempted) of every thread of `pids`, summed.
pub fn switches(pids: &[u32]) -> (u64, u64) {
    let (mut vol, mut invol) = (0, 0);
    for (_, dir) in threads(pids) {
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        let n = |rest: &str| rest.trim().parse::<u64>().unwrap_or(0);
        for line in status.lines() {
            if let Some(rest) = line.strip_prefix("voluntary_ctxt_switches:") {
                vol += n(rest);
            } else if let Some(rest) = line.strip_prefix("nonvoluntary_ctxt_switches:") {
                invol += n(rest);
            }
        }
    }
    (vol, invol)
}

/// Every process whose command name is `comm` (e.g. the PostgreSQL server's
/// backends, whose CPU belongs to the store being measured).
pub fn named(comm: &str) -> Vec<u32> {
    let mut v = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if name.trim_end() == comm {
                v.push(pid);
            }
        }
    }
    v
}

/// CPU time the whole machine has been busy (all cores, from /proc/stat), seconds.
pub fn machine_busy_secs() -> f64 {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal: all but idle and iowait.
    let busy: u64 = [0usize, 1, 2, 5, 6, 7]
        .iter()
        .map(|i| f.get(*i).copied().unwrap_or(0))
        .sum();
    busy as f64 / 100.0
}

/// A database of its own for one run (`tasklift_<what>_<random>`) on the
/// PostgreSQL server the harness was given, dropped at the end.
pub struct ScratchDb {
    admin: String,
    name: String,
    pub url: String,
}

impl ScratchDb {
    pub async fn create(admin: &str, what: &str) -> anyhow::Result<Self> {
        let name = format!("tasklift_{what}_{}", uuid::Uuid::new_v4().simple());
        let (c, conn) = tokio_postgres::connect(admin, tokio_postgres::NoTls)
            .await
            .with_context(|| format!("connecting to PostgreSQL at {admin} (--postgres)"))?;
        tokio::spawn(conn);
        c.batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .context("creating the scratch database")?;
        let base = admin.split('?').next().unwrap_or(admin);
        let base = base.rsplit_once('/').map(|(b, _)| b).unwrap_or(base);
        Ok(Self {
            admin: admin.to_string(),
            url: format!("{base}/{name}"),
            name,
        })
    }

    pub async fn drop_db(&self) {
        // The server may be coming back from a restart: try for a while.
        for _ in 0..20 {
            if let Ok((c, conn)) = tokio_postgres::connect(&self.admin, tokio_postgres::NoTls).await
            {
                tokio::spawn(conn);
                let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
                if c.batch_execute(&sql).await.is_ok() {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        eprintln!("could not drop the scratch database {}", self.name);
    }
}

#[cfg(test)]
mod tests {
    use super::busiest_share;

    #[test]
    fn the_busiest_threads_share_of_the_work_between_two_readings() {
        // Thread 1 did 30 ticks, thread 2 ten; thread 3 started during the run
        // and did 60; thread 4 ended (not in the second reading).
        let before = [(1, 100), (2, 50), (4, 7)];
        let after = [(1, 130), (2, 60), (3, 60)];
        assert_eq!(busiest_share(&before, &after), Some(0.6));
        assert_eq!(busiest_share(&after, &after), None);
        assert_eq!(busiest_share(&[(1, 5)], &[(1, 9)]), Some(1.0));
    }
}
