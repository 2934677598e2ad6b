//! The one shutdown signal: SIGTERM or SIGINT cancels a token that the controller, the
//! admin server and the lease loop all watch.

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Exit code when a second signal cuts shutdown short (128 + SIGINT, as a shell reports it).
const FORCED_EXIT_CODE: i32 = 130;

#[derive(Debug, thiserror::Error)]
#[error("cannot listen for {signal}: {source}")]
pub struct SignalError {
    signal: &'static str,
    #[source]
    source: std::io::Error,
}

/// A token cancelled on the first SIGTERM or SIGINT. A second signal exits at once, for
/// when a clean shutdown hangs and someone presses Ctrl-C again.
pub fn on_signal() -> Result<CancellationToken, SignalError> {
    let listen = |kind, signal_name| {
        signal(kind).map_err(|source| SignalError {
            signal: signal_name,
            source,
        })
    };
    let mut terminate = listen(SignalKind::terminate(), "SIGTERM")?;
    let mut interrupt = listen(SignalKind::interrupt(), "SIGINT")?;
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        let received = tokio::select! {
            _ = terminate.recv() => "SIGTERM",
            _ = interrupt.recv() => "SIGINT",
        };
        tracing::info!(signal = received, "shutting down");
        cancel.cancel();
        let again = tokio::select! {
            _ = terminate.recv() => "SIGTERM",
            _ = interrupt.recv() => "SIGINT",
        };
        tracing::warn!(
            signal = again,
            "second signal: exiting without a clean shutdown"
        );
        std::process::exit(FORCED_EXIT_CODE);
    });
    Ok(token)
}
