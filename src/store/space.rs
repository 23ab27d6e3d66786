//! Free space where the embedded store writes, against `store.min_free_bytes`.
//!
//! Below the watermark tasklift creates no new tasks: a call that could become a
//! task runs synchronously instead (as for a client without the extension), and a
//! tool that runs only as a task is refused with a retryable error before anything
//! runs upstream. Running tasks go on and store their outcomes into the space left
//! above the filesystem's end (the watermark is that reserve); `tasks/get` keeps
//! answering (sled is opened again at once if it met the full disk: see
//! `SledStore::heal`). The figure is measured every second (`watch`), so
//! tasklift leaves the low-space mode by itself once space is freed, and again
//! before a handle is given.
//!
//! A database server's space (PostgreSQL) cannot be measured from here:
//! [`DiskSpace::database`] is low while the database refuses writes for lack of
//! space (`53100 disk_full`) or cannot be reached, as the store reports
//! ([`DiskSpace::refused_write`]), until a probe write succeeds.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const OK: u8 = 0;
const FULL: u8 = 1;
const UNREACHABLE: u8 = 2;

/// How often the free space is measured.
pub const MEASURE_EVERY: Duration = Duration::from_secs(1);

/// The reserve tasklift keeps in the data directory while there is room: a file
/// of [`RESERVE_BYTES`] it gives back when the disk is full at start, so the store
/// (sled needs up to one 512 KiB segment to open) opens and serves what it holds.
pub const RESERVE_FILE: &str = "space.reserve";
/// Size of [`RESERVE_FILE`].
pub const RESERVE_BYTES: u64 = 1 << 20;
/// Free space in which the reserve is written (and some left): whatever the
/// watermark, so that even a volume smaller than it can open its store when full.
const RESERVE_ROOM: u64 = RESERVE_BYTES * 3 / 2;
/// Free space in which a store that refused a write is probed (and reopened if
/// need be): a sled segment (512 KiB) and some. The reserve given back makes it.
pub(crate) const PROBE_ROOM: u64 = 768 * 1024;

/// Write the reserve in `dir` if it is missing and the disk has room for it
/// (see [`RESERVE_ROOM`]).
pub fn keep_reserve_if_room(dir: &Path) {
    let Some(free) = available(dir) else { return };
    if free < RESERVE_ROOM {
        return;
    }
    match keep_reserve(dir) {
        Ok(true) => {
            tracing::info!(dir = %dir.display(), bytes = RESERVE_BYTES, "wrote the data directory's space reserve")
        }
        Ok(false) => {}
        Err(e) => {
            tracing::debug!(error = %e, "cannot write the data directory's space reserve yet")
        }
    }
}

/// Bytes available to tasklift on `dir`'s filesystem, and its size.
fn statvfs(dir: &Path) -> std::io::Result<(u64, u64)> {
    let st = nix::sys::statvfs::statvfs(dir).map_err(std::io::Error::from)?;
    let unit = st.fragment_size() as u64;
    Ok((
        (st.blocks_available() as u64).saturating_mul(unit),
        (st.blocks() as u64).saturating_mul(unit),
    ))
}

fn available(dir: &Path) -> Option<u64> {
    statvfs(dir).ok().map(|(free, _)| free)
}

/// Write the reserve file in `dir` if it is missing or short (real bytes, synced,
/// so the space is taken); `Ok(true)` when it was written now. A disk without room
/// for it leaves no partial file.
pub fn keep_reserve(dir: &Path) -> std::io::Result<bool> {
    use std::io::Write;
    let path = dir.join(RESERVE_FILE);
    if std::fs::metadata(&path).is_ok_and(|m| m.len() >= RESERVE_BYTES) {
        return Ok(false);
    }
    let written = (|| {
        let mut f = std::fs::File::create(&path)?;
        let chunk = vec![0u8; 64 * 1024];
        for _ in 0..RESERVE_BYTES / chunk.len() as u64 {
            f.write_all(&chunk)?;
        }
        f.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok(true)
}

/// Delete the reserve file in `dir`, if there is one; whether space was given back.
pub fn give_back_reserve(dir: &Path) -> bool {
    std::fs::remove_file(dir.join(RESERVE_FILE)).is_ok()
}

/// The free space of one directory's filesystem, as last measured.
pub struct DiskSpace {
    dir: PathBuf,
    min_free: u64,
    /// Bytes available to tasklift at the last good measurement.
    free: AtomicU64,
    /// A measurement has succeeded.
    known: AtomicBool,
    /// `free < min_free` at the last good measurement.
    low: AtomicBool,
    /// The store itself refused a write (PostgreSQL's `53100 disk_full`, or the
    /// database out of reach), until a probe write succeeds again: one of
    /// `REFUSED_*`.
    refused: std::sync::atomic::AtomicU8,
    /// A database server's space, which tasklift cannot measure: only `refused`.
    database: bool,
}

impl DiskSpace {
    /// Watch `dir` against `min_free` bytes (0: never low), measured once now.
    pub fn new(dir: &Path, min_free: u64) -> Arc<Self> {
        let s = Arc::new(Self {
            dir: dir.to_path_buf(),
            min_free,
            free: AtomicU64::new(0),
            known: AtomicBool::new(false),
            low: AtomicBool::new(false),
            refused: std::sync::atomic::AtomicU8::new(OK),
            database: false,
        });
        if let Err(e) = s.measure() {
            tracing::warn!(dir = %s.dir.display(), error = %e, "cannot measure the free space of the data directory");
        }
        if let Ok((_, size)) = statvfs(dir) {
            if size < min_free {
                tracing::warn!(dir = %dir.display(), size_bytes = size, min_free_bytes = min_free,
                    "the data directory's filesystem is smaller than store.min_free_bytes: tasklift will never create a task on it (every call runs synchronously); give it a larger volume or lower store.min_free_bytes");
            }
        }
        s
    }

    /// The space of a database server (PostgreSQL): not measured; low while the
    /// database refuses writes for lack of space.
    pub fn database() -> Arc<Self> {
        Arc::new(Self {
            dir: PathBuf::new(),
            min_free: 0,
            free: AtomicU64::new(0),
            known: AtomicBool::new(false),
            low: AtomicBool::new(false),
            refused: std::sync::atomic::AtomicU8::new(OK),
            database: true,
        })
    }

    /// The store refused a write for lack of space (`unreachable`: could not be
    /// reached): no new tasks until a probe write succeeds
    /// ([`DiskSpace::writes_again`]).
    pub fn refused_write(&self, unreachable: bool, detail: &str) {
        let why = if unreachable { UNREACHABLE } else { FULL };
        if self.refused.swap(why, Ordering::Relaxed) != why {
            let what = if unreachable {
                "cannot be reached"
            } else {
                "is out of space"
            };
            tracing::warn!(error = %detail, "the task store {what}: no new tasks are created (calls run synchronously; tools that run only as tasks are refused) until it takes writes again; running tasks keep retrying their outcome");
        }
    }

    /// A probe write succeeded: tasks again.
    pub fn writes_again(&self) {
        if self.refused.swap(OK, Ordering::Relaxed) != OK {
            tracing::info!("the task store takes writes again: calls become tasks again");
        }
    }

    /// Whether the store refused a write (for lack of space, or out of reach) and
    /// no probe has succeeded since.
    pub fn store_refused(&self) -> bool {
        self.refused.load(Ordering::Relaxed) != OK
    }

    /// Whether the store could not be reached at its last refused write.
    pub fn store_unreachable(&self) -> bool {
        self.refused.load(Ordering::Relaxed) == UNREACHABLE
    }

    /// What the low mode is, for `/readyz`, the status page and errors.
    pub fn why_low(&self) -> String {
        if self.store_unreachable() {
            "the task store's database cannot be reached".into()
        } else if self.store_refused() && self.database {
            "the task store's database refused a write for lack of space (53100 disk_full)".into()
        } else if self.store_refused() {
            format!(
                "the task store refused a write for lack of space (the disk or quota is full; {} bytes free): running tasks keep their outcomes and write them once space is freed",
                self.free_bytes().unwrap_or(0)
            )
        } else {
            format!(
                "free space ({} bytes) is below store.min_free_bytes ({})",
                self.free_bytes().unwrap_or(0),
                self.min_free
            )
        }
    }

    /// Measure now; returns the bytes available. A failed measurement keeps the
    /// last figure.
    pub fn measure(&self) -> std::io::Result<u64> {
        if self.database {
            return Ok(0);
        }
        let (free, _) = statvfs(&self.dir)?;
        self.free.store(free, Ordering::Relaxed);
        self.known.store(true, Ordering::Relaxed);
        self.low
            .store(self.min_free > 0 && free < self.min_free, Ordering::Relaxed);
        Ok(free)
    }

    /// [`Self::is_low`], on a measurement taken now (for a disk; a database's
    /// space is only what its store reports).
    pub fn low_now(&self) -> bool {
        if !self.database {
            let _ = self.measure();
        }
        self.is_low()
    }

    /// Whether free space was below the watermark at the last measurement, or the
    /// store refused a write for lack of space.
    pub fn is_low(&self) -> bool {
        self.low.load(Ordering::Relaxed) || self.store_refused()
    }

    /// Bytes available at the last measurement, if one succeeded.
    pub fn free_bytes(&self) -> Option<u64> {
        self.known
            .load(Ordering::Relaxed)
            .then(|| self.free.load(Ordering::Relaxed))
    }

    /// The watermark (`store.min_free_bytes`).
    pub fn min_free(&self) -> u64 {
        self.min_free
    }

    /// The directory measured.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Measure `space` every `every` until `shutdown`, logging each change of mode,
/// and keep the reserve file while there is room. While `store` refuses writes
/// for lack of space, probe it (and reopen it if sled itself met the error)
/// once there is room for that: new tasks resume when it takes writes again.
pub async fn watch(
    space: Arc<DiskSpace>,
    every: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
    store: Option<super::SledStore>,
) {
    let mut was_low = space.is_low();
    if was_low {
        log_low(&space);
    }
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        if let Err(e) = space.measure() {
            tracing::debug!(dir = %space.dir.display(), error = %e, "cannot measure the free space of the data directory");
            continue;
        }
        if space.store_refused() {
            let room = space.free_bytes().is_some_and(|f| f >= PROBE_ROOM);
            if let (Some(store), true) = (&store, room) {
                // First the room to open the store again, should it fill anew.
                keep_reserve_if_room(&space.dir);
                match store.recover().await {
                    Ok(()) => space.writes_again(),
                    Err(e) => {
                        tracing::debug!(error = %e, "the task store does not take writes yet")
                    }
                }
            }
        } else {
            keep_reserve_if_room(&space.dir);
        }
        let low = space.is_low();
        match (was_low, low) {
            (false, true) => log_low(&space),
            (true, false) => tracing::info!(
                free_bytes = space.free_bytes().unwrap_or(0),
                min_free_bytes = space.min_free,
                "free space is back above store.min_free_bytes: calls become tasks again"
            ),
            _ => {}
        }
        was_low = low;
    }
}

fn log_low(space: &DiskSpace) {
    tracing::warn!(
        dir = %space.dir.display(),
        free_bytes = space.free_bytes().unwrap_or(0),
        min_free_bytes = space.min_free,
        "free space is below store.min_free_bytes: no new tasks are created (calls run synchronously; tools that run only as tasks are refused) until space is freed; running tasks go on and stored tasks stay readable"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_is_free_space_below_the_watermark() {
        let dir = tempfile::tempdir().unwrap();
        let never = DiskSpace::new(dir.path(), 0);
        assert!(never.free_bytes().is_some_and(|f| f > 0));
        assert!(!never.is_low(), "0 turns the watermark off");
        let free = never.free_bytes().unwrap();
        let above = DiskSpace::new(dir.path(), free.saturating_add(1 << 40));
        assert!(above.is_low(), "a watermark above the free space");
        let below = DiskSpace::new(dir.path(), 1);
        assert!(!below.is_low());
    }

    #[test]
    fn a_directory_that_cannot_be_measured_is_not_low() {
        let s = DiskSpace::new(Path::new("/nonexistent/tasklift-space-test"), u64::MAX);
        assert_eq!(s.free_bytes(), None);
        assert!(!s.is_low(), "no figure, no refusal");
        assert!(s.measure().is_err());
    }
}
