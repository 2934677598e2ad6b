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
    let mut out = String::with_capacity(text.len().min(max_chars.saturating_mul(4)));
    let mut chars = text.chars();
    for c in chars.by_ref().take(max_chars) {
        out.push(match c {
            '\t' | '\n' | '\u{b}' | '\u{c}' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}' => ' ',
            c if is_hidden(c) => char::REPLACEMENT_CHARACTER,
            c => c,
        });
    }
    if chars.next().is_some() {
        out.push(CUT);
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
