//! The reason an error gives: what the kit's metrics, logs and Events name it by, and
//! whether the kit retries it.

/// An error with a stable, CamelCase reason: a metric label and an Event reason.
pub trait FailureReason {
    fn reason(&self) -> &'static str;

    /// Whether retrying (after the backoff) may help; when not, the next change of the
    /// object is what retries it.
    fn retry(&self) -> bool {
        true
    }
}

/// For loops that cannot fail (a sweep counts and logs its own errors).
impl FailureReason for std::convert::Infallible {
    fn reason(&self) -> &'static str {
        match *self {}
    }
}
