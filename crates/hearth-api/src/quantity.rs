//! Kubernetes `Quantity` strings as numbers, with apimachinery's grammar: an optional
//! sign, digits with an optional decimal point, then a binary suffix (`Ki` … `Ei`), a
//! decimal suffix (`n`, `u`, `m`, none, `k`, `M`, `G`, `T`, `P`, `E`) or a decimal
//! exponent (`e3`, `E-2`). Anyone who may create a Workload writes these, so a string
//! outside the grammar, or a number too large for 64 bits, is `None`, never a guess.
//! Pure.

/// Longest mantissa read, in digits: more cannot be exact in 128 bits anyway.
const MAX_DIGITS: usize = 30;

/// A quantity's value as a whole number and whether the division that made it left a
/// remainder (the value had a fractional part).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Whole {
    negative: bool,
    /// The magnitude, rounded down.
    floor: i128,
    exact: bool,
}

fn parse(s: &str) -> Option<Whole> {
    let s = s.trim();
    let (negative, rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_len = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_len);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() || frac.contains('.') {
        return None;
    }
    let digits = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > MAX_DIGITS {
        return None;
    }
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    let (binary, decimal) = suffix_scale(suffix)?;
    let exponent = decimal - i32::try_from(frac.len()).ok()?;
    let scaled = mantissa.checked_mul(1i128.checked_shl(binary)?)?;
    let (floor, exact) = if exponent >= 0 {
        (
            scaled.checked_mul(10i128.checked_pow(u32::try_from(exponent).ok()?)?)?,
            true,
        )
    } else {
        match 10i128.checked_pow(exponent.unsigned_abs()) {
            Some(divisor) => (scaled / divisor, scaled % divisor == 0),
            // Smaller than any whole unit.
            None => (0, scaled == 0),
        }
    };
    Some(Whole {
        negative,
        floor,
        exact,
    })
}

/// The binary shift and decimal exponent a suffix stands for.
fn suffix_scale(suffix: &str) -> Option<(u32, i32)> {
    Some(match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        _ => {
            let exponent = suffix.strip_prefix(['e', 'E'])?;
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if digits.is_empty() || digits.len() > 3 || !digits.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            (0, exponent.parse().ok()?)
        }
    })
}

/// The quantity as a whole number, only when it is one (`100`, `100000m`, `1k`);
/// `None` for a fraction (`1500m`), a string outside the grammar or a value beyond 64 bits.
pub fn exact_i64(s: &str) -> Option<i64> {
    let w = parse(s)?;
    if !w.exact {
        return None;
    }
    i64::try_from(if w.negative { -w.floor } else { w.floor }).ok()
}

/// The quantity rounded up to a whole number, as apimachinery's `Quantity.Value()` does
/// and as Kueue counts every resource but CPU: `500m` is 1, `99500m` is 100. `None` for
/// a string outside the grammar or a value beyond 64 bits.
pub fn ceil_i64(s: &str) -> Option<i64> {
    let w = parse(s)?;
    let value = match (w.negative, w.exact) {
        (false, false) => w.floor.checked_add(1)?,
        (false, true) => w.floor,
        (true, _) => -w.floor,
    };
    i64::try_from(value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_in_every_notation() {
        for (s, v) in [
            ("100", 100),
            ("+100", 100),
            ("-3", -3),
            ("100000m", 100),
            ("0.1k", 100),
            ("1e2", 100),
            ("1E2", 100),
            ("10000e-2", 100),
            ("1Ki", 1024),
            ("2Ei", 2 << 60),
            ("1G", 1_000_000_000),
            ("1E", 1_000_000_000_000_000_000),
            ("100.", 100),
            ("0", 0),
            ("000100", 100),
        ] {
            assert_eq!(exact_i64(s), Some(v), "{s}");
            assert_eq!(ceil_i64(s), Some(v), "{s}");
        }
    }

    #[test]
    fn fractions_are_not_exact_and_round_up_as_kueue_counts_them() {
        for (s, ceil) in [
            ("1500m", 2),
            ("99500m", 100),
            ("500m", 1),
            ("1n", 1),
            (".5", 1),
            ("0.5", 1),
            ("1e-40", 1),
        ] {
            assert_eq!(exact_i64(s), None, "{s}");
            assert_eq!(ceil_i64(s), Some(ceil), "{s}");
        }
        assert_eq!(ceil_i64("-1500m"), Some(-1));
    }

    #[test]
    fn anything_outside_the_grammar_or_64_bits_is_unreadable() {
        for s in [
            "",
            "-",
            ".",
            "1.2.3",
            "1x",
            "1Ki2",
            "1e",
            "1e1234",
            "ten",
            "1 k",
            "1kk",
            "99999999999999999999999999999999",
            "9999999999999999999",
            "16Ei",
            "1e19",
        ] {
            assert_eq!(ceil_i64(s), None, "{s:?}");
            assert_eq!(exact_i64(s), None, "{s:?}");
        }
        assert_eq!(exact_i64("8Ei"), None, "2^63 is one past i64::MAX");
        assert_eq!(exact_i64("7Ei"), Some(7 << 60));
    }
}
