//! Low disk space, for the tests that run the store on a small filesystem
//! (`store/low_space.rs`, `store/full_disk.rs`): a tmpfs of the test's own (root
//! only), filled to the last bytes, and what `/readyz` and a slow call show.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::harness::*;

pub(crate) async fn readyz(h: &Harness) -> (u16, Value) {
    let r = raw("GET", &h.url.replace("/mcp", "/readyz"), &[], "").await;
    (r.status, r.json())
}

/// Whether `slow` becomes a task (else: its result, synchronously).
pub(crate) async fn slow_becomes_a_task(h: &Harness) -> bool {
    let a = h.client().call_tool("slow", json!({})).await.expect("slow");
    match a.result["resultType"].as_str() {
        Some("task") => true,
        _ => {
            assert!(a.result["content"].is_array(), "{}", a.result);
            false
        }
    }
}

pub(crate) async fn wait_ready_status(h: &Harness, want: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, r) = readyz(h).await;
        assert_eq!(status, 200, "low space is degraded, never unready: {r}");
        if r["status"] == want {
            return r;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/readyz never said {want}: {r}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A tmpfs mounted for the test, unmounted at drop.
pub(crate) struct Mounted(pub(crate) PathBuf);

impl Mounted {
    /// A `size` tmpfs, or `None` where this process may not mount (not root).
    pub(crate) fn tmpfs(size: &str) -> Option<Self> {
        let dir = std::env::temp_dir().join(format!("tasklift-low-space-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        Some(Self(dir))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Fill the filesystem of `dir` with a file until nothing is left, then give back
/// `leave` bytes.
pub(crate) fn fill(dir: &Path, leave: u64) -> PathBuf {
    let path = dir.join("ballast");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0xa5u8; 64 * 1024];
    let mut written = 0u64;
    while f.write_all(&chunk).is_ok() {
        written += chunk.len() as u64;
    }
    let _ = f.flush();
    f.set_len(written.saturating_sub(leave)).unwrap();
    f.sync_all().unwrap();
    path
}
