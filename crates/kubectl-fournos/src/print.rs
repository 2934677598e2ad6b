//! What the plugin writes for a person, in each output mode. Most of it quotes the
//! cluster (Event, Kueue and condition messages, owners, names), which anyone with write
//! access there may fill with terminal escape sequences or bidirectional overrides; none
//! of that may reach the terminal as such.
//!
//! - Text: every line goes through [`hearth_api::text::bounded`] (the fields were bounded
//!   already where they were formatted; this is the backstop for the next printer).
//! - JSON and YAML stay faithful (a parser gets the cluster's text back exactly) and show
//!   hidden characters escaped. serde_json escapes only C0 controls, and serde-saphyr only
//!   controls, so DEL, C1 controls (JSON) and format characters (both) are escaped here.

use hearth_api::text::{bounded, is_hidden};
use serde::Serialize;

use crate::cli::Output;

/// Longest line of text output, in characters: far above any line the plugin writes
/// (a `why` paragraph is a few quotes of [`crate::explain`]'s bound), so it only cuts what
/// a field's own bound missed.
pub const MAX_LINE: usize = 16 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum PrintError {
    #[error("cannot write JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("cannot write YAML: {0}")]
    Yaml(#[from] serde_saphyr::SerializeError),
}

/// `value` (json, yaml) or `text` (table) as written to stdout.
pub fn render<T: Serialize>(output: Output, value: &T, text: &str) -> Result<String, PrintError> {
    Ok(match output {
        Output::Table => lines(text),
        Output::Json => format!("{}\n", json(value, Astral::Json)?),
        Output::Yaml => {
            let yaml = serde_saphyr::to_string(value)?;
            if yaml.chars().any(|c| c != '\n' && needs_escape(c)) {
                // serde-saphyr cannot escape a format character. JSON is YAML too, and in
                // its double-quoted strings YAML's escapes mean what they mean in JSON.
                format!("{}\n", json(value, Astral::Yaml)?)
            } else {
                yaml
            }
        }
    })
}

/// `text` line by line through [`bounded`], its line breaks kept.
pub fn lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (line, newline) = match line.strip_suffix('\n') {
            Some(line) => (line, "\n"),
            None => (line, ""),
        };
        out.push_str(&bounded(line, MAX_LINE));
        out.push_str(newline);
    }
    out
}

/// How a character beyond U+FFFF is escaped: a UTF-16 surrogate pair for JSON, `\U`
/// and eight hex digits for YAML, which has no surrogate pairs.
#[derive(Clone, Copy)]
enum Astral {
    Json,
    Yaml,
}

fn needs_escape(c: char) -> bool {
    // U+2028/2029 end a line in JavaScript and YAML, though they are not format characters.
    is_hidden(c) || matches!(c, '\u{2028}' | '\u{2029}')
}

fn json<T: Serialize>(value: &T, astral: Astral) -> Result<String, serde_json::Error> {
    // Outside its strings serde_json's pretty output is only ASCII punctuation, digits,
    // spaces and line breaks, and inside them it escapes C0 controls itself: every hidden
    // character left stands in a string, and is escaped where it stands.
    let mut out = String::new();
    for c in serde_json::to_string_pretty(value)?.chars() {
        match (u16::try_from(u32::from(c)), astral) {
            _ if c == '\n' || !needs_escape(c) => out.push(c),
            (Ok(unit), _) => out.push_str(&format!("\\u{unit:04x}")),
            (Err(_), Astral::Json) => {
                for unit in c.encode_utf16(&mut [0; 2]) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            (Err(_), Astral::Yaml) => out.push_str(&format!("\\U{:08x}", u32::from(c))),
        }
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// One of each kind of character a terminal or a bidi-aware viewer acts on.
    pub const HOSTILE: &str = "x\u{1b}[31mred\u{1b}]0;pwned\u{7}\u{7f}\u{9b}2J\r\u{8}\u{202e}evil\u{2066}\u{200b}\u{feff}\u{e0041}\u{2028}end";

    /// What a terminal must never get: bytes below 0x20 other than a newline, DEL, C1
    /// controls, format characters, line separators.
    pub fn assert_shows_nothing_hidden(out: &str) {
        let bad: Vec<char> = out
            .chars()
            .filter(|&c| c != '\n' && needs_escape(c))
            .collect();
        assert!(bad.is_empty(), "{bad:?} in {out:?}");
    }

    fn value() -> Value {
        json!({ "owner": HOSTILE, "list": [HOSTILE, "plain"], HOSTILE: 1, "n": null })
    }

    #[test]
    fn text_lines_keep_their_breaks_and_lose_everything_hidden() {
        let text = format!("NAME   OWNER\na      {HOSTILE}\n\nlast");
        let out = lines(&text);
        assert_shows_nothing_hidden(&out);
        assert_eq!(out.lines().count(), 4, "{out}");
        assert!(
            out.starts_with("NAME   OWNER\na      x\u{fffd}[31mred"),
            "{out}"
        );
        assert!(out.ends_with("\n\nlast"), "{out}");
        assert_eq!(
            lines(&"y".repeat(MAX_LINE * 2)).chars().count(),
            MAX_LINE + 1
        );
    }

    #[test]
    fn json_is_faithful_and_escaped() {
        let out = render(Output::Json, &value(), "").unwrap();
        assert_shows_nothing_hidden(&out);
        assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), value());
        assert!(out.contains(r"\u001b[31m"), "{out}");
        assert!(out.contains(r"\u007f\u009b"), "{out}");
        assert!(
            out.contains(r"\u202eevil\u2066\u200b\ufeff\udb40\udc41\u2028end"),
            "{out}"
        );
    }

    #[test]
    fn plain_json_is_what_serde_json_writes() {
        let plain =
            json!({ "cluster": "a", "lock": { "owner": "zoë 🙂", "ttl": null }, "gpus": {} });
        assert_eq!(
            render(Output::Json, &plain, "").unwrap(),
            format!("{}\n", serde_json::to_string_pretty(&plain).unwrap())
        );
    }

    #[test]
    fn yaml_is_faithful_and_escaped() {
        let out = render(Output::Yaml, &value(), "").unwrap();
        assert_shows_nothing_hidden(&out);
        let back: Value = serde_saphyr::from_str(&out).unwrap();
        assert_eq!(back, value(), "{out}");
        assert!(out.contains(r"\U000e0041"), "{out}");

        // Controls alone serde-saphyr escapes itself, in its own style.
        let controls = json!({ "message": "a\u{1b}[31mb\u{7}\u{9b}" });
        let out = render(Output::Yaml, &controls, "").unwrap();
        assert_eq!(out, serde_saphyr::to_string(&controls).unwrap());
        assert_shows_nothing_hidden(&out);
        assert_eq!(serde_saphyr::from_str::<Value>(&out).unwrap(), controls);
    }
}
