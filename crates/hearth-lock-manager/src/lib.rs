//! hearth-lock-manager: locks a FournosCluster for its `spec.owner` with a sentinel
//! that holds all of the cluster's Kueue slots, and releases it on unlock or expiry.
//!
//! Reconcile = observe → [`plan`] (pure) → [`apply`] → report ([`status`]); the
//! state machine is [`state`], the sentinel kinds live in [`sentinel`], the orphan sweep
//! in [`sweep`]; for `fournosjob` sentinels [`fournos_workloads`] observes the Workloads
//! Fournos made ([`fournos`]: what Fournos does). What the rules read is in [`views`]. Before any of it runs, [`crd_check`] refuses a served CRD that would
//! prune a status field lock-manager writes. Each cluster's reconcile also decides its
//! Reservations: [`bookings`] (pure) and [`booked`] (the list and the status writes).
//!
//! # The lock state machine
//!
//! [`state::classify`] puts every cluster in one [`state::LockState`], from its spec and
//! status, its sentinels and (for `fournosjob` sentinels) the FournosJobs and Workloads
//! behind them; [`plan::plan`] turns the state into actions, Events and the status slice,
//! whose words are made from the state's typed facts. Two states are entered by the
//! apply step, when the create a state asked for is refused ([`state::LockState::refused`]).
//! Nothing reads a planned reason or message back. Rows in the order [`state::classify`]
//! checks them; the first that matches wins:
//!
//! | state              | when                                                          | actions                                  | `Locked` (`locked`)            | Event |
//! |--------------------|---------------------------------------------------------------|------------------------------------------|--------------------------------|-------|
//! | `Expired`          | no owner (or deleting); `status.expiredLock` recorded, or (not deleting) the stored lock's expiry has passed | delete every sentinel | False `Expired` (false); " Still releasing: …" appended while a `fournosjob` release waits | — |
//! | `Releasing`        | no owner, after a lock; `fournosjob`: a FournosJob of it, or a Workload of it holding quota, is still there | delete every sentinel | False `Releasing` (false) | — |
//! | `Released`         | no owner, or the cluster is being deleted, after a lock       | delete every sentinel                    | False `Released` (false)       | `LockReleased` unless it was `Released`/`Expired` |
//! | `NeverLocked`      | no owner; no `Locked`, lock field or sentinel                 | none                                     | nothing written                | — |
//! | `InvalidOwner`     | `spec.owner` is one the CRD refuses                           | delete every sentinel                    | False `InvalidOwner` (false)   | — |
//! | `Expiring`         | `ownerSetAt + ttl <= now`                                     | delete every sentinel, clear `spec.owner` (guarded by `resourceVersion`); record `expiredLock` | False `Expired` (false) | `LockExpired` |
//! | `WaitingForFlavor` | no proven live sentinel of the owner; no `status.kueue` yet   | delete the others                        | False `WaitingForFlavor` (false) | — |
//! | `Replacing`        | no proven sentinel of the owner; one of ours (another owner's, or one someone changed) still has the name | delete the others | False `WaitingForAdmission`, or `WaitingForRelease` while a `fournosjob` release waits | — |
//! | `OldWorkload`      | `fournosjob`: no sentinel of the owner; a Workload of the name (by name, not label) still exists (Fournos would adopt it) | delete the others; the create is held back (`blocked_create`) | False `WaitingForRelease` when it is Fournos's leftover (labelled for the name, owned by a FournosJob), else `SentinelNameTaken` naming it (false) | — |
//! | `Creating`         | no proven sentinel of the owner                               | create `cluster-lock-<cluster>`          | False `WaitingForAdmission`, or `WaitingForRelease` while older ones still go | — |
//! | `NameTaken`        | (apply) the create, or the held-back one, meets an object of the name without this Hearth's labels | none; looked at again with backoff | False `SentinelNameTaken` (false), naming it | — |
//! | `CreateFailed`     | (apply) the apiserver refused the create                      | none; retried with backoff               | False `SentinelCreateFailed` (false) | the failure's Warning |
//! | `Misplaced`        | `fournosjob`, Fournos says admitted: its own Workload is admitted in another ClusterQueue or on another flavor | keep it, delete the others | False `WrongFlavor` (false) | `LockLost` (Warning) if it was `Held` |
//! | `Misplaced`        | `fournosjob`, Fournos says admitted: its own Workload, as Fournos made it, holds fewer slots than the cluster has | keep it, delete the others | False `SlotsMismatch` (false) | `LockLost` (Warning) if it was `Held` |
//! | `Unproven`         | `fournosjob`, Fournos says admitted: the Workload of its name is not labelled with the job, not owned by its UID, older than it, or its slots (Kueue's `resourceUsage`) cannot be read | keep it, delete the others | False `WorkloadNotProven` (false), naming it | `LockLost` (Warning) if it was `Held` |
//! | `Held`             | `fournosjob`, Fournos says admitted: the Workload of its name, proven as above, is admitted, not finished or evicted, in the queue, on the flavor, with every slot as Kueue counted them | keep it, delete the others; `lockWorkloadUID` = that Workload | True `Held` (true) | `LockHeld` |
//! | `AwaitingWorkload` | `fournosjob`, Fournos says admitted: no Workload of it in the cache, for under [`fournos::REPAIR_GRACE`] | keep it, delete the others | False `WaitingForAdmission` (false) | `LockLost` (Warning) if it was `Held` |
//! | `WorkloadLost`     | `fournosjob`, Fournos says admitted: its own Workload is gone, finished, evicted, not admitted, or not as Fournos made it (not pinned to the cluster, or admitted with fewer slots than Fournos asks and the cluster has) | delete every sentinel (replaced) | False `WorkloadLost` (false) | `LockWorkloadLost` (Warning) |
//! | `Misplaced`        | `fournosjob`, not admitted: the cluster has other slots than Fournos asks (100) | keep it, delete the others  | False `SlotsMismatch` (false)  | — |
//! | `NotPickedUp`      | `fournosjob`, not admitted: no phase [`fournos::PICKUP_GRACE`] after its creation | keep it, delete the others | False `SentinelNotPickedUp` (false), with Fournos's words | — |
//! | `Waiting`          | `fournosjob`, not admitted otherwise                          | keep it, delete the others; look again when the pickup grace ends | False `WaitingForAdmission` (false), Fournos's words | `LockLost` (Warning) if it was `Held` for the same owner |
//! | `Held`             | `workload`: admitted in the configured ClusterQueue, on the cluster's own flavor, not evicted, with at least the cluster's slot quota | keep it, delete the others | True `Held` (true) | `LockHeld` |
//! | `Misplaced`        | `workload`: admitted in another ClusterQueue or on another flavor | keep it, delete the others           | False `WrongFlavor` (false)    | `LockLost` (Warning) if it was `Held` |
//! | `Misplaced`        | `workload`: admitted with fewer slots, or waiting with another number, than the cluster has | delete every sentinel (replaced) | False `SlotsMismatch` (false) | `LockLost` (Warning) if it was `Held` |
//! | `Waiting`          | `workload`: not admitted (or evicted)                         | keep it, delete the others               | False `WaitingForAdmission` (false), Kueue's words | `LockLost` (Warning) if it was `Held` for the same owner |
//!
//! The sentinel a row with an owner's sentinel keeps is the owner's *proven* one: its UID is
//! `status.lockJobUID` (or this process created or adopted it), and it is still shaped as
//! built (`lockOnly` with `spec.cluster` for a FournosJob; one pod set pinned to the cluster
//! for a Workload). Each row has a line in the table test (`state::tests::state_table`),
//! which also checks that every [`hearth_api::reasons::LockedReason`] is said by one.
//!
//! Only a *proven* sentinel can be kept, and only one of *ours* is ever deleted ("delete
//! the others" and "delete every sentinel" mean ours): one carrying this Hearth's three
//! labels (the watch sees no other) whose UID is `status.lockJobUID` or one this process
//! created or adopted ([`writer::Created`]); proven when it is still shaped as built, too
//! (one of ours that someone changed is replaced, never kept or left behind). Labels
//! never prove and never condemn: any other labelled object is left alone, and an object
//! that holds the sentinel's name without being the recorded one is named
//! (`SentinelNameTaken`), never touched ([`apply`]). `lockJobName` is written only with
//! `lockJobUID`. The Python Hearth's sentinel named in a status of its era (no
//! `lockJobUID`, no `lockOwner`) is adopted once ([`apply::adopt_legacy`]). Every state also writes `slotHolders` ([`holders`]):
//! whoever else (a Fournos `lockOnly` or exclusive job, any admitted Workload) holds the
//! cluster's slots.
//!
//! Every state with an owner also writes `ownerSetAt` (kept while the owner stays the
//! same), `lockOwner` and `lockExpiresAt`, and is looked at again at the expiry (and
//! sooner when a `fournosjob` grace runs out); a change of owner is Event
//! `LockOwnerChanged`. Of several sentinels of the owner the canonical name is kept
//! first, then one that is admitted (a legacy sentinel keeps its admission).
//!
//! The Events of a change ([`status::transition_events`], [`status::Transition`]) compare
//! the new state's typed reason with the one the stored `Locked` condition records (the
//! API's record of the state before, read once into [`hearth_api::reasons::LockedReason`]).
//! Reason strings: [`hearth_api::reasons::LockedReason`].
//!
//! # How fast `locked` goes false
//!
//! The controller is woken by the watch of the sentinels (and, for `fournosjob`, of
//! Fournos's Workloads), with no debounce; nothing waits between a watch event and the
//! status write but the reconcile itself. The only waits in the machine protect something
//! named: [`fournos::REPAIR_GRACE`] (the Workload watch trailing the FournosJob watch:
//! not *held* meanwhile, only the repair waits) and [`fournos::PICKUP_GRACE`]
//! (Fournos's own time to give a job a phase). Measured: `bench-results/2026-11-25/LOCK-REACTION.md`.

pub mod apply;
pub mod booked;
pub mod bookings;
pub mod config;
pub mod context;
pub mod controller;
pub mod crd_check;
pub mod error;
pub mod fournos;
pub mod fournos_workloads;
pub mod holders;
pub mod metrics;
pub mod plan;
mod reconcile;
pub mod sentinel;
pub mod state;
pub mod status;
pub mod summary;
pub mod sweep;
pub mod views;
pub mod writer;
