//! The library's error type.

use std::path::PathBuf;

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
    let tail = crate::process::tail(path, 25);
    if tail.is_empty() {
        format!("; see {}", path.display())
    } else {
        format!("; last lines of {}:\n{tail}", path.display())
    }
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
