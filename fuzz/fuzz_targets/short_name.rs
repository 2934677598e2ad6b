//! Any GPU model string a labeller (or a hostile node) reports maps to a short name that
//! is a valid Kueue resource name part, the same one every time.
#![no_main]

use hearth_discovery::short_name::{MAX_SHORT_NAME_LEN, is_valid_name_part, short_name};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|model: &str| {
    let short = short_name(model);
    assert!(is_valid_name_part(&short), "{model:?} -> {short:?}");
    assert!(short.len() <= MAX_SHORT_NAME_LEN, "{model:?} -> {short:?}");
    assert!(
        !short.bytes().any(|b| b.is_ascii_uppercase()),
        "{model:?} -> {short:?}"
    );
    // The quota resource is `fournos/gpu-<short>`: its name part must be valid too.
    assert!(is_valid_name_part(&format!("gpu-{short}")), "{short:?}");
    assert_eq!(short, short_name(model), "not deterministic for {model:?}");
});
