//! `kubectl fournos migrate scrub-secrets`: what the Python (kopf) Hearth left on the
//! kubeconfig Secrets it handled. kopf keeps its per-object state in annotations under
//! `kopf.zalando.org/`; on a Secret, `last-handled-configuration` is a JSON copy of the
//! object's essence, which for a Secret is its `data`, the kubeconfig and its token
//! included. Once the Python Hearth is stopped these annotations are only a leak, so the
//! step removes every kopf annotation from the labeled kubeconfig Secrets, and says which
//! ones held Secret data. It reports names and annotation keys, never a value.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Value, json};

/// Every kopf annotation starts with this (kopf's default storage prefix).
pub const KOPF_PREFIX: &str = "kopf.zalando.org/";

/// One kopf annotation found on a Secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Leftover {
    pub key: String,
    /// Its value is a copy of the Secret's `data` or `stringData`.
    pub holds_secret_data: bool,
}

/// One Secret with kopf annotations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Scrubbed {
    pub name: String,
    pub annotations: Vec<Leftover>,
}

/// What one run found and did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    pub namespace: String,
    pub dry_run: bool,
    /// Labeled kubeconfig Secrets looked at.
    pub scanned: usize,
    /// Those with kopf annotations, removed (or, with `dry_run`, to remove).
    pub secrets: Vec<Scrubbed>,
}

/// The kopf annotations among `annotations`, in key order.
pub fn leftovers(annotations: &BTreeMap<String, String>) -> Vec<Leftover> {
    annotations
        .iter()
        .filter(|(key, _)| key.starts_with(KOPF_PREFIX))
        .map(|(key, value)| Leftover {
            key: key.clone(),
            holds_secret_data: holds_secret_data(value),
        })
        .collect()
}

/// Whether an annotation value is kopf's JSON copy of a Secret body with its data.
fn holds_secret_data(value: &str) -> bool {
    serde_json::from_str::<Value>(value).is_ok_and(|v| {
        v.as_object()
            .is_some_and(|o| o.contains_key("data") || o.contains_key("stringData"))
    })
}

/// A merge patch removing `found` from a Secret, guarded by the version they were read
/// at (a concurrent change answers 409 and the Secret is read and planned again).
pub fn removal_patch(resource_version: &str, found: &[Leftover]) -> Value {
    let annotations: serde_json::Map<String, Value> =
        found.iter().map(|l| (l.key.clone(), Value::Null)).collect();
    json!({ "metadata": { "resourceVersion": resource_version, "annotations": annotations } })
}

impl Report {
    /// The report for people: one line per Secret, then the totals and what to do next.
    pub fn render(&self) -> String {
        let ns = &self.namespace;
        let mut out = format!(
            "Scanned {} kubeconfig Secret(s) labeled {} in namespace {ns}.\n",
            self.scanned,
            hearth_api::names::KUBECONFIG_SECRET_SELECTOR
        );
        if self.secrets.is_empty() {
            out.push_str("No kopf annotations found: nothing to remove.\n");
            return out;
        }
        let verb = if self.dry_run {
            "would remove"
        } else {
            "removed"
        };
        let mut total = 0;
        for secret in &self.secrets {
            let keys: Vec<String> = secret
                .annotations
                .iter()
                .map(|l| {
                    if l.holds_secret_data {
                        format!("{} (held a copy of the Secret's data)", l.key)
                    } else {
                        l.key.clone()
                    }
                })
                .collect();
            total += keys.len();
            out.push_str(&format!("{}: {verb} {}\n", secret.name, keys.join(", ")));
        }
        let leaked = self
            .secrets
            .iter()
            .filter(|s| s.annotations.iter().any(|l| l.holds_secret_data))
            .count();
        if self.dry_run {
            out.push_str(&format!(
                "Dry run: {total} annotation(s) on {} Secret(s) would be removed ({leaked} \
                 held Secret data). Stop the Python Hearth first, then run again without \
                 --dry-run.\n",
                self.secrets.len()
            ));
        } else {
            out.push_str(&format!(
                "Removed {total} annotation(s) from {} Secret(s) ({leaked} held Secret data). \
                 The copied tokens were shown wherever Secret metadata is (kubectl describe, \
                 metadata exports): consider rotating them.\n",
                self.secrets.len()
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn selects_every_kopf_annotation_and_marks_the_data_copy() {
        let found = leftovers(&annotations(&[
            (
                "kopf.zalando.org/last-handled-configuration",
                r#"{"data":{"kubeconfig":"c2VjcmV0"},"type":"Opaque"}"#,
            ),
            (
                "kopf.zalando.org/on_kubeconfig_secret",
                r#"{"started":"2026-11-23T21:00:00","success":true}"#,
            ),
            ("kubectl.kubernetes.io/last-applied-configuration", "{}"),
            ("team", "platform"),
        ]));
        assert_eq!(
            found,
            vec![
                Leftover {
                    key: "kopf.zalando.org/last-handled-configuration".into(),
                    holds_secret_data: true,
                },
                Leftover {
                    key: "kopf.zalando.org/on_kubeconfig_secret".into(),
                    holds_secret_data: false,
                },
            ]
        );
    }

    #[test]
    fn string_data_and_garbage_values() {
        let found = leftovers(&annotations(&[
            ("kopf.zalando.org/a", r#"{"stringData":{"k":"v"}}"#),
            ("kopf.zalando.org/b", "not json"),
            ("kopf.zalando.org/c", r#"["data"]"#),
        ]));
        let data: Vec<bool> = found.iter().map(|l| l.holds_secret_data).collect();
        assert_eq!(data, vec![true, false, false]);
        assert!(leftovers(&annotations(&[("other/x", "{\"data\":{}}")])).is_empty());
    }

    #[test]
    fn the_patch_nulls_exactly_the_found_keys_at_the_read_version() {
        let found = vec![Leftover {
            key: "kopf.zalando.org/last-handled-configuration".into(),
            holds_secret_data: true,
        }];
        assert_eq!(
            removal_patch("42", &found),
            json!({ "metadata": { "resourceVersion": "42", "annotations": {
                "kopf.zalando.org/last-handled-configuration": null } } })
        );
    }

    #[test]
    fn the_report_names_keys_never_values() {
        let secret_value = r#"{"data":{"kubeconfig":"dG9rZW4tc2VjcmV0"}}"#;
        let found = leftovers(&annotations(&[(
            "kopf.zalando.org/last-handled-configuration",
            secret_value,
        )]));
        let mut report = Report {
            namespace: "psap-secrets".into(),
            dry_run: true,
            scanned: 2,
            secrets: vec![Scrubbed {
                name: "kubeconfig-a".into(),
                annotations: found,
            }],
        };
        let text = report.render();
        assert!(!text.contains("dG9rZW4"), "{text}");
        assert!(text.contains("kubeconfig-a: would remove kopf.zalando.org/last-handled-configuration (held a copy of the Secret's data)"), "{text}");
        assert!(
            text.contains("Dry run: 1 annotation(s) on 1 Secret(s)"),
            "{text}"
        );
        report.dry_run = false;
        assert!(
            report
                .render()
                .contains("Removed 1 annotation(s) from 1 Secret(s) (1 held Secret data)")
        );
        report.secrets.clear();
        assert!(report.render().contains("nothing to remove"));
    }
}
