//! The backstop behind every log line: each formatted event is cut to
//! [`MAX_LOG_LINE_BYTES`]. Call sites log summaries, not whole plans or snapshots; this
//! catches the one that does not (a `?field` of a collection that grows with the fleet)
//! before it writes hundreds of KiB per event to the node's disk and the collector.
//! It costs one length check per event: only an oversized one is rebuilt.

use std::io::{self, Write};

use serde_json::Value;
use tracing_subscriber::fmt::MakeWriter;

use crate::args::LogFormat;

/// Longest log line, in bytes, newline included.
pub const MAX_LOG_LINE_BYTES: usize = 8 * 1024;
/// Longest string field of a cut JSON line, in bytes.
const MAX_JSON_STRING_BYTES: usize = 512;
/// The field a cut JSON line gets: how long the line was.
const CUT_FIELD: &str = "log_line_cut_from_bytes";

/// A [`MakeWriter`] whose writers cut each event to [`MAX_LOG_LINE_BYTES`].
#[derive(Clone, Copy, Debug)]
pub struct Capped<M> {
    make: M,
    format: LogFormat,
}

impl<M> Capped<M> {
    pub fn new(make: M, format: LogFormat) -> Self {
        Self { make, format }
    }
}

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for Capped<M> {
    type Writer = CappedWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        CappedWriter {
            inner: self.make.make_writer(),
            format: self.format,
        }
    }
}

/// Relies on the fmt layer writing each event with one `write_all` of the whole line,
/// which it does: it formats into a buffer first.
pub struct CappedWriter<W> {
    inner: W,
    format: LogFormat,
}

impl<W: Write> Write for CappedWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.len() <= MAX_LOG_LINE_BYTES {
            self.inner.write_all(buf)?;
        } else {
            self.inner.write_all(cut(buf, self.format).as_bytes())?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// `line` in at most [`MAX_LOG_LINE_BYTES`], ending in a newline. JSON stays one valid
/// object (a collector that cannot parse a line drops it): its long strings are cut and
/// [`CUT_FIELD`] added.
fn cut(line: &[u8], format: LogFormat) -> String {
    if format == LogFormat::Json
        && let Ok(Value::Object(mut object)) = serde_json::from_slice::<Value>(line)
    {
        for value in object.values_mut() {
            shorten(value);
        }
        object.insert(CUT_FIELD.to_owned(), line.len().into());
        let mut out = serde_json::to_string(&object).unwrap_or_default();
        if out.len() >= MAX_LOG_LINE_BYTES {
            // Too many fields even when short: keep those that say what happened.
            object.retain(|key, _| {
                matches!(
                    key.as_str(),
                    "timestamp" | "level" | "target" | "message" | CUT_FIELD
                )
            });
            out = serde_json::to_string(&object).unwrap_or_default();
        }
        out.push('\n');
        return out;
    }
    let text = String::from_utf8_lossy(line);
    let marker = format!(" … [log line cut from {} bytes]\n", line.len());
    let mut end = MAX_LOG_LINE_BYTES - marker.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{marker}", &text[..end])
}

/// Cuts every string in `value` to [`MAX_JSON_STRING_BYTES`], and every array or object
/// to as many entries.
fn shorten(value: &mut Value) {
    match value {
        Value::String(s) if s.len() > MAX_JSON_STRING_BYTES => {
            let mut end = MAX_JSON_STRING_BYTES;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s.truncate(end);
            s.push('…');
        }
        Value::Array(items) => {
            items.truncate(MAX_JSON_STRING_BYTES / 64);
            items.iter_mut().for_each(shorten);
        }
        Value::Object(fields) => {
            let keys: Vec<String> = fields
                .keys()
                .skip(MAX_JSON_STRING_BYTES / 64)
                .cloned()
                .collect();
            for key in keys {
                fields.remove(&key);
            }
            fields.values_mut().for_each(shorten);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;
    use std::sync::{Arc, Mutex};

    /// What the fmt layer wrote, shared with the test.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// The lines the real fmt layer writes for `log`, through [`Capped`].
    fn lines_of(format: LogFormat, log: impl FnOnce()) -> Vec<String> {
        let captured = Captured::default();
        let sink = captured.clone();
        let writer = Capped::new(move || sink.clone(), format);
        let fmt = tracing_subscriber::fmt()
            .with_writer(writer)
            .with_ansi(false);
        match format {
            LogFormat::Text => tracing::subscriber::with_default(fmt.finish(), log),
            LogFormat::Json => {
                tracing::subscriber::with_default(fmt.json().flatten_event(true).finish(), log)
            }
        }
        let bytes = captured.0.lock().unwrap().clone();
        String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// A plan of a big fleet, as a careless `?plan` would log it.
    fn huge() -> Vec<String> {
        (0..20_000).map(|i| format!("cluster-{i:05}")).collect()
    }

    #[test]
    fn a_huge_text_event_is_cut_and_a_small_one_kept() {
        let lines = lines_of(LogFormat::Text, || {
            tracing::info!(plan = ?huge(), "planned");
            tracing::info!(clusters = 3, "reconciled");
        });
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].len() < MAX_LOG_LINE_BYTES, "{}", lines[0].len());
        assert!(
            lines[0].contains("planned plan=[\"cluster-00000\""),
            "{}",
            &lines[0][..200]
        );
        assert!(
            lines[0].ends_with("bytes]"),
            "{}",
            &lines[0][lines[0].len() - 80..]
        );
        assert!(lines[1].ends_with("reconciled clusters=3"), "{}", lines[1]);
    }

    #[test]
    fn a_huge_json_event_stays_one_valid_object() {
        let lines = lines_of(LogFormat::Json, || {
            tracing::warn!(plan = ?huge(), "planned");
        });
        assert_eq!(lines.len(), 1);
        assert!(lines[0].len() < MAX_LOG_LINE_BYTES, "{}", lines[0].len());
        let object: Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(object["level"], "WARN");
        assert_eq!(object["message"], "planned");
        assert!(object[CUT_FIELD].as_u64().unwrap() > 100_000, "{object}");
        assert!(object["plan"].as_str().unwrap().ends_with('…'));
    }

    #[test]
    fn json_with_too_many_fields_keeps_what_happened() {
        let fields: Map<String, Value> = (0..2000)
            .map(|i| (format!("field{i}"), Value::from("x".repeat(100))))
            .chain([("level".to_owned(), Value::from("INFO"))])
            .collect();
        let line = Value::Object(fields).to_string();
        let out = cut(line.as_bytes(), LogFormat::Json);
        assert!(out.len() <= MAX_LOG_LINE_BYTES);
        let object: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(object["level"], "INFO");
        assert_eq!(object[CUT_FIELD], line.len());
    }

    #[test]
    fn text_is_cut_on_a_character_boundary() {
        let line = "é".repeat(MAX_LOG_LINE_BYTES);
        let out = cut(line.as_bytes(), LogFormat::Text);
        assert!(out.len() <= MAX_LOG_LINE_BYTES);
        assert!(out.ends_with(&format!("cut from {} bytes]\n", line.len())));
    }
}
