//! Text Hearth did not write (a target cluster's answers, Kueue's messages, Events,
//! fields anyone with write access sets) on its way to a person: a terminal, a log
//! line, an Event, a status. [`bounded`] is the one function that makes it safe to show.

/// The ellipsis [`bounded`] puts where it cut.
pub const CUT: char = '…';

/// Whether `c` is a control (`Cc`: C0, DEL, C1) or format (`Cf`) character: what
/// `^[^\p{Cc}\p{Cf}]*$` refuses in the CRD. Controls drive a terminal (escape sequences,
/// the bell, a carriage return that overwrites a line); format characters are invisible
/// but reorder or hide what is shown around them (bidirectional overrides and isolates,
/// zero-width characters, tag characters).
pub fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{ad}'
                | '\u{600}'..='\u{605}'
                | '\u{61c}'
                | '\u{6dd}'
                | '\u{70f}'
                | '\u{890}'..='\u{891}'
                | '\u{8e2}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2060}'..='\u{206f}'
                | '\u{feff}'
                | '\u{fff9}'..='\u{fffb}'
                | '\u{110bd}'
                | '\u{110cd}'
                | '\u{13430}'..='\u{1343f}'
                | '\u{1bca0}'..='\u{1bca3}'
                | '\u{1d173}'..='\u{1d17a}'
                | '\u{e0001}'
                | '\u{e0020}'..='\u{e007f}'
        )
}

/// At most `max_chars + 1` characters of `text`, as they are: what a cache keeps of text
/// someone else wrote in a field whose limit is `max_chars` (an object stored before the
/// CRD set it). Whoever reads it still sees that it is too long, and [`bounded`] with
/// `max_chars` shows it exactly as it would show the whole.
pub fn capped(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars.saturating_add(1)) {
        Some((cut, _)) => text[..cut].to_owned(),
        None => text.to_owned(),
    }
}

/// `text` as one line of at most `max_chars` characters, plus [`CUT`] when it was longer.
/// A line break or tab (including the Unicode line and paragraph separators) becomes a
/// space, so the text cannot forge a line of its own; every other [hidden](is_hidden)
/// character becomes U+FFFD, so a reader sees that something was there without a
/// terminal acting on it.
pub fn bounded(text: &str, max_chars: usize) -> String {
    shown(text, max_chars, usize::MAX)
}

/// [`bounded`], in at most `max_bytes` bytes of UTF-8 with the [`CUT`]: for a field whose
/// limit is counted in bytes (an Event's note takes 1 KiB), where `max_bytes` characters
/// could take four times as many. No character is split.
pub fn bounded_bytes(text: &str, max_bytes: usize) -> String {
    shown(text, usize::MAX, max_bytes)
}

/// `text` [`bounded`] to `max_chars`, in double quotes, written as a Rust string literal:
/// a `"` or `\` in it is escaped, so the quotation cannot seem to end early, and so is a
/// character that would not be seen for what it is (a no-break space is `\u{a0}`). For a
/// name or words someone else wrote, set apart from the sentence around them.
pub fn quoted(text: &str, max_chars: usize) -> String {
    format!("{:?}", bounded(text, max_chars))
}

/// `text` as it is when it is a plain name (not empty, at most `max_chars` long, only
/// ASCII letters, digits and `punctuation`), else [`quoted`]: most names read better bare.
pub fn plain_or_quoted(text: &str, max_chars: usize, punctuation: &[char]) -> String {
    let plain = !text.is_empty()
        && text.len() <= max_chars
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || punctuation.contains(&c));
    if plain {
        text.to_owned()
    } else {
        quoted(text, max_chars)
    }
}

/// `text` as [`bounded`] shows it, cut before it passes `max_chars` characters or, with the
/// cut, `max_bytes` bytes.
fn shown(text: &str, max_chars: usize, max_bytes: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_chars.saturating_mul(4)).min(max_bytes));
    // The longest prefix so far that leaves room for the cut.
    let mut cut_at = 0;
    for (count, c) in text.chars().enumerate() {
        let c = match c {
            '\t' | '\n' | '\u{b}' | '\u{c}' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}' => ' ',
            c if is_hidden(c) => char::REPLACEMENT_CHARACTER,
            c => c,
        };
        if count == max_chars || out.len() + c.len_utf8() > max_bytes {
            out.truncate(cut_at);
            if out.len() + CUT.len_utf8() <= max_bytes {
                out.push(CUT);
            }
            return out;
        }
        out.push(c);
        if out.len() + CUT.len_utf8() <= max_bytes {
            cut_at = out.len();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cap_keeps_enough_to_show_the_cut() {
        let long = "é\n".repeat(2000);
        let kept = capped(&long, 1024);
        assert_eq!(kept.chars().count(), 1025);
        assert_eq!(bounded(&kept, 1024), bounded(&long, 1024));
        assert_eq!(capped("abc", 3), "abc");
        assert_eq!(capped("abcd", 2), "abc");
    }

    /// Every character a terminal or a bidi-aware viewer acts on, one of each kind.
    const HOSTILE: &str = "a\u{1b}[31mred\u{7}\u{0}\u{7f}\u{9b}2J\u{85}\r\nb\u{202e}c\u{2066}\u{200b}\u{feff}\u{e0041}\u{2028}d";

    #[test]
    fn nothing_hidden_survives() {
        let shown = bounded(HOSTILE, 1000);
        assert!(!shown.chars().any(is_hidden), "{shown:?}");
        assert!(!shown.contains(['\u{2028}', '\u{2029}']), "{shown:?}");
        assert_eq!(
            shown,
            "a\u{fffd}[31mred\u{fffd}\u{fffd}\u{fffd}\u{fffd}2J   b\u{fffd}c\u{fffd}\u{fffd}\u{fffd}\u{fffd} d"
        );
    }

    #[test]
    fn plain_text_is_kept() {
        let text = "Sentinel cluster-lock-a waits: insufficient unused quota (ü, 東京, 🙂)";
        assert_eq!(bounded(text, 1000), text);
    }

    #[test]
    fn length_is_counted_in_characters() {
        assert_eq!(bounded("東京東京", 2), "東京…");
        assert_eq!(bounded("東京", 2), "東京");
        assert_eq!(bounded("", 0), "");
        assert_eq!(bounded("x", 0), "…");
        let long = "é".repeat(10_000);
        assert_eq!(bounded(&long, 100).chars().count(), 101);
    }

    #[test]
    fn a_byte_limit_never_splits_a_character_and_counts_the_cut() {
        // An Event's note: 1 KiB. Two-, three- and four-byte characters, and controls
        // that grow into three-byte U+FFFD.
        for long in [
            "é".repeat(1000),
            "東".repeat(400),
            "🙂".repeat(300),
            "\u{1b}".repeat(1000),
            format!("a{}", "é".repeat(512)),
        ] {
            let cut = bounded_bytes(&long, 1024);
            assert!(cut.len() <= 1024, "{} bytes", cut.len());
            assert!(cut.len() > 1024 - 4 - CUT.len_utf8(), "{} bytes", cut.len());
            assert!(cut.ends_with(CUT));
            assert!(!cut.chars().any(is_hidden));
        }
        let exact = "é".repeat(512);
        assert_eq!(bounded_bytes(&exact, 1024), exact);
        assert_eq!(bounded_bytes("a\nb", 3), "a b");
        assert_eq!(bounded_bytes("abcd", 3), "…");
        assert_eq!(bounded_bytes("abcd", 2), "");
    }

    #[test]
    fn a_quotation_cannot_end_early_or_hide_anything() {
        assert_eq!(quoted("kubeconfig-a", 64), "\"kubeconfig-a\"");
        assert_eq!(quoted("東京 🙂", 64), "\"東京 🙂\"");
        assert_eq!(quoted("a\" b\\", 64), r#""a\" b\\""#);
        assert_eq!(quoted("abcd", 2), "\"ab…\"");
        let shown = quoted(HOSTILE, 1000);
        assert!(!shown.chars().any(is_hidden), "{shown:?}");
        assert!(shown.starts_with("\"a\u{fffd}[31mred"), "{shown}");
    }

    #[test]
    fn a_plain_name_is_shown_bare() {
        let punctuation = ['-', '.'];
        assert_eq!(plain_or_quoted("gpu-a.1", 8, &punctuation), "gpu-a.1");
        for odd in ["", "gpu_a", "gpu a", "gpu-a.1-x", "é"] {
            assert_eq!(
                plain_or_quoted(odd, 8, &punctuation),
                quoted(odd, 8),
                "{odd:?}"
            );
        }
    }

    #[test]
    fn hidden_is_the_crds_owner_pattern() {
        for c in [
            '\u{0}', '\u{1f}', '\u{7f}', '\u{80}', '\u{9f}', '\u{202a}', '\u{2069}',
        ] {
            assert!(is_hidden(c), "{c:?}");
        }
        for c in [' ', 'a', '\u{a0}', '\u{fffd}', '\u{2028}'] {
            assert!(!is_hidden(c), "{c:?}");
        }
    }
}
