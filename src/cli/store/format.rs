//! How the commands write figures: times, durations, sizes, owners and messages
//! cut to one short line.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis() as u64
}

/// `bearer:1a2b3c4d`: the kind of principal and the start of its hash.
pub(super) fn short_owner(owner: &str) -> String {
    match owner.split_once(':') {
        Some((kind, hash)) => format!("{kind}:{}", hash.chars().take(8).collect::<String>()),
        None => printable(owner, 16),
    }
}

/// `s` on one line without control characters, cut to `max` characters.
pub(super) fn printable(s: &str, max: usize) -> String {
    let clean: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if clean.chars().count() <= max {
        return clean;
    }
    let mut cut: String = clean.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

pub(super) fn expires(at_ms: u64, now: u64) -> String {
    if at_ms > now {
        format!("in {}", short_duration(at_ms - now))
    } else {
        format!("{} ago", short_duration(now - at_ms))
    }
}

/// `45s`, `12m`, `3h05m`, `2d04h`.
pub(super) fn short_duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

pub(super) fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

pub(super) fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes_read_short() {
        assert_eq!(short_duration(999), "0s");
        assert_eq!(short_duration(59_000), "59s");
        assert_eq!(short_duration(61_000), "1m");
        assert_eq!(short_duration(3_900_000), "1h05m");
        assert_eq!(short_duration(7 * 86_400_000 + 3_600_000), "7d01h");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 * 1024 * 1024), "3.0 MiB");
    }

    #[test]
    fn owners_and_messages_are_cut_and_cleaned() {
        assert_eq!(short_owner("anonymous"), "anonymous");
        assert_eq!(
            short_owner(&format!("bearer:{}", "ab".repeat(32))),
            "bearer:abababab"
        );
        assert_eq!(printable("a\nb\u{1b}[31m", 20), "a b [31m");
        assert_eq!(printable("abcdef", 4), "abc…");
    }
}
