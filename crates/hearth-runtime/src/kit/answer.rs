//! What the apiserver answered, read one way in every controller. Codes, not reasons:
//! a create refused as `AlreadyExists` and an update refused as `Conflict` are both 409,
//! and both mean the object is not what the write assumed.

/// The apiserver answered `code`.
pub fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

/// 404: the object is not there.
pub fn is_not_found(error: &kube::Error) -> bool {
    is_status(error, 404)
}

/// 409: already there (a create), changed meanwhile (a stale `resourceVersion`), or
/// replaced by a namesake (a UID precondition).
pub fn is_conflict(error: &kube::Error) -> bool {
    is_status(error, 409)
}

/// A delete (or a write preconditioned on what was seen) that has nothing left to do:
/// the object is gone (404), or is no longer the one it was aimed at (409). The next
/// reconcile looks again.
pub fn is_gone_or_replaced(error: &kube::Error) -> bool {
    is_not_found(error) || is_conflict(error)
}

/// An API error as a person reads it: the apiserver's own message and code, without the
/// debug dump of its Status.
pub fn brief(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(&format!("refused: {reason}"), reason)
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn codes_decide_whatever_the_reason() {
        assert!(is_conflict(&refused(409, "AlreadyExists")));
        assert!(is_conflict(&refused(409, "Conflict")));
        assert!(is_not_found(&refused(404, "NotFound")));
        assert!(!is_not_found(&refused(403, "Forbidden")));
        assert_eq!(
            brief(&refused(403, "Forbidden")),
            "refused: Forbidden (403)"
        );
    }

    #[test]
    fn gone_or_replaced_is_404_and_409_only() {
        assert!(is_gone_or_replaced(&refused(404, "NotFound")));
        assert!(is_gone_or_replaced(&refused(409, "Conflict")));
        assert!(!is_gone_or_replaced(&refused(403, "Forbidden")));
    }
}
