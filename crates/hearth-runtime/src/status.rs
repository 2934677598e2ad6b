//! Status writes: server-side apply of only the fields a controller owns, under
//! its own field manager, so the three controllers never clobber each other.
//!
//! # Written only to the object planned for
//!
//! A status is planned from one object, and must not land on another that took its name
//! meanwhile (deleted and created again, with a new `metadata.uid`). The apiserver has no
//! UID precondition for a patch of the status subresource of a custom resource: a
//! `metadata.uid` in the body, merge patch or server-side apply, is silently dropped
//! (the status strategy copies the stored object's metadata over the patched one) and the
//! write lands on the successor (kube-apiserver v1.36, checked by
//! `e2e/tests/status_uid.rs`). What it does honour is `metadata.resourceVersion`: a patch
//! carrying one that is not the stored object's is refused, `409 Conflict` ("the object
//! has been modified"). A version belongs to one object only, so [`apply_status`] sends
//! the version of the object it was planned from; on a conflict it reads the object again
//! and, if its UID is still the planned one, applies once more at the version read (what
//! any unguarded apply would have done); if it is gone or has another UID, the write is
//! dropped: the successor gets a reconcile of its own from its watch event.
//!
//! # Written only from what the plan rested on
//!
//! A conflict also says the object changed since the plan was made: another controller's
//! fields (harmless to the plan), or what the plan was made from, the spec or the
//! controller's own earlier status, which a cache shows a moment after it is written.
//! A plan made from a cache that lags its own last write stamps anew what that write
//! already stamped (a lock's `ownerSetAt`), and applying it again at the version read
//! puts the older plan over the newer one. [`apply_status_resting_on`] applies again only
//! when what the plan rests on is unchanged in the object read; otherwise nothing is
//! written: the change's watch event brings a plan made from it.
//!
//! # Legacy conditions
//!
//! The Python controller that Hearth replaces appended a condition on every change, so a
//! migrated FournosCluster can carry the same condition `type` many times. Hearth's CRD
//! declares `status.conditions` a map list keyed by `type`. What the apiserver does with
//! that (kube-apiserver v1.36, checked by `e2e/tests/migration.rs`):
//! - a write that *introduces* a duplicate is refused, `422 Invalid`, `Duplicate value:
//!   {"type":"KubeconfigValid"}`;
//! - an object that already holds duplicates is not re-validated (the list check is
//!   ratcheted), and server-side apply to it is accepted: an applied type replaces every
//!   entry of that type, and the duplicates of the other types stay. Older apiservers
//!   (structured-merge-diff before it tolerated duplicate keys) refuse the apply instead.
//!
//! Either way the list must be repaired, once, for every controller, in this one place:
//! before applying, [`apply_status`] replaces `status.conditions` wholesale with the list
//! de-duplicated (the last condition of each type wins), by a JSON merge patch guarded by
//! the observed `metadata.resourceVersion`, so a concurrent writer is never overwritten.
//! Whichever controller writes first repairs it; the others then find nothing to repair.

use kube::api::{Api, Patch, PatchParams};

use crate::kit::answer::{is_conflict, is_not_found};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// How many times one status write is sent at most: the first, then again after each
/// conflict (someone wrote the object since it was planned, or since it was read again).
/// Past that, the conflict is the caller's, retried by its next reconcile.
const ATTEMPTS: usize = 3;

/// Applies `status` (a JSON object holding only this controller's fields) to the
/// status subresource of `obj` (the object, or a cache's view of it that serializes its
/// `status.conditions` as stored and keeps its `uid` and `resourceVersion`). Fields this
/// manager applied before and leaves out now are removed; other managers' fields are
/// untouched.
///
/// Returns the object as written, or `None` when nothing was written because the object
/// `obj` shows is gone: deleted, or replaced by another object of the same name (see the
/// module docs). Neither needs anyone's attention; a replaced object is noted at `info`.
/// An `obj` without a `resourceVersion` (never one read from the apiserver) is applied
/// unguarded.
///
/// If `obj` carries duplicated condition types (legacy state), the list is first
/// replaced by its de-duplicated form (see the module docs). If the apply is refused
/// for duplicates that `obj` (a cache's view) did not show, the live object is read,
/// repaired the same way, and the apply retried.
pub async fn apply_status<K, V>(
    api: &Api<K>,
    obj: &V,
    field_manager: &str,
    status: Value,
) -> Result<Option<K>, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
    V: Resource + Serialize,
{
    apply_status_resting_on(api, obj, field_manager, status, |_| true).await
}

/// [`apply_status`] of a plan that rests on part of the object it was made from (its
/// spec, the controller's own earlier status): after a conflict, applied again only if
/// `unchanged(live)` says that part is the same in the object read; if not, nothing is
/// written and `None` is returned, as for an object gone (see the module docs).
pub async fn apply_status_resting_on<K, V>(
    api: &Api<K>,
    obj: &V,
    field_manager: &str,
    status: Value,
    unchanged: impl Fn(&K) -> bool,
) -> Result<Option<K>, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
    V: Resource + Serialize,
{
    let name = obj.name_any();
    let planned = obj.meta().uid.as_deref();
    // force: these fields are ours by contract; a stale claim by someone else
    // (a person's kubectl edit) must not block the controller forever.
    let params = PatchParams::apply(field_manager).force();
    let mut next = repaired(api, &name, field_manager, obj).await?;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let Next::At(version) = next else {
            return Ok(None);
        };
        let body = apply_body::<K>(&status, version.as_deref());
        let refusal = match api.patch_status(&name, &params, &Patch::Apply(&body)).await {
            Ok(written) => return Ok(Some(written)),
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e) if attempt < ATTEMPTS && (is_conflict(&e) || is_duplicate_refusal(&e)) => e,
            Err(e) => return Err(e),
        };
        let live = match api.get_status(&name).await {
            Ok(live) => live,
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        if let Some(successor) = replacement(planned, &live) {
            tracing::info!(
                object = %name,
                planned_uid = planned.unwrap_or_default(),
                successor_uid = successor,
                "status not written: planned for an object since replaced by another of that name"
            );
            return Ok(None);
        }
        if is_conflict(&refusal) && !unchanged(&live) {
            tracing::debug!(
                object = %name,
                "status not written: what it was planned from changed; planning again from the change"
            );
            return Ok(None);
        }
        tracing::debug!(object = %name, error = %refusal, "status write refused; applying again");
        next = repaired(api, &name, field_manager, &live).await?;
    }
}

/// The version to apply to next, or that the object is gone.
#[derive(Debug, PartialEq)]
enum Next {
    At(Option<String>),
    Gone,
}

/// Repairs `obj`'s legacy conditions if it has any: the version to apply to is then the
/// repaired one (or `obj`'s, if someone else wrote first, which the apply finds out).
async fn repaired<K, V>(
    api: &Api<K>,
    name: &str,
    field_manager: &str,
    obj: &V,
) -> Result<Next, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
    V: Resource + Serialize,
{
    let observed = obj.meta().resource_version.clone();
    let Some(repair) = conditions_repair(obj) else {
        return Ok(Next::At(observed));
    };
    match repair_conditions(api, name, field_manager, repair).await {
        Ok(Some(repaired)) => Ok(Next::At(repaired.meta().resource_version.clone())),
        Ok(None) => Ok(Next::At(observed)),
        Err(e) if is_not_found(&e) => Ok(Next::Gone),
        Err(e) => Err(e),
    }
}

/// The server-side apply body of `status`, guarded by `resource_version` (the version of
/// the object it was planned from) when there is one.
pub fn apply_body<K: Resource<DynamicType = ()>>(
    status: &Value,
    resource_version: Option<&str>,
) -> Value {
    let mut body = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    if let Some(version) = resource_version {
        body["metadata"] = serde_json::json!({"resourceVersion": version});
    }
    body
}

/// The UID of `live` when it is not the object planned for (`planned`, if known).
fn replacement<'a, K: Resource>(planned: Option<&str>, live: &'a K) -> Option<&'a str> {
    let live = live.meta().uid.as_deref();
    match (planned, live) {
        (Some(planned), Some(live)) if planned != live => Some(live),
        _ => None,
    }
}

/// Replaces `status.conditions` with the merge patch `repair`; returns the repaired
/// object. `None`: someone wrote the object since it was observed (most likely another
/// controller repairing the same list), and the apply goes ahead; if the list still has
/// duplicates, it is refused and repaired from the live object.
async fn repair_conditions<K>(
    api: &Api<K>,
    name: &str,
    field_manager: &str,
    repair: Value,
) -> Result<Option<K>, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams {
        field_manager: Some(field_manager.to_owned()),
        ..PatchParams::default()
    };
    match api
        .patch_status(name, &params, &Patch::Merge(&repair))
        .await
    {
        Ok(repaired) => {
            tracing::info!(
                cluster = name,
                "replaced legacy status.conditions with one condition per type"
            );
            Ok(Some(repaired))
        }
        Err(e) if is_conflict(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether the apiserver refused a write for duplicate entries of a keyed list.
fn is_duplicate_refusal(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.message.to_ascii_lowercase().contains("duplicate"))
}

/// The JSON merge patch that repairs `obj`'s `status.conditions`, when they hold a
/// `type` more than once: `metadata.resourceVersion` (the precondition) and the
/// de-duplicated list. `None` when there is nothing to repair.
pub fn conditions_repair<K: Resource + Serialize>(obj: &K) -> Option<Value> {
    let value = serde_json::to_value(obj).ok()?;
    let conditions = value.pointer("/status/conditions")?.as_array()?;
    let deduped = dedup_conditions(conditions)?;
    let resource_version = obj.meta().resource_version.clone()?;
    Some(serde_json::json!({
        "metadata": {"resourceVersion": resource_version},
        "status": {"conditions": deduped},
    }))
}

/// `conditions` with one entry per `type` by the one rule of
/// [`hearth_api::conditions::dedup_by_type`] (the last of each type wins); `None` if no
/// type repeats. Entries without a string `type` are dropped from the repaired list.
pub fn dedup_conditions(conditions: &[Value]) -> Option<Vec<Value>> {
    hearth_api::conditions::dedup_by_type(conditions, |c| c.get("type").and_then(Value::as_str))
}

#[cfg(test)]
mod guard_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_api::{FournosCluster, FournosClusterSpec, FournosClusterStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use serde_json::json;

    fn cond(type_: &str, status: &str) -> Value {
        json!({"type": type_, "status": status, "reason": "R", "message": "m",
               "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    #[test]
    fn a_duplicate_key_refusal_is_recognised() {
        let api = |code: u16, message: &str| {
            kube::Error::Api(
                kube::core::Status::failure(message, "Invalid")
                    .with_code(code)
                    .boxed(),
            )
        };
        assert!(is_duplicate_refusal(&api(
            500,
            r#"failed to create typed live object: .status.conditions: duplicate entries for key [type="KubeconfigValid"]"#
        )));
        assert!(is_duplicate_refusal(&api(
            422,
            r#"status.conditions[1]: Duplicate value: {"type":"KubeconfigValid"}"#
        )));
        assert!(!is_duplicate_refusal(&api(
            409,
            "the object has been modified"
        )));
    }

    #[test]
    fn no_repeated_type_needs_no_repair() {
        let list = [cond("A", "True"), cond("B", "False")];
        assert_eq!(dedup_conditions(&list), None);
        assert_eq!(dedup_conditions(&[]), None);
    }

    #[test]
    fn the_last_condition_of_each_type_wins() {
        let list = [
            cond("KubeconfigValid", "False"),
            cond("GPUDiscovered", "False"),
            cond("KubeconfigValid", "True"),
            cond("GPUDiscovered", "True"),
            cond("KubeconfigValid", "Unknown"),
        ];
        assert_eq!(
            dedup_conditions(&list),
            Some(vec![
                cond("GPUDiscovered", "True"),
                cond("KubeconfigValid", "Unknown")
            ])
        );
    }

    #[test]
    fn an_entry_without_a_type_is_dropped() {
        let list = [cond("A", "True"), json!({"status": "True"})];
        assert_eq!(dedup_conditions(&list), Some(vec![cond("A", "True")]));
    }

    fn cluster(types: &[&str], rv: Option<&str>) -> FournosCluster {
        let mut fc = FournosCluster::new("a", FournosClusterSpec::default());
        fc.metadata.resource_version = rv.map(str::to_owned);
        fc.status = Some(FournosClusterStatus {
            conditions: types
                .iter()
                .map(|t| Condition {
                    type_: (*t).to_owned(),
                    status: "True".into(),
                    reason: "R".into(),
                    message: "m".into(),
                    last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
                    observed_generation: None,
                })
                .collect(),
            ..FournosClusterStatus::default()
        });
        fc
    }

    #[test]
    fn the_repair_is_guarded_by_the_observed_resource_version() {
        let fc = cluster(&["A", "B", "A"], Some("42"));
        let repair = conditions_repair(&fc).expect("a repair");
        assert_eq!(repair["metadata"]["resourceVersion"], "42");
        let types: Vec<&str> = repair["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["B", "A"]);
    }

    #[test]
    fn nothing_to_repair_without_duplicates_or_without_a_resource_version() {
        assert_eq!(conditions_repair(&cluster(&["A", "B"], Some("1"))), None);
        assert_eq!(
            conditions_repair(&cluster(&["A", "A"], None)),
            None,
            "an unguarded replace could clobber a concurrent write"
        );
        let mut bare = cluster(&[], Some("1"));
        bare.status = None;
        assert_eq!(conditions_repair(&bare), None);
    }
}
