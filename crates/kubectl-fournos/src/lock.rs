//! What `lock` and `unlock` do to a FournosCluster, decided from the object as read:
//! the merge patch to send (guarded by the `resourceVersion` that was read, so a lock
//! someone else took in between is never overwritten) or why not. Pure.

use hearth_api::FournosCluster;
use hearth_api::duration::typed_to_field;
use serde_json::{Value, json};

use crate::view::owner;

/// The outcome of planning a lock or unlock.
#[derive(Debug, PartialEq)]
pub enum Plan {
    /// Send this merge patch. `taken_from` names the owner whose lock `--force` overrides.
    Patch {
        patch: Value,
        taken_from: Option<String>,
    },
    /// Nothing to write; the message says why.
    Unchanged(String),
    /// Refused; the message says what to do.
    Refused(String),
}

/// `lock <cluster> [--ttl] [--owner] [--force]` as `me`.
pub fn plan_lock(fc: &FournosCluster, me: &str, ttl: Option<&str>, force: bool) -> Plan {
    let name = name(fc);
    if me.is_empty() {
        return Plan::Refused("the owner must not be empty: pass --owner <name>".into());
    }
    // Typed in the plugin's one duration grammar (`1h30m`), stored in the one unit the
    // CRD's pattern admits (`90m`).
    let ttl = match ttl.map(typed_to_field).transpose() {
        Ok(ttl) => ttl,
        Err(e) => return Plan::Refused(format!("--ttl: {e}")),
    };
    let ttl = ttl.as_deref();
    if owner(fc) == Some(me) && fc.spec.ttl.as_deref() == ttl {
        return Plan::Unchanged(format!("{name} is already locked by {me}{}", ttl_note(ttl)));
    }
    let refused = |current: &str| {
        format!(
            "{name} is locked by {current}{}. Ask them to unlock it, or take it with --force \
             (their lock ends at once).",
            ttl_note(fc.spec.ttl.as_deref())
        )
    };
    let taken = take_over(owner(fc), me, force, refused);
    patch(fc, taken, json!({ "owner": me, "ttl": ttl }))
}

/// `unlock <cluster> [--owner] [--force]` as `me`.
pub fn plan_unlock(fc: &FournosCluster, me: &str, force: bool) -> Plan {
    let name = name(fc);
    if owner(fc).is_none() {
        return Plan::Unchanged(format!("{name} is not locked"));
    }
    let refused = |current: &str| {
        format!(
            "{name} is locked by {current}, not by {me}. If you locked it under another name, \
             pass --owner <that name>; to release someone else's lock, add --force."
        )
    };
    // spec.ttl belongs to the lock: left behind, it would cut the next lock short.
    let taken = take_over(owner(fc), me, force, refused);
    patch(fc, taken, json!({ "owner": null, "ttl": null }))
}

/// Whose lock or cordon (held by `current`) `me` takes over: nobody else's (`None`),
/// someone else's with `--force`, else the refusal `refused` words.
pub(crate) fn take_over(
    current: Option<&str>,
    me: &str,
    force: bool,
    refused: impl FnOnce(&str) -> String,
) -> Result<Option<String>, Plan> {
    match current.filter(|c| !c.is_empty()) {
        Some(other) if other != me && !force => Err(Plan::Refused(refused(other))),
        Some(other) if other != me => Ok(Some(other.to_owned())),
        _ => Ok(None),
    }
}

/// The merge patch of `spec` over what was `taken` over, the apiserver applies only if the
/// object still has the `resourceVersion` read (else 409 Conflict); or the refusal.
pub(crate) fn patch(fc: &FournosCluster, taken: Result<Option<String>, Plan>, spec: Value) -> Plan {
    match taken {
        Ok(taken_from) => Plan::Patch {
            patch: json!({
                "metadata": { "resourceVersion": fc.metadata.resource_version },
                "spec": spec,
            }),
            taken_from,
        },
        Err(refused) => refused,
    }
}

fn name(fc: &FournosCluster) -> &str {
    fc.metadata.name.as_deref().unwrap_or_default()
}

/// ` (ttl 4h)`, or nothing without a TTL.
pub(crate) fn ttl_note(ttl: Option<&str>) -> String {
    ttl.map(|t| format!(" (ttl {t})")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::tests::{cluster, with_lock};
    use pretty_assertions::assert_eq;

    fn read(fc: FournosCluster) -> FournosCluster {
        let mut fc = fc;
        fc.metadata.resource_version = Some("42".into());
        fc
    }

    #[test]
    fn locking_a_free_cluster_patches_owner_and_ttl_guarded_by_the_version_read() {
        let plan = plan_lock(&read(cluster("a")), "alice", Some("4h"), false);
        assert_eq!(
            plan,
            Plan::Patch {
                patch: json!({
                    "metadata": { "resourceVersion": "42" },
                    "spec": { "owner": "alice", "ttl": "4h" },
                }),
                taken_from: None,
            }
        );
    }

    #[test]
    fn a_lock_without_ttl_clears_a_leftover_ttl() {
        let mut fc = read(cluster("a"));
        fc.spec.ttl = Some("2m".into());
        let Plan::Patch { patch, .. } = plan_lock(&fc, "alice", None, false) else {
            panic!("expected a patch");
        };
        assert_eq!(patch["spec"], json!({ "owner": "alice", "ttl": null }));
    }

    #[test]
    fn someone_elses_lock_is_refused_unless_forced() {
        let fc = read(with_lock(cluster("a"), "bob", true));
        let Plan::Refused(message) = plan_lock(&fc, "alice", None, false) else {
            panic!("expected a refusal");
        };
        assert!(message.contains("locked by bob"), "{message}");
        assert!(message.contains("--force"), "{message}");

        let Plan::Patch { taken_from, .. } = plan_lock(&fc, "alice", None, true) else {
            panic!("expected a patch");
        };
        assert_eq!(taken_from.as_deref(), Some("bob"));
    }

    #[test]
    fn relocking_your_own_lock_changes_only_a_different_ttl() {
        let mut fc = read(with_lock(cluster("a"), "alice", true));
        fc.spec.ttl = Some("4h".into());
        assert!(matches!(
            plan_lock(&fc, "alice", Some("4h"), false),
            Plan::Unchanged(_)
        ));
        let Plan::Patch { patch, taken_from } = plan_lock(&fc, "alice", Some("8h"), false) else {
            panic!("expected a patch");
        };
        assert_eq!(patch["spec"]["ttl"], "8h");
        assert_eq!(taken_from, None);
    }

    #[test]
    fn a_bad_ttl_is_refused_before_anything_is_sent() {
        let Plan::Refused(message) = plan_lock(&read(cluster("a")), "alice", Some("4x"), false)
        else {
            panic!("expected a refusal");
        };
        assert!(message.starts_with("--ttl:"), "{message}");
        assert!(matches!(
            plan_lock(&read(cluster("a")), "", None, false),
            Plan::Refused(_)
        ));
    }

    #[test]
    fn a_typed_ttl_is_written_in_the_one_unit_the_crd_holds() {
        for (typed, stored) in [
            ("1h30m", "90m"),
            ("4h", "4h"),
            ("2d12h", "60h"),
            ("120s", "2m"),
        ] {
            let Plan::Patch { patch, .. } =
                plan_lock(&read(cluster("a")), "alice", Some(typed), false)
            else {
                panic!("{typed}: expected a patch");
            };
            assert_eq!(patch["spec"]["ttl"], stored, "{typed}");
        }
        // Relocking with the same duration typed differently changes nothing.
        let mut fc = read(cluster("a"));
        fc.spec.owner = Some("alice".into());
        fc.spec.ttl = Some("90m".into());
        assert!(matches!(
            plan_lock(&fc, "alice", Some("1h30m"), false),
            Plan::Unchanged(m) if m.contains("(ttl 90m)")
        ));
        let Plan::Refused(message) = plan_lock(&read(cluster("a")), "alice", Some("90s"), false)
        else {
            panic!("expected a refusal");
        };
        assert!(message.contains("whole number of minutes"), "{message}");
    }

    #[test]
    fn unlock_releases_only_your_own_lock_unless_forced() {
        let fc = read(with_lock(cluster("a"), "bob", true));
        assert_eq!(
            plan_unlock(&fc, "bob", false),
            Plan::Patch {
                patch: json!({
                    "metadata": { "resourceVersion": "42" },
                    "spec": { "owner": null, "ttl": null },
                }),
                taken_from: None,
            }
        );
        let Plan::Refused(message) = plan_unlock(&fc, "alice", false) else {
            panic!("expected a refusal");
        };
        assert!(message.contains("locked by bob, not by alice"), "{message}");
        assert!(matches!(
            plan_unlock(&fc, "alice", true),
            Plan::Patch {
                taken_from: Some(_),
                ..
            }
        ));
        assert!(matches!(
            plan_unlock(&read(cluster("a")), "alice", false),
            Plan::Unchanged(_)
        ));
    }
}
