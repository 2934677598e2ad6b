//! A scripted apiserver for unit tests (feature `testing`): a [`kube::Client`] whose
//! server answers from a script, in order, and records every request it was sent, so a
//! test states what a write sends and what it does with each answer without a real
//! apiserver. What the real one answers is pinned by the e2e tests (`status_uid`,
//! `lock_manager`, ...); this one only plays those answers back.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use http::{Request, Response};
use http_body_util::BodyExt;
use serde_json::Value;

/// One request as the scripted apiserver saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    pub method: String,
    /// Path and query.
    pub uri: String,
    pub content_type: String,
    /// The body as JSON; `Null` when empty or not JSON.
    pub body: Value,
}

/// The requests seen so far, in order.
#[derive(Clone, Default)]
pub struct Recorded(Arc<Mutex<Vec<Seen>>>);

impl Recorded {
    pub fn all(&self) -> Vec<Seen> {
        self.0.lock().unwrap().clone()
    }
}

/// A client whose apiserver answers `answers` (status code, JSON body) in order; a
/// request beyond the script fails the test.
pub fn scripted(answers: impl IntoIterator<Item = (u16, Value)>) -> (kube::Client, Recorded) {
    let answers = Arc::new(Mutex::new(answers.into_iter().collect::<VecDeque<_>>()));
    serve(move || {
        answers
            .lock()
            .unwrap()
            .pop_front()
            .expect("a request beyond the scripted answers")
    })
}

/// A client whose apiserver answers every request with `code` and `body`.
pub fn answering(code: u16, body: Value) -> (kube::Client, Recorded) {
    serve(move || (code, body.clone()))
}

/// A `Status` refusal as the apiserver words it.
pub fn refusal(code: u16, reason: &str, message: &str) -> Value {
    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "code": code, "reason": reason, "message": message})
}

fn serve(next: impl Fn() -> (u16, Value) + Send + Sync + 'static) -> (kube::Client, Recorded) {
    let recorded = Recorded::default();
    let log = recorded.0.clone();
    let next = Arc::new(next);
    let service = tower::service_fn(move |request: Request<kube::client::Body>| {
        let (log, next) = (log.clone(), next.clone());
        async move {
            let (parts, body) = request.into_parts();
            let bytes = body.collect().await?.to_bytes();
            log.lock().unwrap().push(Seen {
                method: parts.method.to_string(),
                uri: parts
                    .uri
                    .path_and_query()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
                content_type: parts
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            });
            let (code, answer) = next();
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
                Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(serde_json::to_vec(&answer)?))?,
            )
        }
    });
    (kube::Client::new(service, "hearth"), recorded)
}

/// Parses `argv` (the arguments after the program's name) as `P`, ignoring the process
/// environment, so a developer's KUBECONFIG or HEARTH_* variables cannot change what a
/// test sees.
pub fn parse_without_env<P: clap::Parser>(argv: &[&str]) -> Result<P, clap::Error> {
    let cmd = P::command().mut_args(|arg| arg.env(None::<&str>));
    let matches = cmd.try_get_matches_from(std::iter::once("test").chain(argv.iter().copied()))?;
    P::from_arg_matches(&matches)
}

/// Asserts the environment variable each named argument of `P` reads: `(argument id,
/// variable)` pairs, the contract a Deployment is written against.
#[track_caller]
pub fn assert_env_vars<P: clap::CommandFactory>(expected: &[(&str, &str)]) {
    let cmd = P::command();
    for (id, env) in expected {
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_id() == id)
            .unwrap_or_else(|| panic!("no argument {id}"));
        assert_eq!(arg.get_env().and_then(|e| e.to_str()), Some(*env), "--{id}");
    }
}
