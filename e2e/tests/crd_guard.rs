//! A stale FournosCluster CRD is refused, not obeyed: Helm never upgrades `crds/`, and an
//! older CRD makes the apiserver prune the status fields it does not declare, so
//! lock-manager's `status.lockJobUID` would vanish from every write. On a plane of its own
//! (the test replaces the CRD), with the CRD of a release before `lockJobUID` (the
//! generated CRD without it): lock-manager, run as its chart ServiceAccount, exits non-zero
//! naming the field and what to apply, and never answers `/readyz`; `kubectl fournos
//! doctor` names it too. Without the right to read the CRD (RBAC of an older chart) it
//! warns and runs. Once the current CRD is applied, both pass.
//!
//! ```text
//! cargo build --workspace --bins && cargo test -p hearth-e2e --test crd_guard -- --nocapture
//! ```

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use hearth_api::FournosCluster;
use hearth_e2e::hearth::{self, Controller, doctor_in_scope, service_account_kubeconfig};
use hearth_e2e::lab::own_plane;
use hearth_e2e::process::{free_port, http_get};
use hearth_e2e::resources::{create_crds, wait_established};
use hearth_e2e::{ControlPlane, Isolated};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::CustomResourceExt as _;
use kube::api::{Api, DeleteParams};
use serde_json::Value;
use tokio::sync::OnceCell;

const DEADLINE: Duration = Duration::from_secs(60);

async fn plane() -> Result<&'static ControlPlane> {
    static PLANE: OnceCell<std::result::Result<ControlPlane, String>> = OnceCell::const_new();
    own_plane(&PLANE, Ok).await
}

/// The generated CRD (`FournosCluster::crd()`), with `status.lockJobUID` removed when
/// `stale`.
fn crd(stale: bool) -> Result<Value> {
    let mut crd = serde_json::to_value(FournosCluster::crd())?;
    if stale {
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
            ["properties"]
            .as_object_mut()
            .context("the CRD's status properties")?
            .remove("lockJobUID")
            .context("status.lockJobUID in the generated CRD")?;
    }
    Ok(crd)
}

/// Serves `crd` as the FournosCluster CRD and waits until it is established.
async fn serve(plane: &ControlPlane, crd: Value) -> Result<()> {
    let client = plane.management_client().await?;
    let names = create_crds(&client, vec![crd]).await?;
    wait_established(&client, &names, DEADLINE).await?;
    Ok(())
}

/// What one run of lock-manager that was expected to stop printed, and whether `/readyz`
/// ever answered 200 while it ran.
struct Exited {
    code: Option<i32>,
    output: String,
    was_ready: bool,
}

/// Runs hearth-lock-manager in `scope` as its chart ServiceAccount (`kubeconfig`) and
/// waits, with a deadline, for it to exit by itself.
async fn run_until_exit(scope: &Isolated, kubeconfig: &Path) -> Result<Exited> {
    hearth::ensure_built().await?;
    let admin = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let log_path = std::env::temp_dir().join(format!("hearth-crd-guard-{}.log", scope.id));
    let log = std::fs::File::create(&log_path)?;
    let mut child = tokio::process::Command::new(hearth_e2e::plane::hearth_binary(
        Controller::LockManager.binary(),
    )?)
    .envs(scope.controller_env())
    .env("HEARTH_SENTINEL", "workload")
    .env("HEARTH_LEADER_ELECTION", "false")
    .env("HEARTH_ADMIN_ADDR", admin.to_string())
    .env("KUBECONFIG", kubeconfig)
    .stdout(Stdio::from(log.try_clone()?))
    .stderr(Stdio::from(log))
    .kill_on_drop(true)
    .spawn()?;
    let mut was_ready = false;
    let started = tokio::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        ensure!(
            started.elapsed() < DEADLINE,
            "hearth-lock-manager still runs after {DEADLINE:?} on a stale CRD"
        );
        was_ready |= matches!(http_get(admin, "/readyz").await, Ok((200, _)));
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    Ok(Exited {
        code: status.code(),
        output: std::fs::read_to_string(&log_path)?,
        was_ready,
    })
}

#[tokio::test]
async fn a_stale_crd_stops_lock_manager_and_the_doctor_names_it() -> Result<()> {
    let plane = plane().await?;
    let scope = plane.isolated("stale_crd").await?;
    serve(plane, crd(true)?).await?;
    let kubeconfig = service_account_kubeconfig(plane, &scope, Controller::LockManager).await?;

    let exited = run_until_exit(&scope, &kubeconfig).await?;
    println!("$ hearth-lock-manager (stale CRD)\n{}", exited.output);
    ensure!(
        exited.code.is_some_and(|c| c != 0),
        "lock-manager on a stale CRD exited with {:?}:\n{}",
        exited.code,
        exited.output
    );
    for needle in [
        "lacks status fields hearth-lock-manager writes: status.lockJobUID",
        "Refusing to run",
        "kubectl apply --server-side --force-conflicts -f charts/hearth/crds/",
    ] {
        ensure!(
            exited.output.contains(needle),
            "{needle:?} not in lock-manager's output:\n{}",
            exited.output
        );
    }
    ensure!(!exited.was_ready, "lock-manager was ready on a stale CRD");

    let (code, text) = doctor_in_scope(plane, &scope).await?;
    println!("$ kubectl fournos doctor (stale CRD)\n{text}");
    ensure!(code == 4, "doctor on a stale CRD exited {code}:\n{text}");
    for needle in [
        "MISSING the FournosCluster CRD is older than this Hearth",
        "hearth-lock-manager writes status.lockJobUID",
        "kubectl apply --server-side --force-conflicts -f charts/hearth/crds/",
    ] {
        ensure!(text.contains(needle), "{needle:?} not in:\n{text}");
    }

    // An install whose RBAC predates the rule: warned, and it runs.
    let bindings: Api<ClusterRoleBinding> = Api::all(plane.management_client().await?);
    bindings
        .delete(
            &format!("hearth-lock-manager-{}", scope.namespace),
            &DeleteParams::default(),
        )
        .await?;
    let lm = hearth::start(plane, &scope, Controller::LockManager, "0", &[]).await?;
    ensure!(
        lm.log()
            .contains("cannot check that the FournosCluster CRD declares"),
        "no warning without the right to read the CRD:\n{}",
        lm.log_tail(30)
    );
    lm.stop_cleanly(plane).await?;

    // The fix the message names: the current CRD. Both pass.
    serve(plane, crd(false)?).await?;
    let (code, text) = doctor_in_scope(plane, &scope).await?;
    ensure!(
        text.contains("ok      the FournosCluster CRD declares every status field"),
        "doctor after the fix exited {code}:\n{text}"
    );
    Ok(())
}
