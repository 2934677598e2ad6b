//! Process hygiene: whichever way a plane ends, none of its processes survives. Each test
//! owns its plane (they stop it), so this file is a test binary of its own, and its tests
//! run one after the other to keep the 2-core machines responsive.

use std::time::Duration;

use anyhow::{Result, ensure};
use hearth_e2e::process::{is_alive, poll};
use hearth_e2e::{ControlPlane, PlaneOptions};
use tokio::sync::Mutex;

/// Serializes the tests of this file: each boots a whole plane.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

async fn all_gone(pids: &[u32], what: &str) -> Result<()> {
    poll(what, Duration::from_secs(60), || async {
        Ok(pids.iter().all(|pid| !is_alive(*pid)).then_some(()))
    })
    .await
    .map_err(|e| {
        let alive: Vec<_> = pids.iter().filter(|p| is_alive(**p)).collect();
        anyhow::anyhow!("{e}: still alive: {alive:?}")
    })
}

async fn started_plane() -> Result<(ControlPlane, Vec<u32>)> {
    let plane = ControlPlane::start(PlaneOptions::default()).await?;
    let pids = plane.pids();
    // Supervisor, etcd, management + 2 target apiservers, Kueue.
    ensure!(pids.len() >= 6, "unexpected processes: {pids:?}");
    ensure!(
        pids.iter().all(|p| is_alive(*p)),
        "all running after start: {pids:?}"
    );
    Ok((plane, pids))
}

#[tokio::test]
async fn stop_leaves_no_process() -> Result<()> {
    let _serial = ONE_AT_A_TIME.lock().await;
    let (plane, pids) = started_plane().await?;
    let state_dir = plane.state_dir();
    let stopped = plane.stop().await?;
    assert_eq!(stopped, pids);
    // stop() returns once the supervisor has reaped everything: no waiting needed here.
    let alive: Vec<_> = pids.iter().filter(|p| is_alive(**p)).collect();
    assert!(alive.is_empty(), "still alive after stop: {alive:?}");
    assert!(!state_dir.join("data").exists(), "etcd data removed");
    assert!(
        state_dir.join("logs").join("plane.log").exists(),
        "logs kept"
    );
    Ok(())
}

#[tokio::test]
async fn dropping_the_plane_like_a_dying_test_process_leaves_no_process() -> Result<()> {
    let _serial = ONE_AT_A_TIME.lock().await;
    let (plane, pids) = started_plane().await?;
    // What the kernel does when the test process dies: the supervisor's stdin closes.
    drop(plane);
    all_gone(&pids, "plane processes after its owner went away").await
}

#[tokio::test]
async fn a_killed_supervisor_takes_its_children_along() -> Result<()> {
    let _serial = ONE_AT_A_TIME.lock().await;
    let (plane, pids) = started_plane().await?;
    let supervisor = plane.state().supervisor_pid;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(supervisor as i32),
        nix::sys::signal::Signal::SIGKILL,
    )?;
    // No orderly shutdown happens: the children go through their parent-death signal.
    all_gone(&pids, "plane processes after SIGKILL of the supervisor").await
}
