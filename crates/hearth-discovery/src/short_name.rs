//! Short names of GPU models, used in quota resources `fournos/gpu-<short>`.
//!
//! Known models map to their family (`NVIDIA-A100-SXM4-80GB` → `a100`), so variants of
//! one family share quota as they did in the Python controller. Anything else is
//! lower-cased with the vendor prefix and all non-alphanumerics removed
//! (`NVIDIA-B200-SXM` → `b200sxm`). Whatever a node label says, the result is a valid
//! Kueue resource name part: `[a-z0-9]+` (or, when truncated, `[a-z0-9]+-[0-9a-f]{8}`),
//! at most [`MAX_SHORT_NAME_LEN`] characters, never empty.

/// Longest short name. `gpu-` plus this stays far below the 63-character limit of a
/// qualified name's name part, leaving room for a longer configured prefix.
pub const MAX_SHORT_NAME_LEN: usize = 40;

/// Short name for a model that yields no usable characters (empty, punctuation,
/// non-ASCII only).
pub const UNKNOWN_SHORT_NAME: &str = "unknown";

/// Leading words that are not part of the model: vendor names and brand lines.
/// `Tesla` is how GPU Feature Discovery spelled older data-centre parts
/// (`Tesla-V100-SXM2-16GB`, `Tesla-T4`); the ROCm labeller writes `AMD_Instinct_…`.
const PREFIX_WORDS: &[&str] = &["NVIDIA", "AMD", "TESLA", "INSTINCT"];

/// Families whose variants share one short name (the family's, lower-cased), matched
/// against the first word of the model after the prefix words. Consistent with
/// DESIGN.md's examples: B200 is deliberately absent, so `NVIDIA-B200-SXM` stays
/// `b200sxm`; L40S is listed apart from L40 because they are different products.
const KNOWN_FAMILIES: &[&str] = &[
    "A100", "A10", "A30", "A40", "H100", "H200", "H800", "GH200", "L40S", "L40", "L4", "T4",
    "V100", "P100", "MI355X", "MI325X", "MI300X", "MI300A", "MI250X", "MI250", "MI210", "MI100",
];

/// The short name of a GPU model as a node labeller reports it.
pub fn short_name(model: &str) -> String {
    let words: Vec<String> = model
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_uppercase)
        .collect();
    let model_start = words
        .iter()
        .position(|w| !PREFIX_WORDS.contains(&w.as_str()))
        .unwrap_or(words.len());
    let model_words = &words[model_start..];

    if let Some(first) = model_words.first()
        && KNOWN_FAMILIES.contains(&first.as_str())
    {
        return first.to_ascii_lowercase();
    }

    let joined = if model_words.is_empty() {
        // Only the vendor is known (no product label: model `NVIDIA` or `AMD`): keep it,
        // so unlabelled NVIDIA and AMD GPUs stay apart.
        words.concat()
    } else {
        model_words.concat()
    }
    .to_ascii_lowercase();

    if joined.is_empty() {
        UNKNOWN_SHORT_NAME.to_owned()
    } else if joined.len() > MAX_SHORT_NAME_LEN {
        truncate_with_hash(&joined)
    } else {
        joined
    }
}

/// Keeps the start of an overlong name and appends a hash of the whole, so two long
/// models with a common start stay distinct, and the same model always maps the same.
fn truncate_with_hash(name: &str) -> String {
    const HASH_LEN: usize = 8;
    let keep = MAX_SHORT_NAME_LEN - HASH_LEN - 1;
    format!("{}-{:08x}", &name[..keep], fnv1a_32(name.as_bytes()))
}

/// FNV-1a: tiny, and fixed by its definition, so short names never change with a
/// library upgrade (they are quota resource names).
fn fnv1a_32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, b| {
        (hash ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// Whether `s` is valid as the name part of a qualified resource name: at most 63
/// characters, `[a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?`. Short names are lower-case.
pub fn is_valid_name_part(s: &str) -> bool {
    hearth_api::names::is_label_name(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn known_families_and_design_examples() {
        for (model, short) in [
            // DESIGN.md's examples.
            ("NVIDIA-L40S", "l40s"),
            ("NVIDIA-B200-SXM", "b200sxm"),
            ("NVIDIA-A100-SXM4-80GB", "a100"),
            ("NVIDIA-H200-SXM-141GB", "h200"),
            // Family prefixes.
            ("NVIDIA-A100-PCIE-40GB", "a100"),
            ("NVIDIA-A100-SXM4-40GB", "a100"),
            ("NVIDIA-H100-80GB-HBM3", "h100"),
            ("NVIDIA-H100-NVL", "h100"),
            ("NVIDIA-H100-PCIe", "h100"),
            ("NVIDIA-H200-NVL", "h200"),
            ("NVIDIA-GH200-480GB", "gh200"),
            ("NVIDIA-L40", "l40"),
            ("NVIDIA-L4", "l4"),
            ("Tesla-T4", "t4"),
            ("Tesla-V100-SXM2-16GB", "v100"),
            ("NVIDIA-A10", "a10"),
            ("AMD_Instinct_MI300X", "mi300x"),
            ("AMD-Instinct-MI300X-OAM", "mi300x"),
            ("AMD_Instinct_MI300X_OAM", "mi300x"),
            ("AMD_Instinct_MI250X_MI250", "mi250x"),
            ("AMD_Instinct_MI210", "mi210"),
            ("Instinct MI325X", "mi325x"),
            // Lower-case input still matches.
            ("nvidia-a100-sxm4-80gb", "a100"),
            // Similar names that are other products fall through.
            ("NVIDIA-A10G", "a10g"),
            ("NVIDIA-A100X", "a100x"),
            ("NVIDIA-L40S-SHARED", "l40s"),
            ("NVIDIA-B200", "b200"),
            ("NVIDIA-GB200", "gb200"),
            ("NVIDIA-RTX-A6000", "rtxa6000"),
            ("NVIDIA-GeForce-RTX-4090", "geforcertx4090"),
            ("Quadro-RTX-8000", "quadrortx8000"),
            ("AMD_Radeon_PRO_W7900", "radeonprow7900"),
            // No product label: the vendor alone.
            ("NVIDIA", "nvidia"),
            ("AMD", "amd"),
        ] {
            assert_eq!(short_name(model), short, "{model}");
        }
    }

    #[test]
    fn garbage_maps_to_a_deterministic_fallback() {
        for model in [
            "",
            " ",
            "---",
            "._-/",
            "ＨＸ",
            "日本語",
            "\u{0}\u{7f}",
            "🚀🚀",
        ] {
            assert_eq!(short_name(model), UNKNOWN_SHORT_NAME, "{model:?}");
        }
        assert_eq!(short_name("H100 🚀"), "h100");
        assert_eq!(short_name("Ｈ100"), "100", "non-ASCII letters are dropped");
    }

    #[test]
    fn overlong_names_are_truncated_deterministically_and_stay_distinct() {
        let a = format!("NVIDIA-{}-A", "X".repeat(1000));
        let b = format!("NVIDIA-{}-B", "X".repeat(1000));
        let (sa, sb) = (short_name(&a), short_name(&b));
        assert_eq!(sa.len(), MAX_SHORT_NAME_LEN);
        assert_ne!(sa, sb);
        assert_eq!(sa, short_name(&a));
        assert!(sa.starts_with("xxxxxxxx"), "{sa}");
        // Exactly at the limit: untouched.
        let exact = "Y".repeat(MAX_SHORT_NAME_LEN);
        assert_eq!(short_name(&exact), exact.to_lowercase());
        // The hash is FNV-1a's, fixed forever.
        assert_eq!(fnv1a_32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a_32(b"a"), 0xe40c_292c);
    }

    /// Property: any input yields a valid, bounded, lower-case name, also with the
    /// `fournos/gpu-` prefix's name part. Inputs come from a fixed-seed generator
    /// mixing ASCII, punctuation, whitespace, unicode and very long strings.
    #[test]
    fn any_label_gives_a_valid_resource_name() {
        let alphabet: Vec<char> =
            "aZ09-_. /\\:;!@#$%^&*()[]{}|\"'`~+=<>?,\t\n\r\u{0}é日🚀Ｈ\u{200b}\u{202e}"
                .chars()
                .collect();
        let mut state: u64 = 0x5eed;
        let mut next = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) as usize
        };
        let mut inputs: Vec<String> = vec![
            String::new(),
            "x".repeat(1000),
            "-".repeat(1000),
            "日".repeat(1000),
            format!("NVIDIA-{}", "9".repeat(63)),
        ];
        for _ in 0..2000 {
            let len = next() % 80;
            inputs.push(
                (0..len)
                    .map(|_| alphabet[next() % alphabet.len()])
                    .collect(),
            );
        }
        for input in inputs {
            let short = short_name(&input);
            assert!(short.len() <= MAX_SHORT_NAME_LEN, "{input:?} → {short:?}");
            assert!(is_valid_name_part(&short), "{input:?} → {short:?}");
            assert!(
                is_valid_name_part(&format!("gpu-{short}")),
                "{input:?} → {short:?}"
            );
            assert!(
                !short.bytes().any(|b| b.is_ascii_uppercase()),
                "{input:?} → {short:?}"
            );
            assert_eq!(short, short_name(&input), "deterministic");
        }
    }

    #[test]
    fn name_part_validation() {
        for ok in ["a", "a100", "gpu-a100", "a.b_c-d", &"a".repeat(63)] {
            assert!(is_valid_name_part(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "a b", "é", &"a".repeat(64)] {
            assert!(!is_valid_name_part(bad), "{bad}");
        }
    }
}
