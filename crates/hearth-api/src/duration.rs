//! Durations as people write them: `30m`, `4h`, `2d` in a FournosCluster; `90s`, `10m`,
//! `1h30m`, `7d` on a command line (the plugin's `--ttl` and `--timeout`, the controllers'
//! flags). One grammar: terms of a whole number and a unit (`s`, `m`, `h`, `d`). A
//! FournosCluster field holds exactly one term (the CRD's pattern); what a person types
//! may hold several, and [`typed_to_field`] writes it as the one term the field holds.

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
    #[error("{0:?} starts with a zero: write the number without it, e.g. 5m")]
    LeadingZero(String),
    #[error("{0:?} is zero: a duration must be at least 1m")]
    Zero(String),
    #[error("{0:?} is too long: at most five digits (99999m, 99999h or 99999d)")]
    TooLong(String),
}

/// Most digits of a FournosCluster duration (the CRD's `[1-9][0-9]{0,4}`).
const FIELD_MAX_DIGITS: usize = 5;

/// Splits off the leading ASCII digits.
fn split_digits(s: &str) -> (&str, &str) {
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

/// Parses a FournosCluster duration field (`ttl`, `gpuDiscoveryInterval`) exactly as the
/// CRD's ttl pattern `^[1-9][0-9]{0,4}(m|h|d)$` admits it: one term, unit `m`, `h` or `d`
/// (a lock or probe interval in seconds is a typo), no leading zero, no spaces, at most
/// five digits (99999d, about 274 years, is within every timestamp's range). A test holds
/// the pattern and this function to the same answers.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    if input.is_empty() {
        return Err(DurationError::Empty);
    }
    let (digits, unit) = split_digits(input);
    if digits.is_empty() {
        return Err(DurationError::NotANumber(input.to_owned()));
    }
    let seconds_per_unit = match unit {
        "" => return Err(DurationError::MissingUnit(input.to_owned())),
        "m" | "h" | "d" => unit_seconds(unit),
        _ => None,
    }
    .ok_or_else(|| DurationError::UnknownUnit {
        input: input.to_owned(),
        unit: unit.to_owned(),
    })?;
    if digits.bytes().all(|b| b == b'0') {
        return Err(DurationError::Zero(input.to_owned()));
    }
    if digits.starts_with('0') {
        return Err(DurationError::LeadingZero(input.to_owned()));
    }
    if digits.len() > FIELD_MAX_DIGITS {
        return Err(DurationError::TooLong(input.to_owned()));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| DurationError::TooLong(input.to_owned()))?;
    Ok(Duration::from_secs(n * seconds_per_unit))
}

/// Why a typed duration could not be parsed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FlagDurationError {
    #[error(
        "expected <number><unit> with unit s, m, h or d (e.g. 90s, 10m, 1h30m, 7d), found no unit"
    )]
    MissingUnit,
    #[error("expected <number><unit> (e.g. 90s, 10m, 1h30m, 7d), found no number")]
    MissingNumber,
    #[error("unknown unit {0:?}: use s, m, h or d (e.g. 90s, 10m, 1h30m, 7d)")]
    UnknownUnit(String),
    #[error("duration is too large")]
    TooLarge,
}

/// Parses a duration a person types on a command line (the plugin's `--ttl` and
/// `--timeout`, a controller's flag): one or more terms of a whole number and a unit
/// (`s`, `m`, `h`, `d`), e.g. `90s`, `10m`, `1h30m`, `2d12h`; zero included, surrounding
/// whitespace ignored. Each use then applies its own limits.
pub fn parse_flag_duration(input: &str) -> Result<Duration, FlagDurationError> {
    let mut rest = input.trim();
    if rest.is_empty() {
        return Err(FlagDurationError::MissingUnit);
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let (digits, after) = split_digits(rest);
        let (unit, next) = after.split_at(
            after
                .find(|c: char| c.is_ascii_digit())
                .unwrap_or(after.len()),
        );
        if digits.is_empty() {
            return Err(FlagDurationError::MissingNumber);
        }
        if unit.is_empty() {
            return Err(FlagDurationError::MissingUnit);
        }
        let unit_secs =
            unit_seconds(unit).ok_or_else(|| FlagDurationError::UnknownUnit(unit.to_owned()))?;
        total = digits
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(unit_secs))
            .and_then(|secs| total.checked_add(secs))
            .ok_or(FlagDurationError::TooLarge)?;
        rest = next;
    }
    Ok(Duration::from_secs(total))
}

/// Why a typed duration cannot be stored in a FournosCluster field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TypedFieldError {
    #[error("{input:?}: {error}")]
    Typed {
        input: String,
        error: FlagDurationError,
    },
    #[error(
        "{0:?} is not a whole number of minutes: a FournosCluster counts in m, h or d (e.g. 2m, 1h30m)"
    )]
    NotWholeMinutes(String),
    #[error("{0:?} is zero: a duration must be at least 1m")]
    Zero(String),
    #[error(
        "{input:?} ({field}) is longer than a FournosCluster holds: at most five digits of one unit, e.g. 99999d"
    )]
    TooLong { input: String, field: String },
}

/// A duration as a person types it (`1h30m`, `90m`, `2d`), written as the one term a
/// FournosCluster field holds (`90m`, `2d`): the largest unit that divides it exactly.
/// What it returns always passes [`parse_duration`], as the same duration.
pub fn typed_to_field(input: &str) -> Result<String, TypedFieldError> {
    let d = parse_flag_duration(input).map_err(|error| TypedFieldError::Typed {
        input: input.to_owned(),
        error,
    })?;
    let secs = d.as_secs();
    if secs == 0 {
        return Err(TypedFieldError::Zero(input.to_owned()));
    }
    if !secs.is_multiple_of(60) {
        return Err(TypedFieldError::NotWholeMinutes(input.to_owned()));
    }
    let field = format_duration(d);
    match parse_duration(&field) {
        Ok(_) => Ok(field),
        Err(_) => Err(TypedFieldError::TooLong {
            input: input.to_owned(),
            field,
        }),
    }
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
        assert_eq!(
            parse_duration("99999d"),
            Ok(Duration::from_secs(99_999 * 86_400))
        );
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
        for (input, want) in [
            ("h", DurationError::NotANumber("h".into())),
            ("-5m", DurationError::NotANumber("-5m".into())),
            (" 5m", DurationError::NotANumber(" 5m".into())),
            ("0m", DurationError::Zero("0m".into())),
            ("05m", DurationError::LeadingZero("05m".into())),
            (
                "99999999999999999999d",
                DurationError::TooLong("99999999999999999999d".into()),
            ),
            ("100000d", DurationError::TooLong("100000d".into())),
        ] {
            assert_eq!(parse_duration(input), Err(want), "{input:?}");
        }
    }

    #[test]
    fn error_messages_say_what_to_write() {
        let msg = parse_duration("30s").unwrap_err().to_string();
        assert!(msg.contains("m (minutes), h (hours) and d (days)"), "{msg}");
        let msg = typed_to_field("90s").unwrap_err().to_string();
        assert!(msg.contains("whole number of minutes"), "{msg}");
    }

    #[test]
    fn typed_durations_take_several_terms() {
        assert_eq!(parse_flag_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_flag_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(
            parse_flag_duration("2d12h"),
            Ok(Duration::from_secs(60 * 3600))
        );
        assert_eq!(parse_flag_duration(" 0d "), Ok(Duration::ZERO));
        for (input, want) in [
            ("", FlagDurationError::MissingUnit),
            ("7", FlagDurationError::MissingUnit),
            ("d", FlagDurationError::MissingNumber),
            ("7w", FlagDurationError::UnknownUnit("w".into())),
            ("7dd", FlagDurationError::UnknownUnit("dd".into())),
            ("1h30", FlagDurationError::MissingUnit),
            ("-5m", FlagDurationError::MissingNumber),
            ("1h 30m", FlagDurationError::UnknownUnit("h ".into())),
            ("1.5h", FlagDurationError::UnknownUnit(".".into())),
            ("99999999999999999999d", FlagDurationError::TooLarge),
            (
                "200000000000000d200000000000000d",
                FlagDurationError::TooLarge,
            ),
        ] {
            assert_eq!(parse_flag_duration(input), Err(want), "{input:?}");
        }
        // Everything a FournosCluster accepts, a flag accepts as the same duration.
        for s in ["1m", "30m", "4h", "2d", "99999d"] {
            assert_eq!(parse_flag_duration(s).ok(), parse_duration(s).ok(), "{s}");
        }
    }

    #[test]
    fn typed_durations_are_written_in_one_unit() {
        for (typed, field) in [
            ("1h30m", "90m"),
            ("90m", "90m"),
            ("2d12h", "60h"),
            ("120s", "2m"),
            (" 4h ", "4h"),
            ("24h", "1d"),
            ("99999d", "99999d"),
        ] {
            assert_eq!(typed_to_field(typed).as_deref(), Ok(field), "{typed}");
        }
        assert_eq!(
            typed_to_field("90s"),
            Err(TypedFieldError::NotWholeMinutes("90s".into()))
        );
        assert_eq!(
            typed_to_field("0h"),
            Err(TypedFieldError::Zero("0h".into()))
        );
        assert!(matches!(
            typed_to_field("100000m"),
            Err(TypedFieldError::TooLong { field, .. }) if field == "100000m"
        ));
        assert!(matches!(
            typed_to_field("soon"),
            Err(TypedFieldError::Typed { .. })
        ));
    }

    /// The CRD's `spec.ttl` pattern, as generated from the types.
    fn crd_pattern(field: &str) -> regex::Regex {
        use kube::CustomResourceExt as _;
        let crd = serde_json::to_value(crate::FournosCluster::crd()).unwrap();
        let pattern = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"][field]["pattern"]
            .as_str()
            .unwrap_or_else(|| panic!("no pattern on spec.{field}"))
            .to_owned();
        regex::Regex::new(&pattern).unwrap()
    }

    const TABLE: &[&str] = &[
        "1m", "30m", "4h", "2d", "9999m", "99999m", "99999h", "99999d", "100000m", "0m", "00m",
        "05m", "0005d", "1h30m", "2d12h", "30s", "90s", "120s", "", " ", " 5m", "5m ", "5m\n",
        "5M", "5H", "5", "m", "-5m", "+5m", "1.5h", "5mm", "5 m", "١m", "５m", "1w", "soon", "24h",
        "60m",
    ];

    /// Issue 27: the CRD's pattern and the parser that reads the field agree on every
    /// input of the table; and whatever the plugin writes from a typed duration is a value
    /// the pattern admits, read back as the same duration.
    #[test]
    fn the_crd_pattern_admits_exactly_what_the_parsers_accept() {
        let ttl = crd_pattern("ttl");
        let interval = crd_pattern("gpuDiscoveryInterval");
        for input in TABLE {
            assert_eq!(
                ttl.is_match(input),
                parse_duration(input).is_ok(),
                "spec.ttl pattern and parse_duration disagree on {input:?}"
            );
            // The probe interval's pattern is the same with one digit less.
            if interval.is_match(input) {
                assert!(parse_duration(input).is_ok(), "{input:?}");
            }
            if let Ok(field) = typed_to_field(input) {
                assert!(ttl.is_match(&field), "{input:?} written as {field:?}");
                assert_eq!(
                    parse_duration(&field).ok(),
                    parse_flag_duration(input).ok(),
                    "{input:?} written as {field:?}"
                );
            }
        }
        // Not vacuous: the table holds both answers, and typed forms the field refuses.
        assert!(TABLE.iter().any(|i| ttl.is_match(i)));
        assert!(
            TABLE
                .iter()
                .any(|i| !ttl.is_match(i) && typed_to_field(i).is_ok())
        );
    }

    #[test]
    fn formats_round_trip() {
        for s in ["30m", "4h", "2d", "90m", "25h"] {
            assert_eq!(format_duration(parse_duration(s).unwrap()), s);
        }
    }
}
