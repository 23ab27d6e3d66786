//! The configuration loader on arbitrary files: the text a user's `--config FILE`
//! holds, through the same steps `tasklift serve` and `tasklift check-config` take
//! (parse, flags over the file, validation, the printed effective configuration),
//! without touching the filesystem or the network. Errors are fine; a panic is not,
//! and what `check-config` prints must parse again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tasklift::cli::Overrides;
use tasklift::config::RawConfig;

fuzz_target!(|data: &[u8]| {
    // `RawConfig::from_file` reads the file as UTF-8 text.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(mut raw) = RawConfig::from_toml(text) else {
        return;
    };
    // Validation reads `[auth.jwt]` key files; keep the fuzzer off the disk. An
    // inline `hs256_secret` still goes through the key checks.
    raw.auth.jwt.hs256_secret_file.clear();
    raw.auth.jwt.public_key_file.clear();
    raw.auth.jwt.jwks_file.clear();
    // `workers = 0` asks the OS for the CPU count (cgroup files): same checks, no I/O.
    if raw.server.workers == 0 {
        raw.server.workers = 1;
    }
    // `tasklift serve --config FILE` with no flags, and with `--upstream`.
    let mut plain = raw.clone();
    Overrides::default()
        .apply(&mut plain)
        .expect("no flags cannot conflict");
    check(&plain);
    let flags = Overrides {
        upstream: Some("http://127.0.0.1:9000/mcp".into()),
        threshold: Some("500ms".into()),
        ..Overrides::default()
    };
    if flags.apply(&mut raw).is_ok() {
        check(&raw);
    }
});

fn check(raw: &RawConfig) {
    let valid = raw.validate();
    // What `check-config` prints for a valid file is TOML that loads again.
    if valid.is_ok() {
        let shown = raw.to_toml();
        assert!(!shown.starts_with("# cannot print"), "{shown}");
        if let Err(e) = RawConfig::from_toml(&shown) {
            panic!("the printed configuration does not parse: {e}\n{shown}");
        }
    }
}
