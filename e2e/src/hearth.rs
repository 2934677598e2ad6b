//! Hearth's own controllers as processes on a plane, configured for one test's scope.
//!
//! A thin layer over [`ControlPlane::start_controller`]: the binaries run as children
//! of the plane's supervisor (so they die with it), get the test's namespaces and
//! ClusterQueue through [`Scope::controller_env`](crate::Scope::controller_env), leader
//! election off unless the test asks for it, and a fast resync so tests never wait a
//! production interval.

use crate::error::Result;
use crate::plane::{ControlPlane, Isolated, hearth_binary};
use crate::protocol::ControllerState;

/// One of the three Hearth binaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Controller {
    Discovery,
    KueueSync,
    LockManager,
}

impl Controller {
    pub const ALL: [Controller; 3] = [Self::Discovery, Self::KueueSync, Self::LockManager];

    /// The binary's name (also its field manager and Lease name).
    pub fn binary(self) -> &'static str {
        match self {
            Self::Discovery => hearth_api::names::controllers::DISCOVERY,
            Self::KueueSync => hearth_api::names::controllers::KUEUE_SYNC,
            Self::LockManager => hearth_api::names::controllers::LOCK_MANAGER,
        }
    }
}

/// A running controller: its name on the plane (for stop/kill), admin address and log.
#[derive(Clone, Debug)]
pub struct Running {
    pub controller: Controller,
    pub state: ControllerState,
}

impl Running {
    pub fn name(&self) -> &str {
        &self.state.name
    }

    /// `http://<admin address>` for `/healthz`, `/readyz`, `/metrics`.
    pub fn admin_url(&self) -> String {
        format!("http://{}", self.state.admin_addr)
    }

    /// Everything the controller has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.state.log).unwrap_or_default()
    }

    pub async fn stop(&self, plane: &ControlPlane) -> Result<()> {
        plane.stop_controller(self.name()).await
    }

    /// SIGKILL, as a crash at an arbitrary instant.
    pub async fn kill(&self, plane: &ControlPlane) -> Result<()> {
        plane.kill_controller(self.name()).await
    }
}

/// Starts `controller` for the test scope `iso`, with `extra` environment on top
/// (later entries win). `instance` distinguishes several replicas of one controller
/// in one test ("0", "1", …). Returns once its `/readyz` answers.
pub async fn start(
    plane: &ControlPlane,
    iso: &Isolated,
    controller: Controller,
    instance: &str,
    extra: &[(&str, &str)],
) -> Result<Running> {
    let program = hearth_binary(controller.binary())?;
    let mut env = iso.controller_env();
    env.extend(
        [
            ("HEARTH_LEADER_ELECTION", "false"),
            ("HEARTH_RECONCILE_INTERVAL_SEC", "2"),
            (
                "HEARTH_LOG_LEVEL",
                "debug,kube=info,hyper=info,tower=info,rustls=info",
            ),
            (
                "HEARTH_POD_NAME",
                &format!("{}-{instance}", controller.binary()),
            ),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned())),
    );
    env.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    let name = format!("{}-{}-{instance}", controller.binary(), iso.id);
    let state = plane.start_controller(&name, &program, env).await?;
    Ok(Running { controller, state })
}
