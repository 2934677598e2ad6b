//! The library's error type.

use std::path::{Path, PathBuf};

/// Everything that can go wrong while running or talking to the plane.
#[derive(Debug, thiserror::Error)]
pub enum PlaneError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{context}: {source}")]
    Kube {
        context: String,
        #[source]
        source: kube::Error,
    },
    #[error("certificate generation failed: {0}")]
    Cert(#[from] rcgen::Error),
    #[error("{context}: {message}")]
    Parse { context: String, message: String },
    /// A component did not become ready in time; `log` points at what it said.
    #[error("{what} not ready after {secs}s{}", log_hint(.log))]
    Timeout {
        what: String,
        secs: u64,
        log: Option<PathBuf>,
    },
    /// A child process exited when it should be running.
    #[error("{what} exited ({status}){}", log_hint(.log))]
    Exited {
        what: String,
        status: String,
        log: Option<PathBuf>,
    },
    #[error("the control-plane tools are missing: {0}")]
    Tools(String),
    #[error("supervisor: {0}")]
    Supervisor(String),
    #[error("{0}")]
    Invalid(String),
}

fn log_hint(log: &Option<PathBuf>) -> String {
    let Some(path) = log else {
        return String::new();
    };
    let tail = tail(path, 25);
    if tail.is_empty() {
        format!("; see {}", path.display())
    } else {
        format!("; last lines of {}:\n{tail}", path.display())
    }
}

/// The last `lines` lines of a (log) file, for error messages.
pub fn tail(path: &Path, lines: usize) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(16 * 1024)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

pub type Result<T, E = PlaneError> = std::result::Result<T, E>;

/// Short-hands that attach context to foreign errors.
pub(crate) trait Context<T> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Context<T> for std::result::Result<T, std::io::Error> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| PlaneError::Io {
            context: context(),
            source,
        })
    }
}

impl<T> Context<T> for std::result::Result<T, kube::Error> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| PlaneError::Kube {
            context: context(),
            source,
        })
    }
}

impl<T> Context<T> for std::result::Result<T, serde_json::Error> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| PlaneError::Parse {
            context: context(),
            message: e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::tail;

    #[test]
    fn tail_keeps_the_last_lines() {
        let path = std::env::temp_dir().join(format!("hearth-e2e-tail-{}", std::process::id()));
        std::fs::write(&path, "a\nb\nc\n").unwrap();
        assert_eq!(tail(&path, 2), "b\nc");
        assert_eq!(tail(Path::new("/nonexistent"), 2), "");
        std::fs::remove_file(path).unwrap();
    }
}
