//! When a kubeconfig's credentials stop working, if they say: a client certificate's
//! `NotAfter`, or a JWT bearer token's `exp`. Reported ahead of time so a person can
//! rotate the Secret before the cluster turns `Unauthorized`.
//!
//! The JWT is not verified: Hearth cannot verify it (it has no key) and does not need
//! to. `exp` is only a hint for a warning; the target remains the judge of validity.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jiff::Timestamp;
use secrecy::ExposeSecret as _;

use crate::kubeconfig::{Auth, ValidatedKubeconfig};

/// How long before expiry the warning starts, unless configured otherwise.
pub const DEFAULT_EXPIRY_WARNING_WINDOW: Duration = Duration::from_secs(7 * 86_400);

/// Largest JWT payload looked at; real ones are well under 4 KiB.
const MAX_JWT_PAYLOAD_CHARS: usize = 16 * 1024;

/// Which credential a date belongs to, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialKind {
    ClientCertificate,
    Token,
}

impl CredentialKind {
    pub fn describe(self) -> &'static str {
        match self {
            Self::ClientCertificate => "the client certificate",
            Self::Token => "the token",
        }
    }
}

/// When the credential expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expiry {
    pub kind: CredentialKind,
    pub at: Timestamp,
}

/// How close an expiry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpiryState {
    /// Further away than the warning window.
    Later,
    /// Within the warning window.
    Soon,
    /// Already past.
    Expired,
}

/// The expiry of a validated kubeconfig's credential, if it states one.
pub fn credentials_expiry(kubeconfig: &ValidatedKubeconfig) -> Option<Expiry> {
    let (kind, at) = match kubeconfig.auth() {
        Auth::ClientCert { cert_pem, .. } => (
            CredentialKind::ClientCertificate,
            certificate_not_after(cert_pem),
        ),
        Auth::Token(token) => (CredentialKind::Token, jwt_expiry(token.expose_secret())),
    };
    Some(Expiry { kind, at: at? })
}

/// `NotAfter` of the first certificate in a PEM bundle (the leaf, by convention).
pub fn certificate_not_after(cert_pem: &[u8]) -> Option<Timestamp> {
    let block = x509_parser::pem::Pem::iter_from_buffer(cert_pem)
        .filter_map(Result::ok)
        .find(|b| b.label == "CERTIFICATE")?;
    let cert = block.parse_x509().ok()?;
    Timestamp::from_second(cert.validity().not_after.timestamp()).ok()
}

/// `exp` of a token shaped like a JWT (three base64url segments, JSON header and
/// payload); `None` for any other token, or a JWT without a usable `exp`.
pub fn jwt_expiry(token: &str) -> Option<Timestamp> {
    let mut parts = token.split('.');
    let (header, payload, _signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some()
        || header.is_empty()
        || payload.is_empty()
        || payload.len() > MAX_JWT_PAYLOAD_CHARS
    {
        return None;
    }
    // A dotted opaque token is not a JWT: require a JSON object header too.
    let header: serde_json::Value = serde_json::from_slice(&decode_segment(header)?).ok()?;
    header.as_object()?;
    let claims: serde_json::Value = serde_json::from_slice(&decode_segment(payload)?).ok()?;
    let exp = claims.get("exp")?;
    let seconds = exp.as_i64().or_else(|| {
        exp.as_f64()
            .filter(|f| f.is_finite())
            .map(|f| f.floor() as i64)
    })?;
    Timestamp::from_second(seconds).ok()
}

fn decode_segment(segment: &str) -> Option<Vec<u8>> {
    // Some issuers pad; the JOSE spec says they should not.
    URL_SAFE_NO_PAD.decode(segment.trim_end_matches('=')).ok()
}

pub fn expiry_state(expires_at: Timestamp, now: Timestamp, window: Duration) -> ExpiryState {
    if expires_at <= now {
        ExpiryState::Expired
    } else if expires_at.duration_since(now).unsigned_abs() <= window {
        ExpiryState::Soon
    } else {
        ExpiryState::Later
    }
}

/// A message for the condition and the Warning Event when `expiry` is within `window`
/// of `now` or past; `None` otherwise. The wording depends only on the expiry and the
/// window, not on `now`, so repeated probes write the same message.
pub fn expiry_warning(expiry: Expiry, now: Timestamp, window: Duration) -> Option<String> {
    let what = expiry.kind.describe();
    let at = expiry.at;
    match expiry_state(at, now, window) {
        ExpiryState::Later => None,
        ExpiryState::Soon => Some(format!(
            "{what} expires at {at} (within the {} warning window): put a renewed kubeconfig in the Secret before then",
            hearth_api::duration::format_duration(window),
        )),
        ExpiryState::Expired => Some(format!(
            "{what} expired at {at}: put a renewed kubeconfig in the Secret; the target may start rejecting it at any time",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubeconfig::validate;
    use crate::test_support::{b64, cert_until, https_cluster, jwt, kubeconfig};
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn client_certificate_not_after() {
        let c = cert_until(2027, 3, 4);
        assert_eq!(
            certificate_not_after(c.cert_pem.as_bytes()),
            Some(ts("2027-03-04T00:00:00Z"))
        );
        // The leaf (first) certificate decides, not the CA after it.
        let chain = format!("{}{}", c.cert_pem, cert_until(2040, 1, 1).cert_pem);
        assert_eq!(
            certificate_not_after(chain.as_bytes()),
            Some(ts("2027-03-04T00:00:00Z"))
        );
        assert_eq!(certificate_not_after(b"not pem"), None);
    }

    #[test]
    fn kubeconfig_with_client_certificate() {
        let c = cert_until(2026, 11, 25);
        let user = json!({ "client-certificate-data": b64(&c.cert_pem), "client-key-data": b64(&c.key_pem) });
        let k = validate(&serde_json::to_vec(&kubeconfig(https_cluster(), user)).unwrap()).unwrap();
        assert_eq!(
            credentials_expiry(&k),
            Some(Expiry {
                kind: CredentialKind::ClientCertificate,
                at: ts("2026-11-25T00:00:00Z"),
            })
        );
    }

    #[test]
    fn kubeconfig_with_jwt_or_opaque_token() {
        let token = jwt(json!({ "iss": "kubernetes/serviceaccount", "exp": 1_800_000_000 }));
        let k = validate(
            &serde_json::to_vec(&kubeconfig(https_cluster(), json!({ "token": token }))).unwrap(),
        )
        .unwrap();
        assert_eq!(
            credentials_expiry(&k),
            Some(Expiry {
                kind: CredentialKind::Token,
                at: Timestamp::from_second(1_800_000_000).unwrap(),
            })
        );
        let k = validate(
            &serde_json::to_vec(&kubeconfig(
                https_cluster(),
                json!({ "token": "opaque-abc" }),
            ))
            .unwrap(),
        )
        .unwrap();
        assert_eq!(credentials_expiry(&k), None);
    }

    #[test]
    fn jwt_shapes() {
        let exp = |v| jwt(json!({ "exp": v }));
        assert_eq!(
            jwt_expiry(&exp(json!(1_800_000_000))),
            Timestamp::from_second(1_800_000_000).ok()
        );
        assert_eq!(
            jwt_expiry(&exp(json!(1_800_000_000.9))),
            Timestamp::from_second(1_800_000_000).ok()
        );
        assert_eq!(
            jwt_expiry(&exp(json!("1800000000"))),
            None,
            "exp must be a number"
        );
        assert_eq!(jwt_expiry(&exp(json!(1e300))), None, "out of range");
        assert_eq!(jwt_expiry(&jwt(json!({ "sub": "x" }))), None, "no exp");
        // Padded segments are tolerated.
        let padded = {
            let t = exp(json!(1_800_000_000));
            let parts: Vec<&str> = t.split('.').collect();
            format!("{}==.{}=.{}", parts[0], parts[1], parts[2])
        };
        assert_eq!(
            jwt_expiry(&padded),
            Timestamp::from_second(1_800_000_000).ok()
        );
        for not_jwt in [
            "",
            "abc",
            "a.b",
            "a.b.c.d",
            "..",
            "sha256~abcdefghijklmnop", // OpenShift token
            "eyJ.eyJ.sig",
            "aGVsbG8.aGVsbG8.c2ln", // base64 but not JSON
        ] {
            assert_eq!(jwt_expiry(not_jwt), None, "{not_jwt:?}");
        }
        // A header that is JSON but not an object is not a JWT.
        let t = format!(
            "{}.{}.x",
            URL_SAFE_NO_PAD.encode("[1]"),
            URL_SAFE_NO_PAD.encode(r#"{"exp":1}"#)
        );
        assert_eq!(jwt_expiry(&t), None);
    }

    #[test]
    fn states_and_warnings() {
        let now = ts("2026-11-21T12:00:00Z");
        let week = DEFAULT_EXPIRY_WARNING_WINDOW;
        let cert = |at: &str| Expiry {
            kind: CredentialKind::ClientCertificate,
            at: ts(at),
        };
        assert_eq!(
            expiry_state(ts("2026-12-21T00:00:00Z"), now, week),
            ExpiryState::Later
        );
        assert_eq!(
            expiry_state(ts("2026-11-28T12:00:00Z"), now, week),
            ExpiryState::Soon,
            "exactly at the window"
        );
        assert_eq!(
            expiry_state(ts("2026-11-28T12:00:01Z"), now, week),
            ExpiryState::Later
        );
        assert_eq!(expiry_state(now, now, week), ExpiryState::Expired);

        assert_eq!(
            expiry_warning(cert("2026-12-21T00:00:00Z"), now, week),
            None
        );
        assert_eq!(
            expiry_warning(cert("2026-11-25T00:00:00Z"), now, week).unwrap(),
            "the client certificate expires at 2026-11-25T00:00:00Z (within the 7d warning window): \
             put a renewed kubeconfig in the Secret before then"
        );
        let expired = expiry_warning(
            Expiry {
                kind: CredentialKind::Token,
                at: ts("2026-11-20T00:00:00Z"),
            },
            now,
            week,
        )
        .unwrap();
        assert!(
            expired.starts_with("the token expired at 2026-11-20T00:00:00Z"),
            "{expired}"
        );
        // The message does not move with the clock.
        let later = ts("2026-11-22T12:00:00Z");
        assert_eq!(
            expiry_warning(cert("2026-11-25T00:00:00Z"), now, week),
            expiry_warning(cert("2026-11-25T00:00:00Z"), later, week)
        );
    }
}
