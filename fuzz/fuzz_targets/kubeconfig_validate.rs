//! Arbitrary bytes as a Secret's `kubeconfig` key: `validate` never panics, and its
//! answer is short enough to go into a status message or an Event.
#![no_main]

use hearth_discovery::kubeconfig;
use libfuzzer_sys::fuzz_target;

/// Error messages quote at most a few names of at most 64 characters each.
const MAX_MESSAGE: usize = 2048;

fuzz_target!(|data: &[u8]| {
    match kubeconfig::validate(data) {
        Ok(valid) => {
            assert_eq!(valid.server().scheme_str(), Some("https"));
            let _ = format!("{valid:?}");
        }
        Err(e) => {
            let message = e.to_string();
            assert!(
                message.len() <= MAX_MESSAGE,
                "{} bytes: {message}",
                message.len()
            );
            assert!(!e.reason().is_empty());
            if let Some(field) = e.field() {
                assert!(field.len() <= MAX_MESSAGE);
            }
        }
    }
});
