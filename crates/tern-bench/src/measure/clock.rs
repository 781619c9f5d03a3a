//! Wall-clock formatting for status lines (`YYYY-MM-DD HH:MM:SS`, UTC),
//! without a date library.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, as YCSB-cpp prints it (UTC).
pub fn now_string() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format_unix(secs)
}

/// Formats seconds since the epoch as `YYYY-MM-DD HH:MM:SS`.
pub fn format_unix(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats_known_dates() {
        assert_eq!(super::format_unix(0), "1970-01-01 00:00:00");
        assert_eq!(super::format_unix(1_709_200_655), "2024-02-29 09:57:35");
    }
}
