//! What can go wrong in discovery's own I/O against the management cluster. Failures
//! of a target are not errors: they are probe outcomes, reported in status.
//!
//! Messages hold names and the management API's answer, never a kubeconfig: the only
//! objects written are FournosClusters, whose content holds no credentials.

/// An error of the discovery controller, with a stable [`reason`](Error::reason).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot write the status of FournosCluster {cluster}: {source}")]
    StatusWrite {
        cluster: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot encode the status of FournosCluster {cluster}: {source}")]
    StatusEncode {
        cluster: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot create FournosCluster {cluster}: {source}")]
    Create {
        cluster: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot delete FournosCluster {cluster}: {source}")]
    Delete {
        cluster: String,
        #[source]
        source: kube::Error,
    },
}

hearth_runtime::impl_reason!(Error);

impl Error {
    /// Short, stable, CamelCase: for metric labels and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::StatusWrite { .. } => "StatusWriteFailed",
            Self::StatusEncode { .. } => "StatusEncodeFailed",
            Self::Create { .. } => "CreateFailed",
            Self::Delete { .. } => "DeleteFailed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_stable() {
        let e = Error::Delete {
            cluster: "hearth/a".into(),
            source: kube::Error::TlsRequired,
        };
        assert_eq!(e.reason(), "DeleteFailed");
        assert_eq!(
            e.to_string(),
            "cannot delete FournosCluster hearth/a: TLS required but no TLS stack selected"
        );
    }
}
