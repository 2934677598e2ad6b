//! Durations as people write them in a FournosCluster: `30m`, `4h`, `2d`.

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

/// Parses `<whole number><m|h|d>` (the CRD's `^[0-9]+(m|h|d)$`).
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    if digits.is_empty() {
        return Err(DurationError::NotANumber(input.to_owned()));
    }
    let seconds_per_unit: u64 = match unit {
        "" => return Err(DurationError::MissingUnit(input.to_owned())),
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        other => {
            return Err(DurationError::UnknownUnit {
                input: input.to_owned(),
                unit: other.to_owned(),
            });
        }
    };
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
    fn formats_round_trip() {
        for s in ["30m", "4h", "2d", "90m", "25h"] {
            assert_eq!(format_duration(parse_duration(s).unwrap()), s);
        }
    }
}
