//! Opening the store a flag points at: find it, create nothing, and refuse one a
//! running tasklift holds, naming the holder when `/proc/locks` tells it.

use std::path::{Path, PathBuf};

use crate::config::{RawConfig, RawStore};
use crate::store::{SledStore, StoreError};

use super::{Fail, StoreAt, EXIT_CONFIG, EXIT_FAILED, EXIT_IN_USE, EXIT_NO_STORE};

/// The data directory and result-file threshold the flags point at.
fn resolve(at: &StoreAt) -> Result<(PathBuf, usize), Fail> {
    let raw = match &at.config {
        Some(f) => {
            RawConfig::from_file(f)
                .map_err(|e| Fail::new(EXIT_CONFIG, format!("invalid configuration: {e}")))?
                .store
        }
        None => RawStore::default(),
    };
    let dir = at
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&raw.data_dir));
    Ok((dir, raw.large_result_bytes))
}

/// Open the store without creating anything, refusing a store in use.
pub(super) fn open(at: &StoreAt) -> Result<(SledStore, PathBuf), Fail> {
    let (dir, large_result_bytes) = resolve(at)?;
    let shown = dir.display();
    match std::fs::metadata(&dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Fail::new(
                EXIT_NO_STORE,
                format!(
                    "there is no data directory {shown} (nothing was created); \
                     give the proxy's --data-dir DIR or --config FILE"
                ),
            ));
        }
        Err(e) => {
            return Err(Fail::new(
                EXIT_NO_STORE,
                format!("cannot read the data directory {shown}: {e}"),
            ));
        }
        Ok(m) if !m.is_dir() => {
            return Err(Fail::new(
                EXIT_NO_STORE,
                format!("{shown} is not a directory"),
            ));
        }
        Ok(_) => {}
    }
    // sled would create a fresh, empty database: only open one that exists.
    if !dir.join("db").join("db").is_file() {
        let empty = std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_none());
        let what = if empty {
            "is empty"
        } else {
            "holds no tasklift task store (no db/ inside)"
        };
        return Err(Fail::new(
            EXIT_NO_STORE,
            format!("the data directory {shown} {what}; is it the proxy's --data-dir?"),
        ));
    }
    match SledStore::open(&dir, large_result_bytes) {
        Ok(store) => Ok((store, dir)),
        Err(StoreError::InUse { .. }) => {
            let by = match lock_holder(&dir) {
                Some(pid) => format!("a running tasklift (pid {pid})"),
                None => "a running tasklift".to_string(),
            };
            Err(Fail::new(
                EXIT_IN_USE,
                format!("the data directory {shown} is in use by {by}; stop it first"),
            ))
        }
        Err(e) => Err(Fail::new(
            EXIT_FAILED,
            format!("cannot open the task store in {shown}: {e}"),
        )),
    }
}

/// The pid holding the lock on `dir/db/db`, from `/proc/locks` (Linux only).
#[cfg(target_os = "linux")]
fn lock_holder(dir: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let file = dir.join("db").join("db");
    let meta = std::fs::metadata(&file).ok()?;
    let dev = meta.dev();
    let (major, minor) = (
        ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff),
        (dev & 0xff) | ((dev >> 12) & !0xff),
    );
    let canonical = std::fs::canonicalize(&file).ok();
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    // "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234567 0 EOF"; "->" lines are waiters.
    for line in locks.lines().filter(|l| !l.contains("->")) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(pid), Some(id)) = (f.get(4), f.get(5)) else {
            continue;
        };
        let mut id = id.split(':');
        let (Some(ma), Some(mi), Some(ino)) = (id.next(), id.next(), id.next()) else {
            continue;
        };
        if ino.parse::<u64>().ok() != Some(meta.ino()) {
            continue;
        }
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        let same_dev = u64::from_str_radix(ma, 16).ok() == Some(major)
            && u64::from_str_radix(mi, 16).ok() == Some(minor);
        // Layered filesystems may report another device: then the holder must
        // have the file open.
        let holds_open = || {
            let Some(c) = &canonical else { return false };
            std::fs::read_dir(format!("/proc/{pid}/fd"))
                .map(|fds| {
                    fds.flatten()
                        .any(|fd| std::fs::read_link(fd.path()).ok().as_ref() == Some(c))
                })
                .unwrap_or(false)
        };
        if pid > 0 && (same_dev || holds_open()) {
            return Some(pid);
        }
    }
    None
}

#[cfg(not(target_os = "linux"))]
fn lock_holder(_dir: &Path) -> Option<u32> {
    None
}
