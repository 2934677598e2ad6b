//! Durations as people write them: `30m`, `4h`, `2d` in a FournosCluster, `30s` or `7d`
//! in a controller flag. One grammar for both.

use std::time::Duration;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DurationError {
    #[error("duration is empty: write a number followed by m, h or d, e.g. 30m, 4h, 2d")]
    Empty,
    #[error(
        "{0:?} has no unit: write a number followed by m (minutes), h (hours) or d (days), e.g. 30m"
    )]
    MissingUnit(String),
    #[error(
        "{input:?} has unit {unit:?}: only m (minutes), h (hours) and d (days) are accepted, e.g. 30m, 4h, 2d"
    )]
    UnknownUnit { input: String, unit: String },
    #[error("{0:?} does not start with a whole number: write e.g. 30m, 4h, 2d")]
    NotANumber(String),
    #[error("{0:?} is zero: a duration must be at least 1m")]
    Zero(String),
    #[error("{0:?} is too long")]
    TooLong(String),
}

/// Hearth's one duration grammar: surrounding whitespace, a whole number, a unit (`s`,
/// `m`, `h` or `d`). Returns the digits and the rest (the unit, or what stands there
/// instead). The FournosCluster fields and the controllers' flags both read durations
/// with it; they differ only in the units and values they then accept
/// ([`parse_duration`], [`parse_flag_duration`]).
fn split(input: &str) -> (&str, &str) {
    let s = input.trim();
    let at = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s.split_at(at)
}

/// Seconds per unit of the grammar.
fn unit_seconds(unit: &str) -> Option<u64> {
    match unit {
        "s" => Some(1),
        "m" => Some(60),
        "h" => Some(3_600),
        "d" => Some(86_400),
        _ => None,
    }
}

/// Parses a FournosCluster duration (`ttl`, `gpuDiscoveryInterval`): the grammar with
/// unit `m`, `h` or `d` (the CRD's `^[0-9]+(m|h|d)$`), at least `1m`, at most 100 years.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    if input.trim().is_empty() {
        return Err(DurationError::Empty);
    }
    let (digits, unit) = split(input);
    if digits.is_empty() {
        return Err(DurationError::NotANumber(input.to_owned()));
    }
    let seconds_per_unit = match unit {
        "" => return Err(DurationError::MissingUnit(input.to_owned())),
        // A person's lock or probe interval in seconds is a typo; the CRD refuses it too.
        "s" => None,
        other => unit_seconds(other),
    }
    .ok_or_else(|| DurationError::UnknownUnit {
        input: input.to_owned(),
        unit: unit.to_owned(),
    })?;
    // Capped at 100 years: longer is a typo, and it keeps timestamp arithmetic safe.
    const MAX_SECS: u64 = 100 * 365 * 86_400;
    let n: u64 = digits
        .parse()
        .map_err(|_| DurationError::TooLong(input.to_owned()))?;
    let secs = n
        .checked_mul(seconds_per_unit)
        .filter(|s| *s <= MAX_SECS)
        .ok_or_else(|| DurationError::TooLong(input.to_owned()))?;
    if secs == 0 {
        return Err(DurationError::Zero(input.to_owned()));
    }
    Ok(Duration::from_secs(secs))
}

/// Why a controller flag's duration could not be parsed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FlagDurationError {
    #[error("expected <number><unit> with unit s, m, h or d (e.g. 7d), found no unit")]
    MissingUnit,
    #[error("expected <number><unit> (e.g. 7d), found no number")]
    MissingNumber,
    #[error("unknown unit {0:?}: use s, m, h or d")]
    UnknownUnit(String),
    #[error("duration is too large")]
    TooLarge,
}

/// Parses a controller flag's duration (e.g. an expiry warning window): the whole
/// grammar, any unit, zero included.
pub fn parse_flag_duration(input: &str) -> Result<Duration, FlagDurationError> {
    let (digits, unit) = split(input);
    if unit.is_empty() {
        return Err(FlagDurationError::MissingUnit);
    }
    if digits.is_empty() {
        return Err(FlagDurationError::MissingNumber);
    }
    let unit_secs =
        unit_seconds(unit).ok_or_else(|| FlagDurationError::UnknownUnit(unit.to_owned()))?;
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit_secs))
        .map(Duration::from_secs)
        .ok_or(FlagDurationError::TooLarge)
}

/// Formats a whole number of minutes back into the shortest exact form.
pub fn format_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs.is_multiple_of(86_400) && secs > 0 {
        format!("{}d", secs / 86_400)
    } else if secs.is_multiple_of(3_600) && secs > 0 {
        format!("{}h", secs / 3_600)
    } else if secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_minutes_hours_days() {
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("4h"), Ok(Duration::from_secs(4 * 3600)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(2 * 86_400)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration(" 5m "), Ok(Duration::from_secs(300)));
    }

    #[test]
    fn rejects_with_a_reason() {
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
        assert_eq!(
            parse_duration("30"),
            Err(DurationError::MissingUnit("30".into()))
        );
        assert!(
            matches!(parse_duration("30s"), Err(DurationError::UnknownUnit { unit, .. }) if unit == "s")
        );
        assert!(matches!(
            parse_duration("1h30m"),
            Err(DurationError::UnknownUnit { .. })
        ));
        assert_eq!(
            parse_duration("h"),
            Err(DurationError::NotANumber("h".into()))
        );
        assert_eq!(
            parse_duration("-5m"),
            Err(DurationError::NotANumber("-5m".into()))
        );
        assert_eq!(parse_duration("0m"), Err(DurationError::Zero("0m".into())));
        assert_eq!(
            parse_duration("99999999999999999999d"),
            Err(DurationError::TooLong("99999999999999999999d".into()))
        );
        assert_eq!(
            parse_duration("36501d"),
            Err(DurationError::TooLong("36501d".into()))
        );
    }

    #[test]
    fn error_messages_say_what_to_write() {
        let msg = parse_duration("30s").unwrap_err().to_string();
        assert!(msg.contains("m (minutes), h (hours) and d (days)"), "{msg}");
    }

    #[test]
    fn flags_take_the_whole_grammar() {
        assert_eq!(parse_flag_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_flag_duration(" 0d "), Ok(Duration::ZERO));
        assert_eq!(parse_flag_duration(""), Err(FlagDurationError::MissingUnit));
        assert_eq!(
            parse_flag_duration("-5m"),
            Err(FlagDurationError::MissingNumber)
        );
        assert_eq!(
            parse_flag_duration("99999999999999999999d"),
            Err(FlagDurationError::TooLarge)
        );
        // Everything a FournosCluster accepts, a flag accepts as the same duration.
        for s in ["1m", "30m", "4h", "2d", "36500d", " 5m "] {
            assert_eq!(parse_flag_duration(s).ok(), parse_duration(s).ok(), "{s}");
        }
    }

    #[test]
    fn formats_round_trip() {
        for s in ["30m", "4h", "2d", "90m", "25h"] {
            assert_eq!(format_duration(parse_duration(s).unwrap()), s);
        }
    }
}
