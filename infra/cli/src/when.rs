//! `TIME` arguments (`rewind --to`, `mark-processed --until`, `replay --since/--until`):
//! - RFC 3339: `2026-11-29T10:00:00Z`, `2026-11-29T12:00:00+02:00`;
//! - without an offset, read as UTC: `2026-11-29T10:00:00`, `2026-11-29 10:00`;
//! - a date, midnight UTC: `2026-11-29`;
//! - relative to now: `-90s`, `-30m`, `-2h`, `-1d`, `-1w` (also `now`).

use chrono::{NaiveDate, NaiveDateTime};

/// Read a `TIME` argument as ms since the epoch; `now` is the current time (ms).
pub fn parse_time(text: &str, now: i64) -> Result<i64, String> {
    let t = text.trim();
    if t == "now" {
        return Ok(now);
    }
    if let Some(rel) = t.strip_prefix('-') {
        let split = rel.find(|c: char| !c.is_ascii_digit()).unwrap_or(rel.len());
        let (n, unit) = rel.split_at(split);
        let n: i64 = n.parse().map_err(|_| bad(text))?;
        let unit_ms = match unit {
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 7 * 86_400_000,
            _ => return Err(bad(text)),
        };
        return n
            .checked_mul(unit_ms)
            .map(|d| now - d)
            .ok_or_else(|| bad(text));
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(t) {
        return Ok(t.timestamp_millis());
    }
    for format in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(t, format) {
            return Ok(t.and_utc().timestamp_millis());
        }
    }
    if let Ok(d) = NaiveDate::parse_from_str(t, "%Y-%m-%d") {
        return Ok(d
            .and_hms_opt(0, 0, 0)
            .expect("midnight exists")
            .and_utc()
            .timestamp_millis());
    }
    Err(bad(text))
}

fn bad(text: &str) -> String {
    format!(
        "cannot read the time {text:?}: use RFC 3339 (2026-11-29T10:00:00Z), a date \
         (2026-11-29, midnight UTC), or a time relative to now (-90s, -30m, -2h, -1d, -1w)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_764_410_400_000; // 2025-11-29T10:00:00Z

    #[test]
    fn absolute_times() {
        assert_eq!(parse_time("2025-11-29T10:00:00Z", 0), Ok(NOW));
        assert_eq!(parse_time("2025-11-29T12:00:00+02:00", 0), Ok(NOW));
        assert_eq!(parse_time("2025-11-29T10:00:00", 0), Ok(NOW));
        assert_eq!(parse_time("2025-11-29 10:00", 0), Ok(NOW));
        assert_eq!(parse_time("2025-11-29", 0), Ok(NOW - 10 * 3_600_000));
    }

    #[test]
    fn relative_times() {
        assert_eq!(parse_time("now", NOW), Ok(NOW));
        assert_eq!(parse_time("-2h", NOW), Ok(NOW - 7_200_000));
        assert_eq!(parse_time("-90s", NOW), Ok(NOW - 90_000));
        assert_eq!(parse_time("-1w", NOW), Ok(NOW - 604_800_000));
        assert!(parse_time("-2x", NOW).is_err());
        assert!(parse_time("-h", NOW).is_err());
        assert!(parse_time("yesterday", NOW).is_err());
    }
}
