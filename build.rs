//! Names the commit a `tasklift` binary was built from, for `tasklift --version`
//! and the status page: `TASKLIFT_COMMIT` is the abbreviated commit (12 hex digits),
//! with `-dirty` when tracked files differed from it, or `unknown`.
//!
//! Where it comes from, in order:
//! 0. the `TASKLIFT_COMMIT` environment variable, when not empty: a build without
//!    the repository, such as the container image's (its context has no `.git`);
//! 1. a git work tree whose top is this package's directory (a clone): `git
//!    rev-parse` and `git status`;
//! 2. `.cargo_vcs_info.json`, which `cargo package` writes into a crate (a build
//!    from crates.io, or of `cargo package`'s own verification copy);
//! 3. otherwise `unknown` (a source tarball, or no `git` on the PATH).
//!
//! It reruns when HEAD moves (HEAD itself, the branch file it points to, or
//! packed-refs) or when a source file of the workspace changes (for the dirty
//! flag), never on every build: with `rerun-if-changed` given, Cargo reruns a
//! build script only when one of the named paths changes.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=TASKLIFT_COMMIT");
    let given = std::env::var("TASKLIFT_COMMIT").ok();
    let commit = given
        .filter(|c| !c.trim().is_empty())
        .map(|c| c.trim().to_string())
        .or_else(|| from_git(&dir))
        .or_else(|| from_vcs_info(&dir))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=TASKLIFT_COMMIT={commit}");
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn from_git(dir: &Path) -> Option<String> {
    // Only this package's own repository: a crate unpacked inside some other work
    // tree (cargo package's copy under target/package/) must not take its commit.
    let top = git(dir, &["rev-parse", "--show-toplevel"])?;
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same(Path::new(&top), dir) {
        return None;
    }
    let sha = git(dir, &["rev-parse", "--short=12", "HEAD"])?;
    // What moves HEAD: the HEAD file (checkout), the branch's ref file (commit),
    // packed-refs (gc). `--git-path` resolves each in a linked worktree too. A
    // path named here that does not exist would rerun the script on every build,
    // so only existing ones are named.
    let mut watch = vec![git(dir, &["rev-parse", "--git-path", "HEAD"])?];
    if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        watch.extend(git(dir, &["rev-parse", "--git-path", &branch]));
    }
    watch.extend(git(dir, &["rev-parse", "--git-path", "packed-refs"]));
    // The dirty flag follows the sources the binary is built from; an edit there
    // recompiles tasklift anyway, so rerunning this script costs nothing extra.
    for p in [
        "Cargo.toml",
        "Cargo.lock",
        "src",
        "protocol/src",
        "fixture/src",
    ] {
        watch.push(dir.join(p).display().to_string());
    }
    for p in watch {
        let p = dir.join(p);
        if p.exists() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
    let dirty = git(dir, &["status", "--porcelain", "--untracked-files=no"])?;
    Some(if dirty.is_empty() {
        sha
    } else {
        format!("{sha}-dirty")
    })
}

/// `{"git": {"sha1": "…", "dirty": true}, "path_in_vcs": ""}`, read without a JSON
/// parser (a build script's dependencies would be built for every build).
fn from_vcs_info(dir: &Path) -> Option<String> {
    let path = dir.join(".cargo_vcs_info.json");
    let text = std::fs::read_to_string(&path).ok()?;
    println!("cargo:rerun-if-changed={}", path.display());
    let after = &text[text.find("\"sha1\"")? + 6..];
    let start = after.find('"')? + 1;
    let sha: String = after[start..]
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .take(12)
        .collect();
    if sha.len() < 7 {
        return None;
    }
    let dirty = text
        .split_once("\"dirty\"")
        .is_some_and(|(_, rest)| rest.trim_start_matches([' ', ':']).starts_with("true"));
    Some(if dirty { format!("{sha}-dirty") } else { sha })
}
