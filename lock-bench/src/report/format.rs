//! Numbers and messages as the tables show them.

use crate::stats::Summary;

/// Milliseconds with 3 significant digits.
pub fn fmt_ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// A rate, rounded, with thousands separators.
pub fn fmt_rate(v: f64) -> String {
    if v < 10.0 {
        return format!("{v:.1}");
    }
    let n = v.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A latency of `s` in ms, or `-` when there is none.
pub(super) fn opt_ms(s: Option<&Summary>, f: impl Fn(&Summary) -> f64) -> String {
    s.map(|s| fmt_ms(f(s))).unwrap_or_else(|| "-".into())
}

/// A ratio, `1.23x`.
pub(super) fn ratio(v: f64) -> String {
    format!("{v:.2}x")
}

/// A message on one table line: no line breaks or cell separators, at
/// most 600 characters.
pub(super) fn one_line(s: &str) -> String {
    let s = s.replace(['\n', '|'], " ");
    match s.char_indices().nth(600) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_ms(0.21349), "0.213");
        assert_eq!(fmt_ms(2.1349), "2.13");
        assert_eq!(fmt_ms(21.349), "21.3");
        assert_eq!(fmt_ms(213.49), "213");
        assert_eq!(fmt_rate(4921.4), "4,921");
        assert_eq!(fmt_rate(1234567.0), "1,234,567");
        assert_eq!(fmt_rate(999.0), "999");
        assert_eq!(fmt_rate(2.25), "2.2");
    }
}
