//! Why a reconcile or a sweep failed. Each variant has a stable [`Error::reason`],
//! used as the Event reason and the metric label.

pub use hearth_runtime::kit::answer::brief;

/// A failed step of reconciling a cluster's lock.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the FournosCluster cannot be read: {0}")]
    InvalidCluster(String),

    #[error("cannot create sentinel {name}: {}", brief(.source))]
    CreateSentinel {
        name: String,
        #[source]
        source: kube::Error,
    },

    #[error("cannot delete sentinel {name}: {}", brief(.source))]
    DeleteSentinel {
        name: String,
        #[source]
        source: kube::Error,
    },

    #[error("cannot mark sentinel {name} ready for Kueue (PodsReady): {}", brief(.source))]
    SentinelUpkeep {
        name: String,
        #[source]
        source: kube::Error,
    },

    #[error(
        "cannot read WorkloadPriorityClass {class} for the sentinel (does it exist, and may hearth-lock-manager get workloadpriorityclasses?): {}",
        brief(.source)
    )]
    PriorityClass {
        class: String,
        #[source]
        source: kube::Error,
    },

    #[error("WorkloadPriorityClass {class} has no usable value: {message}")]
    PriorityValue { class: String, message: String },

    #[error("cannot clear spec.owner of the expired lock: {}", brief(.0))]
    ClearOwner(#[source] kube::Error),

    #[error("cannot write the lock status: {}", brief(.0))]
    Status(#[source] kube::Error),

    #[error("cannot read sentinel {name}: {}", brief(.source))]
    ReadSentinel {
        name: String,
        #[source]
        source: kube::Error,
    },

    #[error("cannot label sentinel {name} as this Hearth's: {}", brief(.source))]
    AdoptSentinel {
        name: String,
        #[source]
        source: kube::Error,
    },

    #[error("cannot list the Reservations to decide them: {}", brief(.0))]
    ReservationList(#[source] kube::Error),

    #[error("cannot record the decision for reservation {name}: {}", brief(.source))]
    ReservationStatus {
        name: String,
        #[source]
        source: kube::Error,
    },

    #[error("the sentinel cache stopped")]
    CacheGone,
}

hearth_runtime::impl_reason!(Error, retry);

impl Error {
    /// Short, stable, CamelCase: an Event reason and a metric label.
    /// Whether a retry may help: a cluster that does not decode is retried by its fix
    /// (the watch), not by time.
    pub fn retry(&self) -> bool {
        !matches!(self, Self::InvalidCluster(_))
    }

    pub fn reason(&self) -> &'static str {
        match self {
            Self::InvalidCluster(_) => "InvalidFournosCluster",
            Self::CreateSentinel { .. } => "SentinelCreateFailed",
            Self::DeleteSentinel { .. } => "SentinelDeleteFailed",
            Self::SentinelUpkeep { .. } => "SentinelUpkeepFailed",
            Self::PriorityClass { .. } => "PriorityClassUnavailable",
            Self::PriorityValue { .. } => "PriorityClassInvalid",
            Self::ClearOwner(_) => "ClearOwnerFailed",
            Self::Status(_) => "StatusWriteFailed",
            Self::ReadSentinel { .. } => "SentinelReadFailed",
            Self::AdoptSentinel { .. } => "SentinelAdoptFailed",
            Self::ReservationList(_) => "ReservationListFailed",
            Self::ReservationStatus { .. } => "ReservationStatusFailed",
            Self::CacheGone => "CacheGone",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_camel_case_and_distinct() {
        let errors = [
            Error::InvalidCluster("x".into()),
            Error::PriorityValue {
                class: "c".into(),
                message: "m".into(),
            },
            Error::CacheGone,
        ];
        let forbidden = kube::Error::Api(Box::new(
            serde_json::from_value(serde_json::json!({
                "status": "Failure", "code": 403, "reason": "Forbidden",
                "message": "workloadpriorityclasses.kueue.x-k8s.io \"x\" is forbidden",
            }))
            .unwrap(),
        ));
        let e = Error::PriorityClass {
            class: "x".into(),
            source: forbidden,
        };
        assert!(
            e.to_string()
                .ends_with(": workloadpriorityclasses.kueue.x-k8s.io \"x\" is forbidden (403)"),
            "{e}"
        );
        for e in &errors {
            let r = e.reason();
            assert!(r.chars().all(|c| c.is_ascii_alphanumeric()), "{r}");
            assert!(r.starts_with(|c: char| c.is_ascii_uppercase()), "{r}");
        }
    }
}
