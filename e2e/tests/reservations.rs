//! Reservations (issue 38), first step: what can never be a booking is refused by the
//! apiserver itself, with its own error and no webhook. On the shared plane, with the
//! generated Reservation CRD and the chart's window policy (rendered with
//! `reservations.maxWindow=48h`), as a person who holds exactly the rights to book:
//! get, list, create, update, patch and delete Reservations in Hearth's namespace.
//!
//! ```text
//! cargo test -p hearth-e2e --test reservations -- --nocapture
//! ```

use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use hearth_api::crd::reservation_crd;
use hearth_api::{Reservation, ReservationSpec};
use hearth_e2e::chart::render_chart;
use hearth_e2e::hearth::client_with_rules;
use hearth_e2e::process::poll;
use hearth_e2e::resources::{apply, create_crds, dynamic_api, wait_established};
use hearth_e2e::{ControlPlane, PlaneError};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(60);

fn at(rfc3339: &str) -> Time {
    Time(rfc3339.parse().expect("a test timestamp"))
}

fn booking(name: &str, spec: ReservationSpec) -> Reservation {
    Reservation::new(name, spec)
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
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated("reservation_crd").await?;
    let admin = plane.management_client().await?;
    let crds = create_crds(&admin, vec![serde_json::to_value(reservation_crd())?]).await?;
    wait_established(&admin, &crds, DEADLINE).await?;
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
    let rules = json!([{"apiGroups": ["fournos.dev"], "resources": ["reservations"],
        "verbs": ["get", "list", "create", "update", "patch", "delete"]}]);
    let booker = client_with_rules(plane, &scope.namespace, "booker", rules).await?;
    let api: Api<Reservation> = Api::namespaced(booker, &scope.namespace);
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
