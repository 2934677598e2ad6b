//! Kueue's WaitForPodsReady setting of a plane: chosen by a test (or `hearth-plane`),
//! written into Kueue's configuration and reported in the plane's state.

use serde::{Deserialize, Serialize};

/// How Kueue treats admitted Workloads whose pods never become ready.
///
/// Kueue v0.19 turns WaitForPodsReady on by default (30-minute timeout) and evicts such
/// Workloads (v0.16 leaves it off unless configured); a lock sentinel has no pods at all,
/// so the default keeps production behaviour and tests that want to see the eviction use a
/// short [`Timeout`](Self::Timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "mode", content = "seconds")]
pub enum WaitForPodsReady {
    /// Kueue's own default: enabled with a 30-minute timeout on 0.19, off on 0.16.
    #[default]
    KueueDefault,
    /// Enabled with this timeout.
    Timeout(u64),
    /// Disabled: through the `DisableWaitForPodsReady` feature gate on 0.19 (where it is on
    /// by default), by leaving it out of the configuration on 0.16.
    Disabled,
}

impl std::str::FromStr for WaitForPodsReady {
    type Err = String;

    /// `default`, `off`, or a timeout such as `45s`, `2m`, `90`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "default" | "on" => Ok(Self::KueueDefault),
            "off" | "disabled" | "false" => Ok(Self::Disabled),
            _ => {
                let (number, unit) = match s.strip_suffix('m') {
                    Some(n) => (n, 60),
                    None => (s.strip_suffix('s').unwrap_or(s), 1),
                };
                number
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .map(|n| Self::Timeout(n * unit))
                    .ok_or_else(|| {
                        format!("expected default, off or a timeout like 30s or 2m, got {s:?}")
                    })
            }
        }
    }
}

impl std::fmt::Display for WaitForPodsReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::KueueDefault => f.write_str("default"),
            Self::Timeout(secs) => write!(f, "{secs}s"),
            Self::Disabled => f.write_str("off"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_wait_for_pods_ready() {
        assert_eq!("default".parse(), Ok(WaitForPodsReady::KueueDefault));
        assert_eq!("off".parse(), Ok(WaitForPodsReady::Disabled));
        assert_eq!("45s".parse(), Ok(WaitForPodsReady::Timeout(45)));
        assert_eq!("2m".parse(), Ok(WaitForPodsReady::Timeout(120)));
        assert!("0s".parse::<WaitForPodsReady>().is_err());
        assert!("soon".parse::<WaitForPodsReady>().is_err());
    }
}
