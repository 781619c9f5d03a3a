//! Formatting of keys, values and sizes for people.

use super::escape_bytes;

/// Longest escaped key printed in full; longer ones are cut with `...`.
const MAX_KEY_CHARS: usize = 64;

/// A user key, escaped, cut to a readable length.
pub fn key(bytes: &[u8]) -> String {
    cut(escape_bytes(bytes), MAX_KEY_CHARS)
}

/// The first bytes of a value, escaped and quoted.
pub fn preview(bytes: &[u8], max_bytes: usize) -> String {
    let shown = &bytes[..bytes.len().min(max_bytes)];
    let more = if bytes.len() > max_bytes { "..." } else { "" };
    format!("\"{}\"{more}", escape_bytes(shown))
}

/// A byte count with a binary unit.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

fn cut(s: String, max: usize) -> String {
    if s.chars().count() <= max {
        return s;
    }
    let mut out: String = s.chars().take(max).collect();
    out.push_str("...");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(key(b"a\x01"), "a\\x01");
        assert_eq!(key(&[b'k'; 100]).len(), MAX_KEY_CHARS + 3);
        assert_eq!(preview(b"hello", 3), "\"hel\"...");
        assert_eq!(preview(b"hi", 3), "\"hi\"");
        assert_eq!(bytes(10), "10 B");
        assert_eq!(bytes(1536), "1.5 KiB");
    }
}
