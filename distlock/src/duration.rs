//! Human durations (`500ms`, `2s`, `1.5m`) as used in URLs and on the command line.

use std::time::Duration;

use lock_core::LockError;

/// The longest duration accepted anywhere in distlock's URLs and CLI: one day
/// (the same bound as [`lock_core::MAX_TTL`]).
const MAX: Duration = Duration::from_secs(24 * 60 * 60);

/// Parses a duration written as a number and a unit: `ms`, `s`, `m` or `h`
/// (`500ms`, `2s`, `1.5s`, `10m`, `1h`). `0` alone is accepted (zero); any
/// other number needs its unit. At most one day.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(distlock::parse_duration("500ms").unwrap(), Duration::from_millis(500));
/// assert_eq!(distlock::parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
/// assert!(distlock::parse_duration("5").is_err()); // no unit
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, LockError> {
    let s = text.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let bad = |why: &str| {
        LockError::invalid(format!(
            "invalid duration {text:?}: {why} (write e.g. 500ms, 2s, 1.5m, 1h)"
        ))
    };
    if number.is_empty() {
        return Err(bad("it does not start with a number"));
    }
    let nanos_per_unit: f64 = match unit {
        "ms" => 1e6,
        "s" => 1e9,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        "" => return Err(bad("the unit is missing")),
        _ => return Err(bad("unknown unit")),
    };
    if number.starts_with('.') || number.ends_with('.') || number.matches('.').count() > 1 {
        return Err(bad("malformed number"));
    }
    let value: f64 = number.parse().map_err(|_| bad("malformed number"))?;
    let nanos = value * nanos_per_unit;
    if !nanos.is_finite() || nanos > MAX.as_nanos() as f64 {
        return Err(bad("longer than one day"));
    }
    // Round to whole nanoseconds; `1.5ms` is exact, `0.1s` is 100 ms.
    Ok(Duration::from_nanos(nanos.round() as u64))
}

/// Formats a duration the way [`parse_duration`] reads it, for messages.
pub(crate) fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if d.subsec_nanos() % 1_000_000 != 0 {
        format!("{:.3}ms", d.as_secs_f64() * 1000.0)
    } else if ms % 1000 != 0 {
        format!("{ms}ms")
    } else {
        format!("{}s", d.as_secs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("500ms").unwrap(), ms(500));
        assert_eq!(parse_duration("2s").unwrap(), ms(2000));
        assert_eq!(parse_duration(" 1.25s ").unwrap(), ms(1250));
        assert_eq!(parse_duration("0.5ms").unwrap(), Duration::from_micros(500));
        assert_eq!(parse_duration("3m").unwrap(), ms(180_000));
        assert_eq!(parse_duration("2min").unwrap(), ms(120_000));
        assert_eq!(parse_duration("24h").unwrap(), Duration::from_secs(86_400));
    }

    #[test]
    fn rejects_bad_durations() {
        for bad in [
            "", "5", "s", "-1s", "1.s", ".5s", "1..5s", "1.2.3s", "5 s", "5sec", "2d", "25h",
            "1e3s", "NaNs", "inf s",
        ] {
            let err = parse_duration(bad).expect_err(bad);
            assert_eq!(
                err.kind(),
                lock_core::LockErrorKind::InvalidArgument,
                "{bad:?}"
            );
            assert!(err.to_string().contains("invalid duration"), "{err}");
        }
    }

    #[test]
    fn formats_round_trip() {
        for d in ["500ms", "2s", "90s", "1500ms"] {
            let parsed = parse_duration(d).unwrap();
            assert_eq!(parse_duration(&format_duration(parsed)).unwrap(), parsed);
        }
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::from_secs(3)), "3s");
    }
}
