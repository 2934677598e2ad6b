//! Leader election on a `coordination.k8s.io/v1` Lease named after the controller.
//!
//! Every replica watches and computes; only the holder writes. The Lease protocol itself
//! (acquire an expired or free Lease with a conflict-checked server-side apply, renew
//! `grace` seconds before expiry, clear `holderIdentity` on release) is kube-lease-manager's.
//! This module adds what a writer needs on top:
//!
//! - **Step down on any failed Lease call.** kube-lease-manager keeps calling itself leader
//!   while its renewals fail; we publish `false` at the first error, then start over with a
//!   fresh manager, which re-reads the Lease and resumes at once if we still hold it.
//! - **Bounded Lease calls.** The Lease has its own client whose requests time out well
//!   within `grace` and are not retried, so a hung renewal becomes an error (and a step-down)
//!   before the Lease can expire and another replica take it.
//! - **Release last.** The Lease is released only when [`run`] is told to stop, which the
//!   runtime does after the controller has returned, so no write can follow the release.

use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseParams};
use tokio::{sync::watch, task::JoinHandle};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::{args::CommonArgs, metrics::Metrics};

/// How long shutdown waits for the Lease to be released (a few API calls).
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);
const MIN_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The longest a management write may take, whatever the Lease allows: a write that
/// takes longer is stuck, and the next reconcile does better than waiting.
pub const MAX_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LeaseError {
    #[error(
        "the Lease renewal interval ({renew}s) must be at least 1s and less than \
         --lease-duration-sec ({duration}s): set --lease-renew-sec (or --lease-grace-sec) \
         below the duration"
    )]
    RenewNotBelowDuration { duration: u64, renew: u64 },
    #[error(
        "--lease-renew-sec ({renew}) and --lease-grace-sec ({grace}) disagree with \
         --lease-duration-sec ({duration}): renew + grace must equal the duration; set only one"
    )]
    RenewAndGraceDisagree {
        duration: u64,
        renew: u64,
        grace: u64,
    },
    #[error("--identity must not be empty")]
    EmptyIdentity,
}

/// Which Lease to hold, as whom, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSettings {
    pub name: String,
    pub namespace: String,
    pub identity: String,
    pub duration_sec: u64,
    pub grace_sec: u64,
}

impl LeaseSettings {
    /// Validated here because kube-lease-manager panics on inconsistent durations.
    pub fn new(controller: &str, args: &CommonArgs, identity: String) -> Result<Self, LeaseError> {
        if identity.is_empty() {
            return Err(LeaseError::EmptyIdentity);
        }
        let duration = args.lease_duration_sec;
        let renew = renew_interval_sec(duration, args.lease_renew_sec, args.lease_grace_sec)?;
        if renew == 0 || renew >= duration {
            return Err(LeaseError::RenewNotBelowDuration { duration, renew });
        }
        let grace = duration - renew;
        Ok(Self {
            name: controller.to_owned(),
            namespace: args.lease_namespace().to_owned(),
            identity,
            duration_sec: duration,
            grace_sec: grace,
        })
    }

    /// Seconds between the holder's renewals.
    pub fn renew_interval_sec(&self) -> u64 {
        self.duration_sec - self.grace_sec
    }

    /// Timeout of each Lease API call. A renewal starts `grace` before expiry; failing it
    /// within half of that leaves the other half for clock skew before anyone may take over.
    pub fn request_timeout(&self) -> Duration {
        (Duration::from_secs(self.grace_sec) / 2).max(Duration::from_secs(1))
    }

    /// Timeout of each management write (see `client.rs`), so that no write of a replica
    /// that lost the Lease lands after another replica may have taken it. The Lease is
    /// ours until `duration` after the last renewal; the renewal starts `grace` before
    /// that and, when it fails, we step down within [`Self::request_timeout`] (`grace/2`).
    /// A write sent just before the step-down then ends within `grace/3` more, `grace/6`
    /// before the Lease expires (room for clock skew and the new leader's own round
    /// trip). At most [`MAX_WRITE_TIMEOUT`]; never under 1 s, which only a 1-2 s grace
    /// (a test setting) makes longer than the margin.
    pub fn write_timeout(&self) -> Duration {
        (Duration::from_secs(self.grace_sec) / 3).clamp(Duration::from_secs(1), MAX_WRITE_TIMEOUT)
    }
}

/// The write timeout without leader election (one replica, no failover to race): the cap.
pub fn write_timeout(lease: Option<&LeaseSettings>) -> Duration {
    lease.map_or(MAX_WRITE_TIMEOUT, LeaseSettings::write_timeout)
}

/// The renewal interval from whichever of `renew` and `grace` is set; two thirds of the
/// duration when neither is (renew 40 s of a 60 s Lease, like 10 s of Kubernetes' 15 s).
fn renew_interval_sec(
    duration: u64,
    renew: Option<u64>,
    grace: Option<u64>,
) -> Result<u64, LeaseError> {
    match (renew, grace) {
        (Some(renew), Some(grace)) if renew.checked_add(grace) != Some(duration) => {
            Err(LeaseError::RenewAndGraceDisagree {
                duration,
                renew,
                grace,
            })
        }
        (Some(renew), _) => Ok(renew),
        (None, Some(grace)) => Ok(duration.saturating_sub(grace)),
        (None, None) => Ok((duration * 2 / 3).max(1)),
    }
}

/// Leadership that never changes: `--leader-election=false`. Keep the sender alive as
/// long as the receivers are used, or their `changed()` returns at once.
pub(crate) fn always_leader(metrics: &Metrics) -> watch::Sender<bool> {
    metrics.set_leader(true);
    watch::Sender::new(true)
}

/// Starts electing. The receiver says whether this replica holds the Lease now. The task
/// releases the Lease and ends once `stop` is cancelled.
pub(crate) fn spawn(
    config: kube::Config,
    settings: LeaseSettings,
    metrics: Metrics,
    stop: CancellationToken,
) -> (watch::Receiver<bool>, JoinHandle<()>) {
    let (tx, rx) = watch::channel(false);
    metrics.set_leader(false);
    let publisher = Publisher { tx, metrics };
    // A root span: the election outlives the startup span it is started from.
    let span = tracing::info_span!(
        parent: None,
        "leader_election",
        lease = %settings.name,
        namespace = %settings.namespace,
        identity = %settings.identity,
        duration_sec = settings.duration_sec,
        renew_every_sec = settings.renew_interval_sec(),
    );
    let task = tokio::spawn(run(config, settings, publisher, stop).instrument(span));
    (rx, task)
}

struct Publisher {
    tx: watch::Sender<bool>,
    metrics: Metrics,
}

impl Publisher {
    fn set(&self, leader: bool) {
        self.metrics.set_leader(leader);
        let changed = self.tx.send_if_modified(|current| {
            let changed = *current != leader;
            *current = leader;
            changed
        });
        if changed {
            if leader {
                tracing::info!("acquired the leader Lease: this replica now writes");
            } else {
                tracing::info!("not the leader: this replica stops writing");
            }
        }
    }
}

enum Event {
    Stop,
    Changed(kube_lease_manager::Result<bool>),
}

async fn run(
    config: kube::Config,
    settings: LeaseSettings,
    publisher: Publisher,
    stop: CancellationToken,
) {
    let client = match lease_client(config, settings.request_timeout()) {
        Ok(client) => client,
        Err(error) => {
            // Cannot happen with a config the main client was built from; never lead then.
            tracing::error!(%error, "cannot build the Lease client; never leading");
            stop.cancelled().await;
            return;
        }
    };
    let mut backoff = Backoff::default();
    loop {
        let manager = tokio::select! {
            () = stop.cancelled() => return,
            built = build_manager(&client, &settings) => built,
        };
        let manager = match manager {
            Ok(manager) => manager,
            Err(error) => {
                tracing::warn!(%error, "cannot read or create the Lease; retrying");
                if sleep_or_stop(backoff.next_delay(), &stop).await {
                    return;
                }
                continue;
            }
        };
        loop {
            // Computed first so that the `changed()` future (and the lock it may hold on the
            // manager's state) is dropped before `release()` runs.
            let event = tokio::select! {
                () = stop.cancelled() => Event::Stop,
                changed = manager.changed() => Event::Changed(changed),
            };
            match event {
                Event::Stop => {
                    release(&manager, &publisher).await;
                    return;
                }
                Event::Changed(Ok(leader)) => {
                    backoff.reset();
                    publisher.set(leader);
                }
                Event::Changed(Err(error)) => {
                    publisher.set(false);
                    tracing::warn!(%error, "Lease call failed; stepped down until the Lease is confirmed again");
                    if sleep_or_stop(backoff.next_delay(), &stop).await {
                        release(&manager, &publisher).await;
                        return;
                    }
                    break;
                }
            }
        }
    }
}

async fn build_manager(
    client: &Client,
    settings: &LeaseSettings,
) -> kube_lease_manager::Result<LeaseManager> {
    LeaseManagerBuilder::new(client.clone(), &settings.name)
        .with_namespace(&settings.namespace)
        .with_parameters(LeaseParams::new(
            &settings.identity,
            settings.duration_sec,
            settings.grace_sec,
        ))
        .build()
        .await
}

async fn release(manager: &LeaseManager, publisher: &Publisher) {
    publisher.set(false);
    match tokio::time::timeout(RELEASE_TIMEOUT, manager.release()).await {
        Ok(Ok(())) => tracing::info!("released the Lease"),
        Ok(Err(error)) => {
            tracing::warn!(%error, "could not release the Lease; it expires on its own");
        }
        Err(_) => tracing::warn!("releasing the Lease timed out; it expires on its own"),
    }
}

/// `true` when stopped during the sleep.
async fn sleep_or_stop(delay: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        () = stop.cancelled() => true,
        () = tokio::time::sleep(delay) => false,
    }
}

fn lease_client(mut config: kube::Config, timeout: Duration) -> Result<Client, kube::Error> {
    config.connect_timeout = Some(timeout);
    config.read_timeout = Some(timeout);
    config.write_timeout = Some(timeout);
    config.reset_reader_on_write = true;
    // kube's retries would stretch one call past the deadline; the loop above retries.
    config.default_retry = false;
    Client::try_from(config)
}

/// Exponential backoff between failed Lease attempts: 1s, 2s, 4s … capped at 30s.
#[derive(Debug)]
struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { next: MIN_BACKOFF }
    }
}

impl Backoff {
    fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(MAX_BACKOFF);
        delay
    }

    fn reset(&mut self) {
        self.next = MIN_BACKOFF;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        common: CommonArgs,
    }

    fn args(extra: &[&str]) -> CommonArgs {
        let argv = ["test", "--namespace", "hearth"].iter().chain(extra);
        Cli::try_parse_from(argv).unwrap().common
    }

    #[test]
    fn lease_is_named_after_the_controller_in_the_lease_namespace() {
        let settings = LeaseSettings::new("hearth-discovery", &args(&[]), "pod-a".into()).unwrap();
        assert_eq!(
            settings,
            LeaseSettings {
                name: "hearth-discovery".into(),
                namespace: "hearth".into(),
                identity: "pod-a".into(),
                duration_sec: 60,
                grace_sec: 20,
            }
        );
        assert_eq!(settings.renew_interval_sec(), 40);
        let settings = LeaseSettings::new(
            "hearth-discovery",
            &args(&["--lease-namespace", "leases"]),
            "pod-a".into(),
        )
        .unwrap();
        assert_eq!(settings.namespace, "leases");
    }

    #[test]
    fn renewal_interval_is_below_the_duration() {
        let settings = |extra: &[&str]| LeaseSettings::new("c", &args(extra), "pod-a".into());
        assert_eq!(
            settings(&["--lease-duration-sec", "10", "--lease-grace-sec", "10"]),
            Err(LeaseError::RenewNotBelowDuration {
                duration: 10,
                renew: 0
            })
        );
        assert_eq!(
            settings(&["--lease-duration-sec", "10", "--lease-renew-sec", "10"]),
            Err(LeaseError::RenewNotBelowDuration {
                duration: 10,
                renew: 10
            })
        );
        let grace = settings(&["--lease-duration-sec", "10", "--lease-grace-sec", "9"]).unwrap();
        assert_eq!((grace.renew_interval_sec(), grace.grace_sec), (1, 9));
        let renew = settings(&["--lease-duration-sec", "30", "--lease-renew-sec", "25"]).unwrap();
        assert_eq!((renew.renew_interval_sec(), renew.grace_sec), (25, 5));
        // The old default pair keeps its meaning: renew 10 s of a 15 s Lease.
        let old = settings(&["--lease-duration-sec", "15"]).unwrap();
        assert_eq!((old.renew_interval_sec(), old.grace_sec), (10, 5));
        let tiny = settings(&["--lease-duration-sec", "2"]).unwrap();
        assert_eq!((tiny.renew_interval_sec(), tiny.grace_sec), (1, 1));
    }

    #[test]
    fn renew_and_grace_must_agree_when_both_are_set() {
        let both = |renew: &str, grace: &str| {
            LeaseSettings::new(
                "c",
                &args(&[
                    "--lease-duration-sec",
                    "30",
                    "--lease-renew-sec",
                    renew,
                    "--lease-grace-sec",
                    grace,
                ]),
                "pod-a".into(),
            )
        };
        assert_eq!(
            both("20", "5"),
            Err(LeaseError::RenewAndGraceDisagree {
                duration: 30,
                renew: 20,
                grace: 5
            })
        );
        assert_eq!(both("20", "10").unwrap().renew_interval_sec(), 20);
    }

    #[test]
    fn identity_must_not_be_empty() {
        assert_eq!(
            LeaseSettings::new("c", &args(&[]), String::new()),
            Err(LeaseError::EmptyIdentity)
        );
    }

    #[test]
    fn calls_time_out_within_the_grace_period() {
        let with = |grace| LeaseSettings {
            name: "c".into(),
            namespace: "n".into(),
            identity: "i".into(),
            duration_sec: 60,
            grace_sec: grace,
        };
        assert_eq!(with(5).request_timeout(), Duration::from_millis(2500));
        assert_eq!(with(20).request_timeout(), Duration::from_secs(10));
        // Never zero, which would fail every call.
        assert_eq!(with(1).request_timeout(), Duration::from_secs(1));
        for grace in 2..60 {
            assert!(with(grace).request_timeout() < Duration::from_secs(grace));
        }
    }

    #[test]
    fn writes_end_before_the_lease_can_move() {
        let with = |duration, grace| LeaseSettings {
            name: "c".into(),
            namespace: "n".into(),
            identity: "i".into(),
            duration_sec: duration,
            grace_sec: grace,
        };
        // The defaults: a 60 s Lease renewed every 40 s.
        assert_eq!(
            with(60, 20).write_timeout(),
            Duration::from_nanos(6_666_666_666)
        );
        assert_eq!(
            with(15, 5).write_timeout(),
            Duration::from_nanos(1_666_666_666)
        );
        assert_eq!(with(3600, 1200).write_timeout(), MAX_WRITE_TIMEOUT);
        assert_eq!(with(2, 1).write_timeout(), Duration::from_secs(1));
        assert_eq!(write_timeout(None), MAX_WRITE_TIMEOUT);
        assert_eq!(
            write_timeout(Some(&with(60, 20))),
            with(60, 20).write_timeout()
        );
        // Step-down (a failed renewal) plus one write fits in the grace, with room left.
        for duration in 3..=3600 {
            for grace in [3, duration / 3, duration - 1] {
                if grace < 3 || grace >= duration {
                    continue;
                }
                let lease = with(duration, grace);
                assert!(
                    lease.request_timeout() + lease.write_timeout() < Duration::from_secs(grace),
                    "duration {duration}, grace {grace}"
                );
            }
        }
    }

    #[test]
    fn backoff_doubles_up_to_a_cap_and_resets() {
        let mut backoff = Backoff::default();
        let delays: Vec<u64> = (0..7).map(|_| backoff.next_delay().as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30]);
        backoff.reset();
        assert_eq!(backoff.next_delay(), Duration::from_secs(1));
    }

    #[test]
    fn publisher_updates_channel_and_gauge() {
        let metrics = Metrics::new("hearth-test");
        let (tx, mut rx) = watch::channel(false);
        let publisher = Publisher {
            tx,
            metrics: metrics.clone(),
        };
        publisher.set(true);
        assert!(rx.has_changed().unwrap());
        assert!(*rx.borrow_and_update());
        assert!(metrics.encode().unwrap().contains("hearth_leader 1\n"));

        publisher.set(true);
        assert!(!rx.has_changed().unwrap(), "no change, no wake-up");

        publisher.set(false);
        assert!(!*rx.borrow_and_update());
        assert!(metrics.encode().unwrap().contains("hearth_leader 0\n"));
    }

    #[test]
    fn without_election_this_replica_always_leads() {
        let metrics = Metrics::new("hearth-test");
        let tx = always_leader(&metrics);
        assert!(*tx.subscribe().borrow());
        assert!(metrics.encode().unwrap().contains("hearth_leader 1\n"));
    }
}
