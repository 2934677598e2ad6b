//! `kubectl fournos migrate scrub-secrets` and `scrub-clusters`: what the Python (kopf)
//! Hearth left on the objects it handled. kopf keeps its per-object state in annotations
//! under `kopf.zalando.org/`; on a Secret, `last-handled-configuration` is a JSON copy of
//! the object's essence, which for a Secret is its `data`, the kubeconfig and its token
//! included. On FournosClusters it also put its finalizer (for its timer), which nothing
//! removes once the Python Hearth is gone, so their deletion would hang. Once the Python
//! Hearth is stopped all of it is only a leak or a trap, so these steps remove every kopf
//! annotation and finalizer, and say which annotations held Secret data. They report
//! names and keys, never a value.

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

/// What a step looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Kind {
    /// The Secrets labeled `fournos.dev/cluster-kubeconfig=true`.
    KubeconfigSecrets,
    FournosClusters,
}

/// One object with kopf's leftovers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Scrubbed {
    pub name: String,
    pub annotations: Vec<Leftover>,
    pub finalizers: Vec<String>,
}

/// What one run found and did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    pub kind: Kind,
    pub namespace: String,
    pub dry_run: bool,
    /// Objects looked at.
    pub scanned: usize,
    /// Those with kopf leftovers, removed (or, with `dry_run`, to remove).
    pub objects: Vec<Scrubbed>,
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

/// What kopf left on one object, or `None` when it is clean.
pub fn plan(
    name: &str,
    annotations: &BTreeMap<String, String>,
    finalizers: &[String],
) -> Option<Scrubbed> {
    let scrubbed = Scrubbed {
        name: name.to_owned(),
        annotations: leftovers(annotations),
        finalizers: finalizers
            .iter()
            .filter(|f| f.starts_with(KOPF_PREFIX))
            .cloned()
            .collect(),
    };
    (!scrubbed.annotations.is_empty() || !scrubbed.finalizers.is_empty()).then_some(scrubbed)
}

/// Whether an annotation value is kopf's JSON copy of a Secret body with its data.
fn holds_secret_data(value: &str) -> bool {
    serde_json::from_str::<Value>(value).is_ok_and(|v| {
        v.as_object()
            .is_some_and(|o| o.contains_key("data") || o.contains_key("stringData"))
    })
}

/// A merge patch removing what `found` lists from an object whose finalizers are
/// `finalizers`, guarded by the version they were read at (a concurrent change answers
/// 409 and the object is read and planned again). A merge patch replaces a list whole:
/// the finalizers that are not kopf's are written back as they were.
pub fn removal_patch(resource_version: &str, found: &Scrubbed, finalizers: &[String]) -> Value {
    let annotations: serde_json::Map<String, Value> = found
        .annotations
        .iter()
        .map(|l| (l.key.clone(), Value::Null))
        .collect();
    let mut patch =
        json!({ "metadata": { "resourceVersion": resource_version, "annotations": annotations } });
    if !found.finalizers.is_empty() {
        let kept: Vec<&String> = finalizers
            .iter()
            .filter(|f| !found.finalizers.contains(f))
            .collect();
        patch["metadata"]["finalizers"] = json!(kept);
    }
    patch
}

impl Report {
    /// The report for people: one line per object, then the totals and what to do next.
    pub fn render(&self) -> String {
        let (scanned, noun) = match self.kind {
            Kind::KubeconfigSecrets => (
                format!(
                    "kubeconfig Secret(s) labeled {}",
                    hearth_api::names::KUBECONFIG_SECRET_SELECTOR
                ),
                "Secret(s)",
            ),
            Kind::FournosClusters => ("FournosCluster(s)".to_owned(), "FournosCluster(s)"),
        };
        let (n, ns) = (self.scanned, &self.namespace);
        let mut out = format!("Scanned {n} {scanned} in namespace {ns}.\n");
        if self.objects.is_empty() {
            out.push_str("No kopf annotations or finalizers found: nothing to remove.\n");
            return out;
        }
        let verb = if self.dry_run {
            "would remove"
        } else {
            "removed"
        };
        let (mut annotations, mut finalizers, mut leaked) = (0, 0, 0);
        for object in &self.objects {
            let mut items: Vec<String> = object
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
            items.extend(object.finalizers.iter().map(|f| format!("finalizer {f}")));
            annotations += object.annotations.len();
            finalizers += object.finalizers.len();
            leaked += usize::from(object.annotations.iter().any(|l| l.holds_secret_data));
            out.push_str(&format!("{}: {verb} {}\n", object.name, items.join(", ")));
        }
        let total = format!(
            "{annotations} annotation(s) and {finalizers} finalizer(s) on {} {noun} ({leaked} \
             held Secret data)",
            self.objects.len()
        );
        if self.dry_run {
            out.push_str(&format!(
                "Dry run: would remove {total}. Stop the Python Hearth first, then run again \
                 without --dry-run.\n"
            ));
        } else {
            out.push_str(&format!("Removed {total}.\n"));
            if leaked > 0 {
                out.push_str(
                    "The copied tokens were shown wherever Secret metadata is (kubectl \
                     describe, metadata exports): consider rotating them.\n",
                );
            }
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
        let found = plan(
            "a",
            &annotations(&[("kopf.zalando.org/last-handled-configuration", "{}")]),
            &[],
        )
        .expect("found");
        assert_eq!(
            removal_patch("42", &found, &[]),
            json!({ "metadata": { "resourceVersion": "42", "annotations": {
                "kopf.zalando.org/last-handled-configuration": null } } })
        );
    }

    #[test]
    fn kopf_finalizers_go_and_the_others_are_written_back() {
        let finalizers = vec![
            "example.com/keep".to_owned(),
            "kopf.zalando.org/KopfFinalizerMarker".to_owned(),
        ];
        let found = plan("a", &BTreeMap::new(), &finalizers).expect("found");
        assert_eq!(
            found.finalizers,
            vec!["kopf.zalando.org/KopfFinalizerMarker"]
        );
        assert_eq!(
            removal_patch("7", &found, &finalizers),
            json!({ "metadata": { "resourceVersion": "7", "annotations": {},
                "finalizers": ["example.com/keep"] } })
        );
        assert_eq!(
            plan("b", &annotations(&[("x", "y")]), &finalizers[..1]),
            None
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
            kind: Kind::KubeconfigSecrets,
            namespace: "psap-secrets".into(),
            dry_run: true,
            scanned: 2,
            objects: vec![Scrubbed {
                name: "kubeconfig-a".into(),
                annotations: found,
                finalizers: vec![],
            }],
        };
        let text = report.render();
        assert!(!text.contains("dG9rZW4"), "{text}");
        assert!(text.contains("kubeconfig-a: would remove kopf.zalando.org/last-handled-configuration (held a copy of the Secret's data)"), "{text}");
        assert!(
            text.contains(
                "Dry run: would remove 1 annotation(s) and 0 finalizer(s) on 1 Secret(s) (1 held Secret data)"
            ),
            "{text}"
        );
        report.dry_run = false;
        let text = report.render();
        assert!(text.contains("Removed 1 annotation(s)"), "{text}");
        assert!(text.contains("consider rotating them"), "{text}");
        report.kind = Kind::FournosClusters;
        report.objects[0].finalizers = vec!["kopf.zalando.org/KopfFinalizerMarker".into()];
        let text = report.render();
        assert!(
            text.contains("kubeconfig-a: removed kopf.zalando.org/last-handled-configuration (held a copy of the Secret's data), finalizer kopf.zalando.org/KopfFinalizerMarker"),
            "{text}"
        );
        assert!(text.contains("Scanned 2 FournosCluster(s)"), "{text}");
        report.objects.clear();
        assert!(report.render().contains("nothing to remove"));
    }
}
