//! What the process costs, from `/proc/self` (Linux): resident memory and
//! CPU time, without `libc` or `unsafe`.

use std::sync::OnceLock;

/// A `kB` field of `/proc/self/status` (`VmRSS`, `VmHWM`, ...), in KiB.
#[must_use]
pub fn status_kib(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// Current resident set, KiB.
#[must_use]
pub fn rss_kib() -> Option<u64> {
    status_kib("VmRSS")
}

/// Peak resident set since the process started, KiB.
#[must_use]
pub fn hwm_kib() -> Option<u64> {
    status_kib("VmHWM")
}

/// Clock ticks per second (`getconf CLK_TCK`, 100 if that fails).
#[must_use]
pub fn clk_tck() -> f64 {
    static TCK: OnceLock<f64> = OnceLock::new();
    *TCK.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// User + system CPU seconds of this process so far (all threads), from
/// `/proc/self/stat` (resolution: one clock tick, 10 ms).
#[must_use]
pub fn cpu_seconds() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the name: state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / clk_tck())
}

/// The soft limit on open files (`Max open files` in `/proc/self/limits`).
#[must_use]
pub fn open_files_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_proc() {
        if !std::path::Path::new("/proc/self/status").exists() {
            return;
        }
        assert!(rss_kib().unwrap() > 0);
        assert!(hwm_kib().unwrap() >= rss_kib().unwrap() / 2);
        assert!(cpu_seconds().unwrap() >= 0.0);
        assert!(open_files_limit().unwrap() > 0);
    }
}
