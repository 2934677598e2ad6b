//! What Fournos does that lock-manager relies on, for `fournosjob` sentinels.
//!
//! Fournos turns a lockOnly FournosJob into a Workload (named like the job, labeled
//! `fournos.dev/job-name=<job>`, owned by the job) and sets the job's phase to
//! `Admitted` once Kueue admits it. It never looks at that Workload again: when the
//! Workload is deleted or evicted the job still says `Admitted`, and when the job is
//! deleted the Workload is left to the garbage collector (and kept meanwhile by the
//! job's kopf finalizer while Fournos is down). Fournos also ignores "already exists"
//! when it creates the Workload, so a new job of the same name adopts the old one.
//!
//! So for this kind the phase alone is not the lock: [`crate::fournos_workloads`]
//! observes the Workloads, and the state machine in [`crate::state`] decides from them.
//! Facts only: this module imports nothing of the crate.

use std::time::Duration;

/// Label Fournos puts on the Workload of a FournosJob, naming the job.
pub const JOB_NAME_LABEL: &str = "fournos.dev/job-name";
/// Slots Fournos requests for an exclusive (and lockOnly) job: its `MAX_CLUSTER_SLOTS`.
pub const FOURNOS_EXCLUSIVE_SLOTS: i64 = 100;
/// How long a new sentinel may go without a phase before lock-manager says Fournos has
/// not picked it up. Fournos sets the phase within a second when it runs.
pub const PICKUP_GRACE: Duration = Duration::from_secs(30);
/// How long after the job became `Admitted` a missing Workload is taken for the
/// Workload watch lagging behind the FournosJob watch rather than for a lost Workload:
/// the lock is not called held meanwhile, only the repair waits.
pub const REPAIR_GRACE: Duration = Duration::from_secs(5);
