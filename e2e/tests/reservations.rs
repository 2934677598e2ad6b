//! Reservations (issue 38), as far as they are built: what can never be a booking is
//! refused by the apiserver itself, with its own error and no webhook (the generated CRD
//! and the chart's window policy, rendered with `reservations.maxWindow=48h`); what can
//! is accepted or refused by lock-manager, and an accepted one is never displaced. Each as
//! a person who holds exactly the rights to book: get, list, create, update, patch and
//! delete Reservations in Hearth's namespace. One plane for the binary (the lock tests'),
//! which serves the Reservation CRD generated from this build's types.
//!
//! Decisions do not depend on the sentinel kind (no sentinel is made for them yet), so
//! they run with `workload` sentinels; enforcement, which does, will run in both modes.
//!
//! ```text
//! cargo test -p hearth-e2e --test reservations -- --nocapture
//! ```

use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use hearth_api::conditions::find;
use hearth_api::names::condition_types::ACCEPTED;
use hearth_api::{Reservation, ReservationPhase, ReservationSpec};
use hearth_e2e::chart::render_chart;
use hearth_e2e::hearth::client_with_rules;
use hearth_e2e::lab::{LockLab, Mode, lock_plane, start_lock_manager};
use hearth_e2e::process::poll;
use hearth_e2e::process::{holds_for, until};
use hearth_e2e::resources::{apply, dynamic_api};
use hearth_e2e::{ControlPlane, PlaneError};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(60);

fn at(rfc3339: &str) -> Time {
    Time(rfc3339.parse().expect("a test timestamp"))
}

fn booking(name: &str, spec: ReservationSpec) -> Reservation {
    Reservation::new(name, spec)
}

/// Reservations in `namespace` as a person who holds exactly the rights to book.
async fn booker(plane: &ControlPlane, namespace: &str) -> Result<Api<Reservation>> {
    let rules = json!([{"apiGroups": ["fournos.dev"], "resources": ["reservations"],
        "verbs": ["get", "list", "create", "update", "patch", "delete"]}]);
    let client = client_with_rules(plane, namespace, "booker", rules).await?;
    Ok(Api::namespaced(client, namespace))
}

fn thursday() -> ReservationSpec {
    ReservationSpec {
        cluster: "gpu-a".into(),
        owner: "alice@example.com".into(),
        start: at("2026-12-03T14:00:00Z"),
        end: at("2026-12-03T18:00:00Z"),
        drain_before: Some("2h".into()),
        reason: Some("MLPerf run for release 3.2, PSAP-1234".into()),
    }
}

/// The apiserver's refusal of `result`: its code and message, or an error when it was
/// accepted or failed otherwise.
fn refusal<T>(what: &str, result: kube::Result<T>) -> Result<(u16, String)> {
    match result {
        Ok(_) => bail!("{what}: accepted; the apiserver must refuse it"),
        Err(kube::Error::Api(status)) => Ok((status.code, status.message)),
        Err(e) => Err(e).context(format!("{what}: not an answer of the apiserver")),
    }
}

#[tokio::test]
async fn what_can_never_be_a_booking_is_refused_by_the_apiserver() -> Result<()> {
    let plane = lock_plane().await?;
    let scope = plane.isolated("reservation_crd").await?;
    let admin = plane.management_client().await?;
    let policy: Vec<_> = render_chart(&scope, &[("reservations.maxWindow", "48h")])?
        .into_iter()
        .filter(|doc| {
            doc["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("ValidatingAdmissionPolicy"))
        })
        .collect();
    ensure!(
        policy.len() == 2,
        "the chart renders a policy and its binding: {policy:?}"
    );
    for doc in &policy {
        apply(&admin, doc).await?;
    }
    let api = booker(plane, &scope.namespace).await?;
    let post = PostParams::default();

    // The apiserver compiles and binds a policy in the background: wait until it refuses
    // a window one minute over the limit (one that is created meanwhile is deleted).
    let too_long = ReservationSpec {
        end: at("2026-12-05T14:01:00Z"),
        ..thursday()
    };
    let message = poll("the window policy in force", DEADLINE, || async {
        match api
            .create(&post, &booking("too-long", too_long.clone()))
            .await
        {
            Ok(_) => {
                api.delete("too-long", &DeleteParams::default())
                    .await
                    .map_err(|source| PlaneError::Kube {
                        context: "deleting a booking made before the policy held".into(),
                        source,
                    })?;
                Ok(None)
            }
            Err(kube::Error::Api(status)) => Ok(Some((status.code, status.message))),
            Err(source) => Err(PlaneError::Kube {
                context: "booking too long a window".into(),
                source,
            }),
        }
    })
    .await?;
    ensure!(
        message.0 == 422
            && message.1.contains("at most 48h")
            && message.1.contains("reservations.maxWindow"),
        "too long a window is refused naming the limit and the chart value: {message:?}"
    );

    // Exactly the limit is a booking, and so is Thursday afternoon.
    let two_days = ReservationSpec {
        end: at("2026-12-05T14:00:00Z"),
        ..thursday()
    };
    api.create(&post, &booking("two-days", two_days)).await?;
    let created = api.create(&post, &booking("thursday", thursday())).await?;
    ensure!(
        created.spec == thursday(),
        "stored as sent: {:?}",
        created.spec
    );

    let refused: Vec<(&str, ReservationSpec, &str)> = vec![
        (
            "an empty window",
            ReservationSpec {
                end: thursday().start,
                ..thursday()
            },
            "spec.end must be after spec.start",
        ),
        (
            "an end before the start",
            ReservationSpec {
                end: at("2026-12-03T13:00:00Z"),
                ..thursday()
            },
            "spec.end must be after spec.start",
        ),
        (
            "an owner that forges a line",
            ReservationSpec {
                owner: "alice\nbob".into(),
                ..thursday()
            },
            "spec.owner",
        ),
        (
            "an owner that reorders what is shown",
            ReservationSpec {
                owner: "alice\u{202e}moc.elpmaxe".into(),
                ..thursday()
            },
            "spec.owner",
        ),
        (
            "a reason with a NUL",
            ReservationSpec {
                reason: Some("run\u{0}".into()),
                ..thursday()
            },
            "spec.reason",
        ),
        (
            "a cluster name no FournosCluster can have",
            ReservationSpec {
                cluster: "GPU_A".into(),
                ..thursday()
            },
            "spec.cluster",
        ),
        (
            "a cluster name longer than a label",
            ReservationSpec {
                cluster: "a".repeat(64),
                ..thursday()
            },
            "spec.cluster",
        ),
        (
            "a drain of zero",
            ReservationSpec {
                drain_before: Some("0m".into()),
                ..thursday()
            },
            "spec.drainBefore",
        ),
    ];
    for (i, (what, spec, names)) in refused.into_iter().enumerate() {
        let (code, message) = refusal(
            what,
            api.create(&post, &booking(&format!("refused-{i}"), spec))
                .await,
        )?;
        ensure!(
            code == 422 && message.contains(names),
            "{what}: refused as invalid, naming {names:?}: {code} {message}"
        );
    }

    // Once made, a booking keeps its cluster and its owner; its owner may shorten it.
    let patch = |spec: serde_json::Value| Patch::Merge(json!({"spec": spec}));
    let pp = PatchParams::default();
    for (what, spec, says) in [
        (
            "moving it to another cluster",
            json!({"cluster": "gpu-b"}),
            "spec.cluster cannot change",
        ),
        (
            "giving it to someone else",
            json!({"owner": "mallory"}),
            "spec.owner cannot change",
        ),
    ] {
        let (code, message) = refusal(what, api.patch("thursday", &pp, &patch(spec)).await)?;
        ensure!(
            code == 422 && message.contains(says),
            "{what}: {code} {message}"
        );
    }
    let shorter = api
        .patch(
            "thursday",
            &pp,
            &patch(json!({"end": "2026-12-03T16:00:00Z"})),
        )
        .await?;
    ensure!(shorter.spec.end == at("2026-12-03T16:00:00Z"));
    let (code, message) = refusal(
        "lengthening it past the limit",
        api.patch(
            "thursday",
            &pp,
            &patch(json!({"end": "2026-12-06T16:00:00Z"})),
        )
        .await,
    )?;
    ensure!(
        code == 422 && message.contains("at most 48h"),
        "{code} {message}"
    );

    // Status is lock-manager's: a booker cannot write that their booking is Active.
    let (code, message) = refusal(
        "a booker writing status",
        api.patch_status(
            "thursday",
            &pp,
            &Patch::Merge(json!({"status": {"phase": "Active"}})),
        )
        .await,
    )?;
    ensure!(
        code == 403,
        "status needs reservations/status: {code} {message}"
    );

    for doc in &policy {
        let (api, name) = dynamic_api(&admin, doc).await?;
        api.delete(&name, &DeleteParams::default()).await?;
    }
    Ok(())
}

/// The phase, the reservation named as overlapping, and the `Accepted` reason of `r`.
fn verdict(r: &Reservation) -> (Option<ReservationPhase>, Option<String>, String) {
    let status = r.status.clone().unwrap_or_default();
    let reason = find(&status.conditions, ACCEPTED).map_or(String::new(), |c| c.reason.clone());
    (status.phase, status.conflicts_with, reason)
}

/// Waits until reservation `name` has the verdict `wanted` for its current generation.
async fn wait_verdict(
    api: &Api<Reservation>,
    name: &str,
    wanted: (ReservationPhase, Option<&str>, &str),
) -> Result<Reservation> {
    until(
        &format!("reservation {name}: {wanted:?}"),
        DEADLINE,
        || async {
            let r = api.get(name).await?;
            let (phase, with, reason) = verdict(&r);
            let current =
                r.status.as_ref().and_then(|s| s.observed_generation) == r.metadata.generation;
            Ok(
                if current
                    && phase == Some(wanted.0)
                    && with.as_deref() == wanted.1
                    && reason == wanted.2
                {
                    Ok(r)
                } else {
                    Err(format!(
                        "{phase:?} {with:?} {reason} (generation {:?})",
                        r.metadata.generation
                    ))
                },
            )
        },
    )
    .await
}

/// What `name`'s owner does to move its end to `to` (hh:mm), then its verdict `wanted`.
async fn end_at(
    api: &Api<Reservation>,
    name: &str,
    to: &str,
    wanted: (ReservationPhase, Option<&str>, &str),
) -> Result<Reservation> {
    let end = format!("2027-01-14T{to}:00Z");
    let patch = Patch::Merge(json!({"spec": {"end": end}}));
    api.patch(name, &PatchParams::default(), &patch).await?;
    wait_verdict(api, name, wanted).await
}

fn window(cluster: &str, owner: &str, from: &str, to: &str) -> ReservationSpec {
    ReservationSpec {
        cluster: cluster.to_owned(),
        owner: owner.to_owned(),
        start: at(&format!("2027-01-14T{from}:00Z")),
        end: at(&format!("2027-01-14T{to}:00Z")),
        drain_before: None,
        reason: None,
    }
}

#[tokio::test]
async fn overlapping_bookings_are_decided_once_and_an_accepted_one_is_never_displaced() -> Result<()>
{
    let lab = LockLab::new(lock_plane().await?, "reservation_verdicts").await?;
    let cluster = lab.synced_cluster("booked").await?;
    let lock_manager = start_lock_manager(&lab, Mode::Workload).await?;
    let api = booker(lab.plane, &lab.scope.namespace).await?;
    let post = PostParams::default();

    api.create(
        &post,
        &booking("m-first", window(&cluster, "alice", "14:00", "18:00")),
    )
    .await?;
    let first = wait_verdict(
        &api,
        "m-first",
        (ReservationPhase::Accepted, None, "Accepted"),
    )
    .await?;
    let held = first.status.clone().unwrap_or_default();
    ensure!(
        held.held_start == Some(at("2027-01-14T14:00:00Z"))
            && held.held_end == Some(at("2027-01-14T18:00:00Z")),
        "the window held is recorded: {held:?}"
    );

    // Later bookings that overlap: one named to sort before it, one after. Both refused,
    // naming the one that holds the window; one that only touches it is accepted.
    for (name, from, to) in [
        ("a-second", "15:00", "16:00"),
        ("z-third", "17:00", "19:00"),
    ] {
        api.create(&post, &booking(name, window(&cluster, "bob", from, to)))
            .await?;
    }
    api.create(
        &post,
        &booking("touching", window(&cluster, "carol", "18:00", "20:00")),
    )
    .await?;
    for name in ["a-second", "z-third"] {
        wait_verdict(
            &api,
            name,
            (ReservationPhase::Conflict, Some("m-first"), "Conflict"),
        )
        .await?;
    }
    wait_verdict(
        &api,
        "touching",
        (ReservationPhase::Accepted, None, "Accepted"),
    )
    .await?;
    wait_verdict(
        &api,
        "m-first",
        (ReservationPhase::Accepted, None, "Accepted"),
    )
    .await?;

    // Its owner shortens it: the time it gave back is free, but a refusal stands until its
    // owner changes the booking; then it is decided again, and accepted.
    let accepted = (ReservationPhase::Accepted, None, "Accepted");
    end_at(&api, "m-first", "15:00", accepted).await?;
    wait_verdict(
        &api,
        "a-second",
        (ReservationPhase::Conflict, Some("m-first"), "Conflict"),
    )
    .await?;
    end_at(&api, "a-second", "16:30", accepted).await?;

    // Lengthening into another booking keeps the shorter window it held.
    let kept = end_at(
        &api,
        "m-first",
        "16:00",
        (
            ReservationPhase::Accepted,
            Some("a-second"),
            "LengtheningRefused",
        ),
    )
    .await?;
    ensure!(
        kept.status.and_then(|s| s.held_end) == Some(at("2027-01-14T15:00:00Z")),
        "the window held stays 14:00-15:00"
    );

    // A restart changes no verdict: every reservation stays at its version.
    let versions = |list: Vec<Reservation>| -> Vec<(String, Option<String>)> {
        list.iter()
            .map(|r| (r.name_any(), r.resource_version()))
            .collect()
    };
    let before = versions(api.list(&Default::default()).await?.items);
    lock_manager.stop(lab.plane).await?;
    let _restarted = start_lock_manager(&lab, Mode::Workload).await?;
    holds_for(
        "no verdict changed by a restart",
        Duration::from_secs(5),
        || async {
            let now = versions(api.list(&Default::default()).await?.items);
            Ok(if now == before {
                Ok(())
            } else {
                Err(format!("{now:?} != {before:?}"))
            })
        },
    )
    .await?;
    Ok(())
}
