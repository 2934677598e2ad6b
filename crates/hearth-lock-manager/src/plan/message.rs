//! The words of `Locked`, made from a state's typed facts: one function per state, each
//! taking only the facts of its own variant, so every state is said and none is said by
//! a function that could be handed another.

use hearth_api::ExpiredLock;
use hearth_api::names::{CLUSTER_NODE_LABEL, CLUSTER_SLOT_RESOURCE, lock_sentinel_name};
use hearth_api::text::{bounded, quoted};
use k8s_openapi::jiff::Timestamp;

use crate::fournos::{FOURNOS_EXCLUSIVE_SLOTS, JOB_NAME_LABEL, PICKUP_GRACE};
use crate::state::{Change, Doubt, Kept, Lock, LockState, Lost, Mismatch, Taken, Wait};

/// Longest text taken from Kueue or Fournos into a message.
const MAX_QUOTED: usize = 300;
/// Longest message of a `SentinelCreateFailed` condition.
const MAX_CREATE_FAILED_CHARS: usize = 1024;

fn fmt_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The words of `Locked` in `state`; `None` for a never-locked cluster.
pub(super) fn message(state: &LockState, cluster: &str) -> Option<String> {
    use LockState as S;
    Some(match state {
        S::NeverLocked => return None,
        S::Released { deleting } => released(*deleting),
        S::Releasing { waits } => format!(
            "The lock is being released: waiting for {}.",
            waits_text(waits)
        ),
        S::Expired { lock, waits } => expired(lock, waits),
        S::InvalidOwner { problem } => {
            format!("{problem}. The cluster is not locked until spec.owner is valid.")
        }
        S::Expiring {
            expired: lock,
            waits,
            ..
        } => expired(lock, waits),
        S::WaitingForFlavor { lock } => waiting_for_flavor(lock),
        S::Replacing { lock, waits } => new_sentinel(lock, waits, cluster, true),
        S::Creating { lock, waits } => new_sentinel(lock, waits, cluster, false),
        S::OldWorkload {
            lock,
            sentinel,
            workload,
            holds_quota,
            leftover,
        } => old_workload(lock, sentinel, workload, *holds_quota, *leftover),
        S::Unproven {
            lock,
            sentinel,
            workload,
            doubt,
        } => unproven(lock, sentinel, workload, doubt),
        S::NameTaken { lock, taken } => name_taken(lock, taken),
        S::CreateFailed { error, .. } => create_failed(error),
        S::Waiting {
            lock,
            sentinel,
            why,
            until_uncordon,
            ..
        } => waiting(lock, sentinel, why.as_deref(), *until_uncordon, cluster),
        S::NotPickedUp {
            lock,
            sentinel,
            created,
            fournos_said,
        } => not_picked_up(lock, sentinel, *created, fournos_said.as_deref()),
        S::AwaitingWorkload {
            lock,
            sentinel,
            phase,
        } => awaiting_workload(lock, sentinel, phase.as_deref()),
        S::WorkloadLost {
            lock,
            sentinel,
            phase,
            lost,
        } => workload_lost(lock, sentinel, phase.as_deref(), lost),
        S::Held { lock, sentinel, .. } => held(lock, sentinel),
        S::Misplaced {
            lock,
            sentinel,
            mismatch,
        } => misplaced(lock, sentinel, mismatch, cluster),
    })
}

/// What every message of a lock ends with: why its ttl is ignored, if it is.
fn ttl_note(lock: &Lock) -> String {
    lock.ttl_problem
        .as_deref()
        .map(|e| format!(" The ttl is ignored ({e}); set a valid ttl or remove it."))
        .unwrap_or_default()
}

fn released(deleting: bool) -> String {
    if deleting {
        "The cluster is being deleted; its lock was released.".to_owned()
    } else {
        "No owner: the cluster is not locked. Set spec.owner to lock it.".to_owned()
    }
}

/// What a release still waits for, in words.
fn waits_text(waits: &[Wait]) -> String {
    let words: Vec<String> = waits
        .iter()
        .map(|w| match w {
            Wait::JobDeleting {
                job,
                since,
                finalizers,
            } => format!(
                "Fournos to let FournosJob {job} go (deleting since {}, finalizers: {}; is Fournos running?)",
                fmt_time(*since),
                if finalizers.is_empty() {
                    "none".to_owned()
                } else {
                    bounded(&finalizers.join(", "), MAX_QUOTED)
                }
            ),
            Wait::JobToDelete { job } => format!("FournosJob {job} to be deleted"),
            Wait::WorkloadHoldsQuota { workload } => format!(
                "Workload {workload} to be deleted by the garbage collector once its FournosJob is gone; it still holds the cluster's slots"
            ),
        })
        .collect();
    words.join("; ")
}

/// What `Locked` says once a lock ran out, from the typed record of it, and what the
/// release still waits for.
fn expired(lock: &ExpiredLock, waits: &[Wait]) -> String {
    let ttl = lock
        .ttl
        .as_deref()
        .map(|t| format!(" (ttl {t})"))
        .unwrap_or_default();
    let still = if waits.is_empty() {
        String::new()
    } else {
        format!(" Still releasing: waiting for {}.", waits_text(waits))
    };
    format!(
        "The lock of {} expired at {}{ttl}; the cluster was released and spec.owner cleared.{still}",
        lock.owner,
        fmt_time(lock.expired_at.0)
    )
}

fn waiting_for_flavor(lock: &Lock) -> String {
    format!(
        "Waiting for hearth-kueue-sync to publish the cluster's ResourceFlavor and quota (status.kueue) before taking the lock for {}; check the KueueSynced condition.{}",
        lock.owner,
        ttl_note(lock)
    )
}

/// A sentinel of the owner about to be made: `replacing` one of ours of its name, or
/// created; while older sentinels of the lock still go, what it waits for.
fn new_sentinel(lock: &Lock, waits: &[Wait], cluster: &str, replacing: bool) -> String {
    let note = ttl_note(lock);
    if !waits.is_empty() {
        return format!(
            "Replacing the previous sentinel: waiting for {}.{note}",
            waits_text(waits)
        );
    }
    let (owner, canonical) = (&lock.owner, lock_sentinel_name(cluster));
    if replacing {
        format!("Replacing the previous sentinel {canonical} with one for {owner}.{note}")
    } else {
        format!("Created sentinel {canonical} for {owner}; waiting for Kueue to admit it.{note}")
    }
}

fn old_workload(
    lock: &Lock,
    sentinel: &str,
    workload: &str,
    holds_quota: bool,
    leftover: bool,
) -> String {
    let (owner, note) = (&lock.owner, ttl_note(lock));
    let holds = if holds_quota {
        "; it still holds the cluster's slots"
    } else {
        ""
    };
    if leftover {
        format!(
            "Waiting for the previous lock's Workload {workload} to be deleted by the garbage collector once its FournosJob is gone{holds}, before creating sentinel {sentinel} for {owner}: Fournos would adopt a Workload of that name. If it stays, delete it (kubectl delete workload {workload} in the execution namespace).{note}"
        )
    } else {
        format!(
            "Workload {workload} in the execution namespace has the name Fournos gives the Workload of sentinel {sentinel}, and was not left by a lock{holds}: Fournos would adopt it, so the cluster is not locked for {owner}. Delete it (kubectl delete workload {workload} in the execution namespace); lock-manager then takes the lock on its own.{note}"
        )
    }
}

fn unproven(lock: &Lock, sentinel: &Kept, workload: &str, doubt: &Doubt) -> String {
    format!(
        "Workload {workload} is admitted for sentinel {} but is not proven to be the one Fournos made for it: {}. It is not trusted to hold the cluster, so the cluster is not locked for {}. Delete the Workload (kubectl delete workload {workload} in the execution namespace); lock-manager then replaces the sentinel.{}",
        sentinel.name,
        doubt_text(doubt, &sentinel.name),
        lock.owner,
        ttl_note(lock)
    )
}

fn doubt_text(doubt: &Doubt, job: &str) -> String {
    let found = |v: &Option<String>| {
        v.as_deref()
            .map_or_else(|| "none".to_owned(), |v| quoted(v, MAX_QUOTED))
    };
    match doubt {
        Doubt::Label { found: f } => format!(
            "it is not labelled {JOB_NAME_LABEL}={job} (found {})",
            found(f)
        ),
        Doubt::Owner { found: f } => format!(
            "its owner is not FournosJob {job} by UID (found {})",
            found(f)
        ),
        Doubt::Older {
            created,
            job_created,
        } => format!(
            "it was created at {}, before the sentinel ({})",
            fmt_time(*created),
            fmt_time(*job_created)
        ),
        Doubt::Uncounted => format!(
            "Kueue's count of the {CLUSTER_SLOT_RESOURCE} it holds cannot be read (status.admission.podSetAssignments[].resourceUsage)"
        ),
    }
}

fn name_taken(lock: &Lock, taken: &Taken) -> String {
    let Taken {
        kind,
        namespace,
        name,
        why,
    } = taken;
    format!(
        "{kind} {namespace}/{name} already exists and is not this Hearth's sentinel ({why}), so the cluster cannot be locked for {} under that name. If it is not in use, delete it; lock-manager looks again (at least once a minute) and then takes the lock on its own.",
        lock.owner
    )
}

fn create_failed(error: &str) -> String {
    bounded(
        &format!(
            "{error}. The lock is not held; Hearth tries again with backoff (a 422 means the \
             sentinel is invalid: check spec.owner)."
        ),
        MAX_CREATE_FAILED_CHARS,
    )
}

fn waiting(
    lock: &Lock,
    sentinel: &Kept,
    why: Option<&str>,
    until_uncordon: bool,
    cluster: &str,
) -> String {
    format!(
        "Sentinel {} waits for Kueue to admit it{}. {}{}",
        sentinel.name,
        why.map(|w| format!(": {w}")).unwrap_or_default(),
        if until_uncordon {
            format!(
                "The cluster is cordoned (spec.cordon) and the lock's Workload does not \
                 tolerate the cordon: the lock waits for `kubectl fournos uncordon {cluster}`."
            )
        } else {
            "The lock is held once running work on the cluster finishes.".to_owned()
        },
        ttl_note(lock)
    )
}

fn not_picked_up(
    lock: &Lock,
    sentinel: &Kept,
    created: Timestamp,
    fournos_said: Option<&str>,
) -> String {
    format!(
        // The creation time, not the seconds waited: the message must not change
        // from one reconcile to the next (each change is a status write).
        "Fournos has not picked up sentinel {} (no status.phase since it was created at {}, over {}s ago).{} Check that Fournos runs and watches this namespace, and its log.{}",
        sentinel.name,
        fmt_time(created),
        PICKUP_GRACE.as_secs(),
        fournos_said
            .map(|m| format!(" Fournos said: {}", bounded(m, MAX_QUOTED)))
            .unwrap_or_default(),
        ttl_note(lock)
    )
}

fn awaiting_workload(lock: &Lock, sentinel: &Kept, phase: Option<&str>) -> String {
    format!(
        "Sentinel {} says {} but {} yet.{}",
        sentinel.name,
        phase.unwrap_or("nothing"),
        lost_text(&Lost::NoWorkload),
        ttl_note(lock)
    )
}

fn workload_lost(lock: &Lock, sentinel: &Kept, phase: Option<&str>, lost: &Lost) -> String {
    format!(
        "Sentinel {} says {} but {}: the cluster is not held. Replacing the sentinel so that Fournos makes a new Workload.{}",
        sentinel.name,
        phase.unwrap_or("nothing"),
        lost_text(lost),
        ttl_note(lock)
    )
}

fn lost_text(lost: &Lost) -> String {
    let said = |m: &Option<String>| {
        m.as_deref()
            .map(|m| format!(": {}", bounded(m, MAX_QUOTED)))
            .unwrap_or_default()
    };
    match lost {
        Lost::NoWorkload => "there is no Workload of its name (deleted, or never made)".to_owned(),
        Lost::Finished { workload } => format!("its Workload {workload} is finished"),
        Lost::Evicted { workload, said: s } => {
            format!("Kueue evicted its Workload {workload}{}", said(s))
        }
        Lost::NotAdmitted { workload, said: s } => {
            format!("its Workload {workload} is not admitted{}", said(s))
        }
        Lost::Changed { workload, change } => format!(
            "its Workload {workload} is not as Fournos made it ({}): someone changed it while it waited for quota",
            change_text(change)
        ),
    }
}

fn change_text(change: &Change) -> String {
    match change {
        Change::Pinned { to: Some(to) } => {
            format!("it is pinned to cluster {}", bounded(to, MAX_QUOTED))
        }
        Change::Pinned { to: None } => {
            format!("it is pinned to no cluster by {CLUSTER_NODE_LABEL}")
        }
        Change::Slots { holds } => format!(
            "Kueue admitted it with {holds} {CLUSTER_SLOT_RESOURCE}, and Fournos asks {FOURNOS_EXCLUSIVE_SLOTS} for a lock"
        ),
        Change::Queue { to: Some(to) } => format!(
            "it was moved to LocalQueue {} and admitted there",
            bounded(to, MAX_QUOTED)
        ),
        Change::Queue { to: None } => {
            "its spec.queueName was removed and it was admitted elsewhere".to_owned()
        }
        Change::Spec { generation, queue } => format!(
            "its spec was changed after Fournos made it (generation {generation}; it is in LocalQueue {})",
            queue
                .as_deref()
                .map_or_else(|| "none".to_owned(), |q| bounded(q, MAX_QUOTED))
        ),
    }
}

fn held(lock: &Lock, sentinel: &Kept) -> String {
    let until = lock
        .expires_at
        .map(|t| format!(" until {}", fmt_time(t)))
        .unwrap_or_default();
    format!(
        "Locked for {}{until}: sentinel {} holds all of the cluster's slots.{}",
        lock.owner,
        sentinel.name,
        ttl_note(lock)
    )
}

fn misplaced(lock: &Lock, sentinel: &Kept, mismatch: &Mismatch, cluster: &str) -> String {
    let (owner, note) = (&lock.owner, ttl_note(lock));
    let sentinel = &sentinel.name;
    match mismatch {
        Mismatch::WrongFlavor { workload, why } => format!(
            "{} is admitted but {why}: it does not hold this cluster, so the cluster is not locked for {owner}. Check which ResourceFlavors select {CLUSTER_NODE_LABEL}={cluster} and the ClusterQueue's cohort.{note}",
            match workload {
                Some(w) => format!("Workload {w} of sentinel {sentinel}"),
                None => format!("Sentinel {sentinel}"),
            }
        ),
        // Replaced by one that asks for every slot: it waits for admission again.
        Mismatch::WrongSlots { why } => format!(
            "Sentinel {sentinel} does not lock the cluster: {why}. Replacing it with one that requests exactly the cluster's slots; the cluster is not locked for {owner} meanwhile.{note}"
        ),
        Mismatch::FournosTooFew {
            workload,
            holds,
            cluster,
        } => format!(
            "Workload {workload} of sentinel {sentinel} holds {holds} {CLUSTER_SLOT_RESOURCE} but the cluster has {cluster}: other jobs can still be admitted, so the cluster is not locked. Fournos requests {FOURNOS_EXCLUSIVE_SLOTS} for a lock: set HEARTH_CLUSTER_SLOTS={FOURNOS_EXCLUSIVE_SLOTS} on hearth-kueue-sync.{note}"
        ),
        Mismatch::FournosAsksOther { cluster } => format!(
            "The cluster has {cluster} {CLUSTER_SLOT_RESOURCE} but Fournos requests {FOURNOS_EXCLUSIVE_SLOTS} for a lock, {}: set HEARTH_CLUSTER_SLOTS={FOURNOS_EXCLUSIVE_SLOTS} on hearth-kueue-sync.{note}",
            if *cluster > FOURNOS_EXCLUSIVE_SLOTS {
                "which would leave room for other jobs"
            } else {
                "more than the cluster's quota, so Kueue can never admit it"
            }
        ),
    }
}
