//! Failures the user can act on, each with its own exit code, and the translation of an
//! apiserver refusal into one.

/// A failure with a message that says what to do. Anything else exits with 1.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// Someone else's lock, a bad flag value: nothing was changed.
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    NotFound(String),
    /// RBAC said no (403).
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    TimedOut(String),
    /// The wait cannot end without someone acting (lock released, cluster deleted).
    #[error("{0}")]
    WaitFailed(String),
}

impl Failure {
    /// Exit codes: 2 is clap's for usage errors; 1 for everything unexpected.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Refused(_) => 3,
            Self::NotFound(_) => 4,
            Self::Forbidden(_) => 5,
            Self::TimedOut(_) | Self::WaitFailed(_) => 6,
        }
    }
}

/// Longest apiserver message quoted in a failure (it may quote an admission webhook).
const MAX_APISERVER_MESSAGE: usize = 400;

/// What the plugin was doing when the apiserver answered.
#[derive(Clone, Debug)]
pub struct Op<'a> {
    pub verb: &'a str,
    /// `fournosclusters.fournos.dev`, `events`, `workloads.kueue.x-k8s.io`…
    pub resource: &'a str,
    /// `None` for cluster-scoped resources.
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
}

/// An apiserver answer as a failure that says what to do; `None` when the code is not
/// one the user can act on (the raw error is shown then).
pub fn describe(op: &Op<'_>, code: u16, message: &str) -> Option<Failure> {
    let message = hearth_api::text::bounded(message, MAX_APISERVER_MESSAGE);
    let Op {
        verb,
        resource,
        namespace,
        name,
    } = op;
    let place = crate::view::prefixed(" in namespace ", *namespace);
    let ns_flag = crate::view::prefixed(" -n ", *namespace);
    match code {
        404 => Some(Failure::NotFound(match (*resource, name) {
            ("fournosclusters.fournos.dev", Some(name)) => format!(
                "no FournosCluster {name}{place}: `kubectl fournos status{ns_flag}` lists them \
                 (wrong namespace? pass -n or set HEARTH_NAMESPACE)"
            ),
            (_, Some(name)) => format!("{resource} {name} not found{place}"),
            (_, None) => format!(
                "{resource} not found{place}: is the CRD installed (kubectl get crd {resource})?"
            ),
        })),
        403 => Some(Failure::Forbidden(format!(
            "not allowed: you may not {verb} {resource}{place}. Ask your cluster admin for a \
             Role that grants `{verb}` on {resource}; check with `kubectl auth can-i {verb} \
             {resource}{ns_flag}`. The apiserver said: {message}"
        ))),
        401 => Some(Failure::Forbidden(format!(
            "the apiserver does not accept your credentials (401): log in again or pick \
             another --context. The apiserver said: {message}"
        ))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op<'a>(verb: &'a str, namespace: Option<&'a str>, name: Option<&'a str>) -> Op<'a> {
        Op {
            verb,
            resource: "fournosclusters.fournos.dev",
            namespace,
            name,
        }
    }

    #[test]
    fn forbidden_names_the_missing_verb_and_resource() {
        let op = op("patch", Some("hearth"), Some("a"));
        let failure = describe(&op, 403, "User \"bob\" cannot patch resource").unwrap();
        let text = failure.to_string();
        assert!(matches!(failure, Failure::Forbidden(_)));
        assert!(
            text.starts_with(
                "not allowed: you may not patch fournosclusters.fournos.dev in namespace hearth."
            ),
            "{text}"
        );
        assert!(
            text.contains("kubectl auth can-i patch fournosclusters.fournos.dev -n hearth"),
            "{text}"
        );
        assert_eq!(failure.exit_code(), 5);
    }

    #[test]
    fn a_missing_cluster_says_where_it_looked() {
        let op = op("get", Some("fleet"), Some("nope"));
        let failure = describe(&op, 404, "not found").unwrap();
        assert_eq!(
            failure.to_string(),
            "no FournosCluster nope in namespace fleet: `kubectl fournos status -n fleet` lists \
             them (wrong namespace? pass -n or set HEARTH_NAMESPACE)"
        );
        assert_eq!(failure.exit_code(), 4);
    }

    #[test]
    fn the_apiserver_message_is_bounded() {
        use crate::print::tests::{HOSTILE, assert_shows_nothing_hidden};
        let op = op("get", None, None);
        let text = describe(&op, 403, &format!("{HOSTILE}{}", "x".repeat(5000)))
            .unwrap()
            .to_string();
        assert_shows_nothing_hidden(&text);
        assert!(text.chars().count() < 1000, "{text}");
    }

    #[test]
    fn other_codes_are_left_to_the_raw_error() {
        let op = op("get", None, None);
        assert!(describe(&op, 500, "boom").is_none());
        assert!(describe(&op, 409, "conflict").is_none());
    }
}
