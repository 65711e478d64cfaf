//! Durations as people write them (`500ms`, `2s`, `1m30s`, `2h`), as used in
//! URLs and on the command line: `humantime`'s grammar, bounded to one day.

use std::time::Duration;

use lock_core::LockError;

/// The longest duration accepted anywhere in distlock's URLs and CLI: one day
/// (the same bound as [`lock_core::MAX_TTL`]).
const MAX: Duration = Duration::from_secs(24 * 60 * 60);

/// Parses a duration written as numbers with units, in `humantime`'s
/// grammar: `500ms`, `2s`, `1.5s`, `1m30s`, `10min`, `2h`, `1h 15m`, `1d`
/// (units `ns`, `us`, `ms`, `s`/`sec`, `m`/`min`, `h`/`hr`, `d`, and their
/// long forms). `0` alone is zero; any other number needs its unit. At most
/// one day. An error is [`lock_core::LockErrorKind::InvalidArgument`].
///
/// ```
/// use std::time::Duration;
/// assert_eq!(distlock::parse_duration("500ms").unwrap(), Duration::from_millis(500));
/// assert_eq!(distlock::parse_duration("1m30s").unwrap(), Duration::from_secs(90));
/// assert_eq!(distlock::parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
/// assert!(distlock::parse_duration("5").is_err()); // no unit
/// assert!(distlock::parse_duration("25h").is_err()); // over one day
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, LockError> {
    let bad = |why: String| {
        LockError::invalid(format!(
            "invalid duration {text:?}: {why} (write e.g. 500ms, 2s, 1m30s, 2h)"
        ))
    };
    let d = humantime::parse_duration(text.trim()).map_err(|e| bad(e.to_string()))?;
    if d > MAX {
        return Err(bad("longer than one day".into()));
    }
    Ok(d)
}

/// Formats a duration the way [`parse_duration`] reads it (`1500ms` ->
/// `1s 500ms`), for messages.
pub(crate) fn format_duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_people_write() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("500ms").unwrap(), ms(500));
        assert_eq!(parse_duration("2s").unwrap(), ms(2000));
        assert_eq!(parse_duration(" 1.25s ").unwrap(), ms(1250));
        assert_eq!(parse_duration("0.5ms").unwrap(), Duration::from_micros(500));
        assert_eq!(parse_duration("3m").unwrap(), ms(180_000));
        assert_eq!(parse_duration("2min").unwrap(), ms(120_000));
        assert_eq!(parse_duration("1m30s").unwrap(), ms(90_000));
        assert_eq!(parse_duration("1h 15m").unwrap(), ms(4_500_000));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("24h").unwrap(), Duration::from_secs(86_400));
        assert_eq!(parse_duration("1d").unwrap(), Duration::from_secs(86_400));
    }

    #[test]
    fn rejects_bad_durations() {
        for bad in [
            "", "5", "s", "-1s", "1..5s", "5sec!", "2d", "25h", "1e3s", "NaNs", "soon", "forever",
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
        for d in ["500ms", "2s", "90s", "1500ms", "1h 1ms"] {
            let parsed = parse_duration(d).unwrap();
            assert_eq!(parse_duration(&format_duration(parsed)).unwrap(), parsed);
        }
        assert_eq!(format_duration(Duration::from_millis(1500)), "1s 500ms");
        assert_eq!(format_duration(Duration::from_secs(90)), "1m 30s");
    }
}
