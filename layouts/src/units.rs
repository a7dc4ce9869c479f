//! Sizes and durations as people write them (`128MiB`, `30s`), each kind
//! with a stated maximum.
//!
//! Every size and duration compactd takes from a person (a flag, the
//! configuration file, a policy or job definition) is parsed here. A value
//! past its maximum is refused with the maximum in the message; nothing is
//! wrapped or saturated on the way into the tree, where durations are
//! stored as `u64` milliseconds (a duration of 2^64 ms or more used to be
//! stored modulo 2^64: a session timeout of 18446744073709552 s became
//! 384 ms). The caller names the flag or key the value came from.

use std::time::Duration;

/// The longest duration compactd takes: 10 years (`3650d`), far past any
/// timeout, interval or retention a cluster needs, and far below what the
/// tree's millisecond fields and the monotonic clock can hold.
pub const MAX_DURATION: Duration = Duration::from_secs(3650 * 86_400);

/// How [`MAX_DURATION`] is written in messages and the docs (docs/cli.md).
pub const MAX_DURATION_SHOWN: &str = "3650d (10 years)";

/// The largest size compactd takes (`--io-limit`, `min-small-bytes`, …):
/// 1 TiB.
pub const MAX_SIZE: u64 = 1 << 40;

/// The largest target size of an output file: 64 GiB. Outputs are streamed
/// to S3 in parts of 8 MiB, and a multipart upload has at most 10,000
/// parts (78 GiB); the last output of a partition may be a fifth over the
/// target.
pub const MAX_TARGET_SIZE: u64 = 64 << 30;

/// `1099511627776` → `1 TiB`, `68719476736` → `64 GiB`: a size for messages.
pub fn show_size(n: u64) -> String {
    for (unit, m) in [("TiB", 1u64 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if n >= m && n.is_multiple_of(m) {
            return format!("{} {unit}", n / m);
        }
    }
    format!("{n} bytes")
}

/// Parses `1048576`, `64KiB`, `128MiB`, `1GiB`, `1TiB`: positive and at
/// most [`MAX_SIZE`].
pub fn parse_size(s: &str) -> Result<u64, String> {
    parse_size_max(s, MAX_SIZE)
}

/// [`parse_size`] up to [`MAX_TARGET_SIZE`].
pub fn parse_target_size(s: &str) -> Result<u64, String> {
    parse_size_max(s, MAX_TARGET_SIZE)
}

/// Parses a size: positive and at most `max`.
pub fn parse_size_max(s: &str, max: u64) -> Result<u64, String> {
    let s = s.trim();
    let (num, mul) = [("TiB", 1u64 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1)]
        .iter()
        .find_map(|(suffix, m)| s.strip_suffix(suffix).map(|n| (n, *m)))
        .unwrap_or((s, 1));
    let num = num.trim();
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{s:?} is not a size (write 1048576, 64KiB, 128MiB, 1GiB)"));
    }
    // Digits only: a parse failure is a number past 64 bits, over any max.
    let n = num.parse::<u64>().ok().and_then(|n| n.checked_mul(mul));
    match n {
        Some(0) => Err("a size must be positive".into()),
        Some(n) if n <= max => Ok(n),
        _ => Err(format!("{s:?} is over the maximum of {}", show_size(max))),
    }
}

/// A size given as a number of bytes (a TOML integer): positive and at
/// most `max`.
pub fn check_size(n: u64, max: u64) -> Result<u64, String> {
    match n {
        0 => Err("a size must be positive".into()),
        n if n > max => Err(format!("{n} is over the maximum of {}", show_size(max))),
        n => Ok(n),
    }
}

/// Parses `500ms`, `10s`, `1h30m`, `30d`: positive and at most
/// [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration_or_zero(s)?;
    if d.is_zero() {
        return Err("a duration must be positive".into());
    }
    Ok(d)
}

/// [`parse_duration`] that also takes a zero (`0s`: none, for ever).
pub fn parse_duration_or_zero(s: &str) -> Result<Duration, String> {
    let d = match humantime::parse_duration(s.trim()) {
        Ok(d) => d,
        // Past what a `Duration` holds: over the maximum, say so.
        Err(humantime::DurationError::NumberOverflow) => {
            return Err(format!("{s:?} is over the maximum of {MAX_DURATION_SHOWN}"))
        }
        Err(e) => return Err(format!("{s:?} is not a duration: {e} (write durations like 500ms, 10s, 1h, 30d)")),
    };
    check_duration(d).map_err(|_| format!("{s:?} is over the maximum of {MAX_DURATION_SHOWN}"))?;
    Ok(d)
}

/// Refuses a duration over [`MAX_DURATION`].
pub fn check_duration(d: Duration) -> Result<Duration, String> {
    if d > MAX_DURATION {
        return Err(format!("{} ms is over the maximum of {MAX_DURATION_SHOWN}", d.as_millis()));
    }
    Ok(d)
}

/// A duration as the tree stores it: milliseconds. Never wraps: every
/// duration that reaches the tree went through [`check_duration`], and a
/// longer one is stored as the maximum.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.min(MAX_DURATION).as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_have_units_and_a_maximum() {
        assert_eq!(parse_size("128MiB"), Ok(128 << 20));
        assert_eq!(parse_size(" 4096 "), Ok(4096));
        assert_eq!(parse_size("1TiB"), Ok(MAX_SIZE));
        assert_eq!(parse_target_size("64GiB"), Ok(MAX_TARGET_SIZE));
        let e = parse_target_size("65GiB").unwrap_err();
        assert!(e.contains("65GiB") && e.contains("maximum of 64 GiB"), "{e}");
        // 2^64 and past it: refused with the maximum, never wrapped.
        for s in ["18446744073709551616", "18446744073709551615", "17179869184GiB", "99999999999999999999999TiB"] {
            let e = parse_target_size(s).unwrap_err();
            assert!(e.contains("maximum of 64 GiB"), "{s}: {e}");
        }
        assert!(parse_size("0").unwrap_err().contains("positive"));
        assert!(parse_size("x").unwrap_err().contains("not a size"));
        assert!(parse_size("-1").unwrap_err().contains("not a size"));
        assert!(parse_size("1.5GiB").unwrap_err().contains("not a size"));
        assert_eq!(
            check_size(MAX_TARGET_SIZE + 1, MAX_TARGET_SIZE).unwrap_err(),
            "68719476737 is over the maximum of 64 GiB"
        );
        assert_eq!(show_size(1 << 40), "1 TiB");
        assert_eq!(show_size(4 * 1024 * 1024 + 1), "4194305 bytes");
    }

    #[test]
    fn durations_have_a_maximum_instead_of_wrapping() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("3650d"), Ok(MAX_DURATION));
        // 2^64 ms is 18446744073709551.616 s: these used to wrap.
        for s in ["18446744073709552s", "3651d", "18446744073709551615s", "99999999999999999999999s"] {
            let e = parse_duration(s).unwrap_err();
            assert!(e.contains(s) && e.contains("maximum of 3650d"), "{s}: {e}");
        }
        assert!(parse_duration("0s").unwrap_err().contains("positive"));
        assert_eq!(parse_duration_or_zero("0s"), Ok(Duration::ZERO));
        assert!(parse_duration("soon").unwrap_err().contains("not a duration"));
        assert_eq!(millis(Duration::from_secs(u64::MAX)), millis(MAX_DURATION));
        assert_eq!(millis(Duration::from_millis(384)), 384);
    }
}
