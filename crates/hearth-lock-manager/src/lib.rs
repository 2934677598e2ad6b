//! hearth-lock-manager: locks a FournosCluster for its `spec.owner` with a sentinel
//! that holds all of the cluster's Kueue slots, and releases it on unlock or expiry.
//!
//! Reconcile = observe → [`plan`] (pure) → [`apply`] → report ([`status`]); the
//! sentinel kinds live in [`sentinel`], the orphan sweep in [`sweep`]; for `fournosjob`
//! sentinels [`fournos_lock`] corrects the plan from the Workloads Fournos made.
//!
//! # The lock state machine
//!
//! [`plan::classify`] puts every cluster in one [`plan::LockState`]; [`plan::plan`]
//! turns the state into actions and the status slice; [`status::transition_events`]
//! compares the stored `Locked` reason with the new one ([`status::Transition`]). Checked
//! in this order, the first row that matches wins:
//!
//! | state              | when                                                          | actions                                  | `Locked` (`locked`)            | Event on entering |
//! |--------------------|---------------------------------------------------------------|------------------------------------------|--------------------------------|-------------------|
//! | `NeverLocked`      | no owner (or deleting); no `Locked`, lock field or sentinel   | delete every sentinel (there are none)   | nothing written                | — |
//! | `Expired`          | no owner; stored `Expired`, or the stored expiry has passed   | delete every sentinel                    | False `Expired` (false)        | — |
//! | `Released`         | no owner, or the cluster is being deleted, after a lock       | delete every sentinel                    | False `Released` (false)       | `LockReleased` unless it was `Released`/`Expired` |
//! | `InvalidOwner`     | `spec.owner` is one the CRD refuses                           | delete every sentinel                    | False `InvalidOwner` (false)   | — |
//! | `Expiring`         | `ownerSetAt + ttl <= now`                                     | delete every sentinel, clear `spec.owner` (guarded by `resourceVersion`) | False `Expired` (false) | `LockExpired` |
//! | `Held`             | the owner's proven sentinel is admitted in the cluster's queue, on its flavor, with every slot | delete every other sentinel | True `Held` (true)  | `LockHeld` |
//! | `Misplaced`        | the owner's proven sentinel is admitted elsewhere, or asks for other slots than the cluster has | as for `Held`; wrong slots: delete it too (replaced) | False `WrongFlavor` / `SlotsMismatch` (false) | `LockLost` (Warning) if it was `Held` |
//! | `Waiting`          | a live sentinel of the owner waits for admission              | as for `Held`                            | False `WaitingForAdmission` (false) | `LockLost` (Warning) if it was `Held` for the same owner |
//! | `WaitingForFlavor` | no sentinel of the owner; no `status.kueue` yet               | delete other owners' sentinels           | False `WaitingForFlavor` (false) | — |
//! | `Replacing`        | no sentinel of the owner; another's still has the name        | delete other owners' sentinels           | False `WaitingForAdmission` (false) | — |
//! | `Creating`         | no sentinel of the owner                                      | create `cluster-lock-<cluster>`          | False `WaitingForAdmission` (false) | — |
//!
//! Only a *proven* sentinel can be kept: one carrying this Hearth's three labels (the watch
//! sees no other) whose UID is `status.lockJobUID` or one this process created or adopted
//! ([`apply::Created`]), and still shaped as built (`lockOnly` for this cluster; a Workload
//! pinned to it). Any other labelled object is deleted. A create refused because the name
//! is taken by an object without this Hearth's labels is `SentinelNameTaken`, naming it
//! ([`apply`]); an older controller's sentinel named in `status.lockJobName` is adopted
//! once ([`apply::adopt_legacy`]). Every state also writes `slotHolders` ([`holders`]).
//!
//! Every state with an owner also writes `ownerSetAt` (kept while the owner stays the
//! same), `lockOwner` and `lockExpiresAt`, and is looked at again at the expiry; a
//! change of owner is Event `LockOwnerChanged`. Of several sentinels of the owner the
//! canonical name is kept first, then one that is admitted (a legacy sentinel keeps its
//! admission). For `fournosjob` sentinels [`fournos_lock::amend`] then refines `Held`,
//! `Waiting` and the unowned states from the Workloads (`WorkloadLost`,
//! `SlotsMismatch`, `WaitingForRelease`, `Releasing`, `SentinelNotPickedUp`); a
//! refused create becomes `SentinelCreateFailed` in [`apply`]. Reason strings:
//! [`hearth_api::reasons::LockedReason`].

pub mod apply;
pub mod config;
pub mod controller;
pub mod error;
pub mod fournos_lock;
pub mod holders;
pub mod metrics;
pub mod plan;
pub mod sentinel;
pub mod status;
pub mod summary;
pub mod sweep;
