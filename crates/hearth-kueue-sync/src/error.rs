//! What can go wrong in a reconcile. Each variant has a short stable [`Error::reason`],
//! used as a metric label and in logs.

/// A failed reconcile (or controller start).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The ClusterQueue exists but does not decode: Hearth will not rewrite what it
    /// cannot read.
    #[error(
        "ClusterQueue {name} cannot be decoded ({message}); Hearth leaves it untouched until it \
         is fixed"
    )]
    InvalidClusterQueue { name: String, message: String },

    #[error("cannot apply ResourceFlavor {name}: {source}")]
    ApplyFlavor {
        name: String,
        #[source]
        source: kube::Error,
    },

    #[error("cannot delete ResourceFlavor {name}: {source}")]
    DeleteFlavor {
        name: String,
        #[source]
        source: kube::Error,
    },

    #[error("cannot update ClusterQueue {name}: {source}")]
    UpdateClusterQueue {
        name: String,
        #[source]
        source: kube::Error,
    },

    /// Every attempt of this reconcile lost the race to another writer.
    #[error("ClusterQueue {name} changed under every one of {attempts} updates in a row")]
    ConflictsExhausted { name: String, attempts: usize },

    #[error("cannot read ClusterQueue {name} after a conflict: {source}")]
    ReadClusterQueue {
        name: String,
        #[source]
        source: kube::Error,
    },

    /// Status writes failed for `clusters` (the first error is the source); the other
    /// clusters' statuses were written.
    #[error("cannot write the status of FournosCluster(s) {}: {source}", clusters.join(", "))]
    WriteStatus {
        clusters: Vec<String>,
        #[source]
        source: kube::Error,
    },

    /// A watch stopped feeding its cache before it was ever filled.
    #[error("the {kind} watch stopped before its cache was filled")]
    WatchStopped { kind: &'static str },
}

hearth_runtime::impl_reason!(Error);

impl Error {
    /// Short, stable, CamelCase: a metric label value.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::InvalidClusterQueue { .. } => "InvalidClusterQueue",
            Self::ApplyFlavor { .. } => "ApplyFlavorFailed",
            Self::DeleteFlavor { .. } => "DeleteFlavorFailed",
            Self::UpdateClusterQueue { .. } => "UpdateClusterQueueFailed",
            Self::ConflictsExhausted { .. } => "ConflictsExhausted",
            Self::ReadClusterQueue { .. } => "ReadClusterQueueFailed",
            Self::WriteStatus { .. } => "WriteStatusFailed",
            Self::WatchStopped { .. } => "WatchStopped",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_camel_case_and_distinct() {
        let kube_error = || {
            kube::Error::Api(
                kube::core::Status::failure("conflict", "Conflict")
                    .with_code(409)
                    .boxed(),
            )
        };
        let errors = [
            Error::InvalidClusterQueue {
                name: "q".into(),
                message: "bad".into(),
            },
            Error::ApplyFlavor {
                name: "a".into(),
                source: kube_error(),
            },
            Error::DeleteFlavor {
                name: "a".into(),
                source: kube_error(),
            },
            Error::UpdateClusterQueue {
                name: "q".into(),
                source: kube_error(),
            },
            Error::ConflictsExhausted {
                name: "q".into(),
                attempts: 5,
            },
            Error::ReadClusterQueue {
                name: "q".into(),
                source: kube_error(),
            },
            Error::WriteStatus {
                clusters: vec!["a".into(), "b".into()],
                source: kube_error(),
            },
            Error::WatchStopped {
                kind: "ClusterQueue",
            },
        ];
        let reasons: std::collections::BTreeSet<&str> = errors.iter().map(Error::reason).collect();
        assert_eq!(reasons.len(), errors.len());
        for reason in reasons {
            assert!(
                reason.chars().next().unwrap().is_ascii_uppercase()
                    && reason.chars().all(|c| c.is_ascii_alphanumeric()),
                "{reason}"
            );
        }
        assert!(errors[6].to_string().contains("a, b"), "{}", errors[6]);
    }
}
