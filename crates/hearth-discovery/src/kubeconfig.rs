//! A target's kubeconfig, as stored in a Secret, checked against an allow-list.
//!
//! Anyone who can create a labeled Secret chooses what this module reads, so nothing
//! in a kubeconfig may make Hearth run a command, read a file, use a proxy or skip TLS
//! verification. Only the selected context's cluster and user are examined: Hearth
//! never uses the others, and kubeconfigs exported from a laptop often carry unrelated
//! entries. Of those two, only inline fields are accepted:
//!
//! - cluster: `server` (https), `certificate-authority-data`, `tls-server-name`
//!   (and the harmless `insecure-skip-tls-verify: false`, `disable-compression`,
//!   `extensions`);
//! - user: exactly one of `token` or `client-certificate-data` + `client-key-data`
//!   (and `extensions`).
//!
//! Everything else in those two entries is refused, naming the field. Errors carry
//! field paths and entry names only, never a value, so they are safe to put in status,
//! Events and logs.
//!
//! [`client_config`] then builds the `kube::Config` from the validated fields alone:
//! there is no path from a Secret to kube's own kubeconfig loader, which would honour
//! exec plugins, file paths and proxies.

use std::fmt;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hearth_api::text::{plain_or_quoted, quoted};
use secrecy::{ExposeSecret as _, SecretSlice, SecretString};
use serde_json::{Map, Value};

/// Largest kubeconfig accepted, before any decoding. A kubeconfig for one cluster
/// with a CA bundle and a client certificate is a few KiB; the cap bounds the memory
/// and parsing time a hostile Secret can cost (Secrets themselves may be 1 MiB).
pub const MAX_KUBECONFIG_BYTES: usize = 1024 * 1024;

/// Longest entry name quoted in an error; names are user input.
const MAX_QUOTED_NAME: usize = 64;

/// A kubeconfig that passed the allow-list: one https server, optional CA, and one
/// inline credential. Built only by [`validate`]; holds no path, command or proxy.
#[derive(Clone)]
pub struct ValidatedKubeconfig {
    context: String,
    cluster: ClusterFields,
    auth: Auth,
}

/// The one credential a validated kubeconfig carries.
#[derive(Clone)]
pub enum Auth {
    /// A bearer token.
    Token(SecretString),
    /// A client certificate (chain) and its private key, both PEM.
    ClientCert {
        cert_pem: Vec<u8>,
        key_pem: SecretSlice<u8>,
    },
}

impl ValidatedKubeconfig {
    /// Name of the context that was used (`current-context`, or the first one).
    pub fn context(&self) -> &str {
        &self.context
    }

    /// The target's API server, always `https://`, without user info or query.
    pub fn server(&self) -> &http::Uri {
        &self.cluster.server
    }

    /// The CA bundle (PEM) to verify the server with; `None` means the platform's roots.
    pub fn ca_pem(&self) -> Option<&[u8]> {
        self.cluster.ca_pem.as_deref()
    }

    /// Name to verify the server's certificate against instead of the URL's host.
    pub fn tls_server_name(&self) -> Option<&str> {
        self.cluster.tls_server_name.as_deref()
    }

    pub fn auth(&self) -> &Auth {
        &self.auth
    }
}

// Written by hand so that neither the token nor the key can reach a log line through
// `{:?}`; the certificate is public but large, so only its size is shown.
impl fmt::Debug for ValidatedKubeconfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ValidatedKubeconfig")
            .field("context", &self.context)
            .field("server", &self.cluster.server.to_string())
            .field(
                "ca_pem",
                &self
                    .cluster
                    .ca_pem
                    .as_ref()
                    .map(|p| format!("{} bytes", p.len())),
            )
            .field("tls_server_name", &self.cluster.tls_server_name)
            .field("auth", &self.auth)
            .finish()
    }
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Token(_) => f.write_str("Token([REDACTED])"),
            Self::ClientCert { cert_pem, .. } => f
                .debug_struct("ClientCert")
                .field("cert_pem", &format!("{} bytes", cert_pem.len()))
                .field("key_pem", &"[REDACTED]")
                .finish(),
        }
    }
}

/// Why a kubeconfig is `Invalid`. Messages name fields and entries, never values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeconfigError {
    #[error(
        "the kubeconfig is empty: store the target's kubeconfig under the Secret's `kubeconfig` key"
    )]
    Empty,
    #[error(
        "the kubeconfig is {size} bytes, over the {limit}-byte limit: store a kubeconfig for this one cluster only"
    )]
    TooLarge { size: usize, limit: usize },
    #[error(
        "the kubeconfig is not text: store the kubeconfig file itself (YAML or JSON) or its base64"
    )]
    NotText,
    #[error("the kubeconfig is not valid YAML or JSON{}: check the file with `kubectl config view --kubeconfig <file>`", at(*.line, *.column))]
    Syntax {
        line: Option<u64>,
        column: Option<u64>,
    },
    #[error(
        "the kubeconfig nests too deeply or expands too many YAML aliases to be a kubeconfig: store a plain kubeconfig"
    )]
    TooComplex,
    #[error("the kubeconfig is not a mapping with `clusters`, `contexts` and `users`")]
    NotAKubeconfig,
    #[error(
        "the kubeconfig has no contexts: add a context naming the cluster and user Hearth should use"
    )]
    NoContexts,
    #[error("`current-context` is {name}, but no context has that name")]
    UnknownContext { name: String },
    #[error("context {context} names no {missing}: set `contexts[].context.{missing}`")]
    IncompleteContext {
        context: String,
        missing: &'static str,
    },
    #[error("context {context} uses cluster {cluster}, but no cluster has that name")]
    UnknownCluster { context: String, cluster: String },
    #[error("context {context} uses user {user}, but no user has that name")]
    UnknownUser { context: String, user: String },
    #[error("`{field}` is refused: {why}")]
    Refused { field: String, why: &'static str },
    #[error("`{field}` is not supported: Hearth accepts only {allowed}")]
    Unsupported {
        field: String,
        allowed: &'static str,
    },
    #[error("`{field}` must be {expected}")]
    WrongType {
        field: String,
        expected: &'static str,
    },
    #[error(
        "`{field}` is missing: set it to the target's API server URL, e.g. https://api.example.com:6443"
    )]
    MissingServer { field: String },
    #[error(
        "`{field}` is plain http: credentials would cross the network unencrypted; use the server's https:// URL"
    )]
    InsecureServer { field: String },
    #[error("`{field}` is not usable: {why}")]
    BadServer { field: String, why: &'static str },
    #[error(
        "`{field}` has no credentials: set `token`, or `client-certificate-data` and `client-key-data`"
    )]
    MissingCredentials { field: String },
    #[error("`{field}` has both a token and a client certificate: keep exactly one")]
    ConflictingCredentials { field: String },
    #[error(
        "`{field}` is missing: a client certificate needs both `client-certificate-data` and `client-key-data`"
    )]
    IncompleteClientCert { field: String },
    #[error(
        "`{field}` is not base64: it must be the base64 of the PEM file, as `kubectl config view --raw` shows it"
    )]
    BadBase64 { field: String },
    #[error("`{field}` does not hold {expected}")]
    BadPem {
        field: String,
        expected: &'static str,
    },
    #[error(
        "`{field}` contains characters an HTTP Authorization header cannot carry (spaces, newlines or non-ASCII)"
    )]
    BadToken { field: String },
    /// The fields passed the checks here but the TLS stack refused them when the client
    /// was built (e.g. a key that does not belong to the certificate). Made by the
    /// caller of [`client_config`], which sees that failure.
    #[error(
        "the kubeconfig's certificates or key cannot be loaded by the TLS client: check that client-key-data \
         belongs to client-certificate-data and that certificate-authority-data holds CA certificates"
    )]
    ClientSetup,
    /// Not about the kubeconfig's content: the Secret is another cluster's. Checked
    /// before the kubeconfig is read, so one target's credentials can only ever be
    /// published as that target's cluster.
    #[error(
        "the Secret is not meant for FournosCluster {cluster}: its name is not {expected} (the name \
         the Secret pattern gives this cluster) and its annotation fournos.dev/allowed-clusters \
         does not list {cluster}; point spec.kubeconfigSecret at this cluster's own Secret, or add \
         {cluster} to that annotation if both clusters really are the same target"
    )]
    NotForThisCluster { cluster: String, expected: String },
}

impl KubeconfigError {
    /// Short, stable, CamelCase: for Event reasons, metric labels and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Empty => "Empty",
            Self::TooLarge { .. } => "TooLarge",
            Self::NotText => "NotText",
            Self::Syntax { .. } => "Syntax",
            Self::TooComplex => "TooComplex",
            Self::NotAKubeconfig => "NotAKubeconfig",
            Self::NoContexts => "NoContexts",
            Self::UnknownContext { .. } => "UnknownContext",
            Self::IncompleteContext { .. } => "IncompleteContext",
            Self::UnknownCluster { .. } => "UnknownCluster",
            Self::UnknownUser { .. } => "UnknownUser",
            Self::Refused { .. } => "RefusedField",
            Self::Unsupported { .. } => "UnsupportedField",
            Self::WrongType { .. } => "WrongType",
            Self::MissingServer { .. } => "MissingServer",
            Self::InsecureServer { .. } => "InsecureServer",
            Self::BadServer { .. } => "BadServer",
            Self::MissingCredentials { .. } => "MissingCredentials",
            Self::ConflictingCredentials { .. } => "ConflictingCredentials",
            Self::IncompleteClientCert { .. } => "IncompleteClientCert",
            Self::BadBase64 { .. } => "BadBase64",
            Self::BadPem { .. } => "BadPem",
            Self::BadToken { .. } => "BadToken",
            Self::ClientSetup => "ClientSetup",
            Self::NotForThisCluster { .. } => "SecretNotForThisCluster",
        }
    }

    /// The offending field's path, when the error is about one field.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::Refused { field, .. }
            | Self::Unsupported { field, .. }
            | Self::WrongType { field, .. }
            | Self::MissingServer { field }
            | Self::InsecureServer { field }
            | Self::BadServer { field, .. }
            | Self::MissingCredentials { field }
            | Self::ConflictingCredentials { field }
            | Self::IncompleteClientCert { field }
            | Self::BadBase64 { field }
            | Self::BadPem { field, .. }
            | Self::BadToken { field } => Some(field),
            _ => None,
        }
    }
}

fn wrong_type(field: impl Into<String>, expected: &'static str) -> KubeconfigError {
    KubeconfigError::WrongType {
        field: field.into(),
        expected,
    }
}

fn at(line: Option<u64>, column: Option<u64>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(" (line {l}, column {c})"),
        (Some(l), None) => format!(" (line {l})"),
        _ => String::new(),
    }
}

const BASIC_WHY: &str =
    "basic authentication is not supported; use a token or a client certificate";
const IMPERSONATION_WHY: &str =
    "impersonation is not supported; give the credentials themselves the access Hearth needs";

/// Fields refused in the selected user, in the order they are checked, with why.
const REFUSED_USER_FIELDS: &[(&str, &str)] = &[
    (
        "exec",
        "exec credential plugins would run a command inside Hearth; put a token or client-certificate-data/client-key-data in the kubeconfig",
    ),
    (
        "auth-provider",
        "auth-provider plugins run commands and read files inside Hearth; put a token or client-certificate-data/client-key-data in the kubeconfig",
    ),
    (
        "tokenFile",
        "a file path would make Hearth read its own files; put the token itself in `token`",
    ),
    (
        "client-certificate",
        "a file path would make Hearth read its own files; put the certificate in `client-certificate-data` (base64 of the PEM)",
    ),
    (
        "client-key",
        "a file path would make Hearth read its own files; put the key in `client-key-data` (base64 of the PEM)",
    ),
    ("username", BASIC_WHY),
    ("password", BASIC_WHY),
    ("as", IMPERSONATION_WHY),
    ("as-uid", IMPERSONATION_WHY),
    ("as-groups", IMPERSONATION_WHY),
    ("as-user-extra", IMPERSONATION_WHY),
];

/// Fields refused in the selected cluster, with why (`insecure-skip-tls-verify` only
/// when true, see [`validate_cluster`]).
const REFUSED_CLUSTER_FIELDS: &[(&str, &str)] = &[
    (
        "certificate-authority",
        "a file path would make Hearth read its own files; put the CA in `certificate-authority-data` (base64 of the PEM)",
    ),
    (
        "proxy-url",
        "Hearth connects to targets directly; a proxy named in a Secret could capture the credentials",
    ),
];

const ALLOWED_USER_FIELDS: &[&str] = &[
    "token",
    "client-certificate-data",
    "client-key-data",
    "extensions",
];
const ALLOWED_USER: &str =
    "`token`, or `client-certificate-data` with `client-key-data`, in a user";
const ALLOWED_CLUSTER_FIELDS: &[&str] = &[
    "server",
    "certificate-authority-data",
    "tls-server-name",
    "insecure-skip-tls-verify",
    "disable-compression",
    "extensions",
];
const ALLOWED_CLUSTER: &str =
    "`server`, `certificate-authority-data` and `tls-server-name` in a cluster";

const INSECURE: &str = "insecure-skip-tls-verify";
const INSECURE_WHY: &str = "it turns off verification of the target's certificate; put the target's CA in `certificate-authority-data` instead";

/// Parses and validates the bytes of a Secret's `kubeconfig` key.
pub fn validate(data: &[u8]) -> Result<ValidatedKubeconfig, KubeconfigError> {
    let text = decode_text(data)?;
    let doc = parse_document(&text)?;
    let root = doc.as_object().ok_or(KubeconfigError::NotAKubeconfig)?;

    let (context_name, context) = select_context(root)?;
    let cluster_ref = required_name(context, &context_name, "cluster")?;
    let user_ref = required_name(context, &context_name, "user")?;

    let cluster = find_named(root, "clusters", "cluster", cluster_ref)?.ok_or_else(|| {
        KubeconfigError::UnknownCluster {
            context: entry_name(&context_name),
            cluster: entry_name(cluster_ref),
        }
    })?;
    let user = find_named(root, "users", "user", user_ref)?.ok_or_else(|| {
        KubeconfigError::UnknownUser {
            context: entry_name(&context_name),
            user: entry_name(user_ref),
        }
    })?;

    let cluster_path = format!("clusters[{}].cluster", entry_name(cluster_ref));
    let user_path = format!("users[{}].user", entry_name(user_ref));
    let cluster = validate_cluster(cluster, &cluster_path)?;
    let auth = validate_user(user, &user_path)?;
    Ok(ValidatedKubeconfig {
        context: context_name,
        cluster,
        auth,
    })
}

/// Builds the client configuration for a target from the validated fields alone:
/// no exec, no auth provider, no file, no proxy, TLS verified, and `timeout` on
/// connect, read and write. Nothing from the environment is consulted.
pub fn client_config(kubeconfig: &ValidatedKubeconfig, timeout: Duration) -> kube::Config {
    let cluster = &kubeconfig.cluster;
    let mut config = kube::Config::new(cluster.server.clone());
    config.root_cert = (!cluster.ca_der.is_empty()).then(|| cluster.ca_der.clone());
    config.root_cert_file = None;
    config.tls_server_name = cluster.tls_server_name.clone();
    config.accept_invalid_certs = false;
    config.proxy_url = None;
    config.headers = Vec::new();
    config.connect_timeout = Some(timeout);
    config.read_timeout = Some(timeout);
    config.write_timeout = Some(timeout);
    // Each probe builds a fresh client, but a read timeout should still count from the
    // request, not from when a pooled connection went idle.
    config.reset_reader_on_write = true;
    // A probe is retried on its own schedule, with backoff; retrying inside the probe
    // would only eat into its deadline.
    config.default_retry = false;
    config.auth_info = match &kubeconfig.auth {
        Auth::Token(token) => kube::config::AuthInfo {
            token: Some(token.clone()),
            ..Default::default()
        },
        // kube's AuthInfo takes these as base64 of the PEM, as a kubeconfig holds them.
        Auth::ClientCert { cert_pem, key_pem } => kube::config::AuthInfo {
            client_certificate_data: Some(BASE64.encode(cert_pem)),
            client_key_data: Some(SecretString::from(BASE64.encode(key_pem.expose_secret()))),
            ..Default::default()
        },
    };
    config
}

/// The kubeconfig text: size-capped, UTF-8, and base64-decoded once if the Secret
/// holds the base64 of a kubeconfig (the "double base64" that older tooling wrote).
fn decode_text(data: &[u8]) -> Result<String, KubeconfigError> {
    if data.len() > MAX_KUBECONFIG_BYTES {
        return Err(KubeconfigError::TooLarge {
            size: data.len(),
            limit: MAX_KUBECONFIG_BYTES,
        });
    }
    let trimmed = data.trim_ascii();
    if trimmed.is_empty() {
        return Err(KubeconfigError::Empty);
    }
    // A YAML or JSON kubeconfig always contains `:`, which base64 never does, so the
    // two cannot be confused.
    let decoded = looks_like_base64(trimmed)
        .then(|| decode_base64(trimmed))
        .flatten();
    let bytes = decoded.unwrap_or_else(|| trimmed.to_vec());
    let text = String::from_utf8(bytes).map_err(|_| KubeconfigError::NotText)?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text).trim();
    if text.is_empty() {
        return Err(KubeconfigError::Empty);
    }
    // Control characters other than whitespace never occur in a kubeconfig; they mean
    // binary data that happened to be valid UTF-8.
    if text
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    {
        return Err(KubeconfigError::NotText);
    }
    Ok(text.to_owned())
}

fn looks_like_base64(data: &[u8]) -> bool {
    data.iter().all(|b| {
        b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=') || b.is_ascii_whitespace()
    })
}

/// YAML or JSON into a JSON value, with parsing bounded: no value, alias expansion or
/// nesting can cost more than a kubeconfig plausibly needs.
fn parse_document(text: &str) -> Result<Value, KubeconfigError> {
    if text.starts_with('{') {
        // serde_json has its own recursion limit (128) and no aliases.
        return serde_json::from_str(text).map_err(|e| {
            if e.classify() == serde_json::error::Category::Syntax
                && e.to_string().contains("recursion limit")
            {
                KubeconfigError::TooComplex
            } else {
                KubeconfigError::Syntax {
                    line: Some(e.line() as u64),
                    column: Some(e.column() as u64),
                }
            }
        });
    }
    let mut alias_limits = serde_saphyr::options::AliasLimits::default();
    alias_limits.max_total_replayed_events = 100_000;
    alias_limits.max_replay_stack_depth = 16;
    alias_limits.max_alias_expansions_per_anchor = 100;
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_reader_input_bytes: Some(MAX_KUBECONFIG_BYTES),
            max_events: 200_000,
            max_aliases: 1_000,
            max_anchors: 1_000,
            max_depth: 32,
            max_documents: 1,
            max_nodes: 100_000,
            max_total_scalar_bytes: 2 * MAX_KUBECONFIG_BYTES,
            max_merge_keys: 100,
        },
        alias_limits: alias_limits,
        // Snippets would quote the input, which may hold a token, into the error.
        with_snippet: false,
        crop_radius: 0,
    };
    serde_saphyr::from_str_with_options::<Value>(text, options).map_err(|e| {
        if exceeds_limits(&e) {
            KubeconfigError::TooComplex
        } else {
            let location = e.location();
            KubeconfigError::Syntax {
                line: location.as_ref().map(|l| l.line()),
                column: location.as_ref().map(|l| l.column()),
            }
        }
    })
}

fn exceeds_limits(e: &serde_saphyr::Error) -> bool {
    use serde_saphyr::Error as E;
    match e.without_snippet() {
        E::Budget { .. }
        | E::AliasReplayCounterOverflow { .. }
        | E::AliasReplayLimitExceeded { .. }
        | E::AliasExpansionLimitExceeded { .. }
        | E::AliasReplayStackDepthExceeded { .. } => true,
        E::AliasError { error, .. } => exceeds_limits(error),
        _ => false,
    }
}

/// The context named by `current-context`, or the first one when it is unset (as the
/// Python controller did, and as generated kubeconfigs often need).
fn select_context(
    root: &Map<String, Value>,
) -> Result<(String, &Map<String, Value>), KubeconfigError> {
    let current = match root.get("current-context") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => return Err(wrong_type("current-context", "a context name")),
    };
    let contexts = named_entries(root, "contexts", "context")?;
    let selected = match current {
        Some(name) => contexts
            .into_iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| KubeconfigError::UnknownContext {
                name: entry_name(name),
            })?,
        None => contexts
            .into_iter()
            .next()
            .ok_or(KubeconfigError::NoContexts)?,
    };
    Ok((selected.0.to_owned(), selected.1))
}

/// An item of `clusters`, `contexts` or `users`: its name and body.
type Entry<'a> = (&'a str, &'a Map<String, Value>);

/// The `(name, body)` pairs of a list such as `clusters`, where each item is
/// `{name: ..., <body_key>: {...}}`. A missing or null list is empty.
fn named_entries<'a>(
    root: &'a Map<String, Value>,
    list_key: &str,
    body_key: &str,
) -> Result<Vec<Entry<'a>>, KubeconfigError> {
    let items = match root.get(list_key) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(wrong_type(list_key, "a list")),
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let wrong = |expected| wrong_type(format!("{list_key}[{i}]"), expected);
        let item = item
            .as_object()
            .ok_or_else(|| wrong("a mapping with `name` and `{body_key}`"))?;
        let name = item
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| wrong("a mapping with a string `name`"))?;
        let body = match item.get(body_key) {
            Some(Value::Object(body)) => body,
            _ => {
                return Err(wrong_type(
                    format!("{list_key}[{}].{body_key}", entry_name(name)),
                    "a mapping",
                ));
            }
        };
        out.push((name, body));
    }
    Ok(out)
}

/// The first entry of `list_key` named `name` (kubectl uses the first too).
fn find_named<'a>(
    root: &'a Map<String, Value>,
    list_key: &str,
    body_key: &str,
    name: &str,
) -> Result<Option<&'a Map<String, Value>>, KubeconfigError> {
    Ok(named_entries(root, list_key, body_key)?
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, body)| body))
}

fn required_name<'a>(
    context: &'a Map<String, Value>,
    context_name: &str,
    key: &'static str,
) -> Result<&'a str, KubeconfigError> {
    match context.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        None | Some(Value::Null) | Some(Value::String(_)) => {
            Err(KubeconfigError::IncompleteContext {
                context: entry_name(context_name),
                missing: key,
            })
        }
        Some(_) => Err(wrong_type(
            format!("contexts[{}].context.{key}", entry_name(context_name)),
            "a name",
        )),
    }
}

/// The allowed fields of the selected cluster.
#[derive(Clone)]
struct ClusterFields {
    server: http::Uri,
    ca_pem: Option<Vec<u8>>,
    ca_der: Vec<Vec<u8>>,
    tls_server_name: Option<String>,
}

fn validate_cluster(
    cluster: &Map<String, Value>,
    path: &str,
) -> Result<ClusterFields, KubeconfigError> {
    reject_refused(cluster, path, REFUSED_CLUSTER_FIELDS)?;
    let insecure = match cluster.get(INSECURE) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(set)) => *set,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => true,
        Some(_) => return Err(wrong_type(format!("{path}.{INSECURE}"), "true or false")),
    };
    if insecure {
        return Err(refused(path, INSECURE, INSECURE_WHY));
    }
    reject_unknown(cluster, path, ALLOWED_CLUSTER_FIELDS, ALLOWED_CLUSTER)?;

    let server_field = format!("{path}.server");
    let server = optional_string(cluster, "server", path)?
        .ok_or_else(|| KubeconfigError::MissingServer {
            field: server_field.clone(),
        })
        .and_then(|s| parse_server(s, &server_field))?;

    let (ca_pem, ca_der) = match optional_string(cluster, "certificate-authority-data", path)? {
        None => (None, Vec::new()),
        Some(data) => {
            let field = format!("{path}.certificate-authority-data");
            let pem = decode_base64_field(data, &field)?;
            let der = certificates_der(&pem).ok_or(KubeconfigError::BadPem {
                field,
                expected: "PEM certificates (-----BEGIN CERTIFICATE-----)",
            })?;
            (Some(pem), der)
        }
    };

    let tls_server_name = optional_string(cluster, "tls-server-name", path)?.map(str::to_owned);
    if let Some(name) = &tls_server_name
        && !name.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(wrong_type(
            format!("{path}.tls-server-name"),
            "a DNS name or IP address",
        ));
    }
    Ok(ClusterFields {
        server,
        ca_pem,
        ca_der,
        tls_server_name,
    })
}

fn validate_user(user: &Map<String, Value>, path: &str) -> Result<Auth, KubeconfigError> {
    reject_refused(user, path, REFUSED_USER_FIELDS)?;
    reject_unknown(user, path, ALLOWED_USER_FIELDS, ALLOWED_USER)?;

    let token = optional_string(user, "token", path)?.map(str::trim);
    let cert = optional_string(user, "client-certificate-data", path)?;
    let key = optional_string(user, "client-key-data", path)?;

    match (token, cert, key) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            Err(KubeconfigError::ConflictingCredentials { field: path.into() })
        }
        (Some(token), None, None) => {
            // Kubernetes tokens are visible ASCII; anything else would be rejected by
            // the HTTP stack at request time with a less helpful error.
            if !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(KubeconfigError::BadToken {
                    field: format!("{path}.token"),
                });
            }
            Ok(Auth::Token(SecretString::from(token)))
        }
        (None, Some(_), None) => Err(KubeconfigError::IncompleteClientCert {
            field: format!("{path}.client-key-data"),
        }),
        (None, None, Some(_)) => Err(KubeconfigError::IncompleteClientCert {
            field: format!("{path}.client-certificate-data"),
        }),
        (None, Some(cert), Some(key)) => {
            let cert_field = format!("{path}.client-certificate-data");
            let cert_pem = decode_base64_field(cert, &cert_field)?;
            if certificates_der(&cert_pem).is_none() {
                return Err(KubeconfigError::BadPem {
                    field: cert_field,
                    expected: "a PEM client certificate (-----BEGIN CERTIFICATE-----)",
                });
            }
            let key_field = format!("{path}.client-key-data");
            let key_pem = SecretSlice::from(decode_base64_field(key, &key_field)?);
            if !holds_private_key(key_pem.expose_secret()) {
                return Err(KubeconfigError::BadPem {
                    field: key_field,
                    expected: "an unencrypted PEM private key (-----BEGIN PRIVATE KEY-----, RSA or EC)",
                });
            }
            Ok(Auth::ClientCert { cert_pem, key_pem })
        }
        (None, None, None) => Err(KubeconfigError::MissingCredentials { field: path.into() }),
    }
}

/// Whether a field is present with a value. kubectl treats `null` and `""` as unset.
fn is_set(map: &Map<String, Value>, key: &str) -> bool {
    match map.get(key) {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(_) => true,
    }
}

/// The first field of `refused` that is set, refused with its why.
fn reject_refused(
    map: &Map<String, Value>,
    path: &str,
    refused_fields: &[(&str, &'static str)],
) -> Result<(), KubeconfigError> {
    match refused_fields.iter().find(|(key, _)| is_set(map, key)) {
        Some((key, why)) => Err(refused(path, key, why)),
        None => Ok(()),
    }
}

fn refused(path: &str, key: &str, why: &'static str) -> KubeconfigError {
    KubeconfigError::Refused {
        field: format!("{path}.{key}"),
        why,
    }
}

fn reject_unknown(
    map: &Map<String, Value>,
    path: &str,
    allowed: &[&str],
    allowed_text: &'static str,
) -> Result<(), KubeconfigError> {
    // Sorted so the same kubeconfig always names the same field.
    let mut unknown: Vec<&str> = map
        .iter()
        .filter(|(k, v)| !v.is_null() && !allowed.contains(&k.as_str()))
        .map(|(k, _)| k.as_str())
        .collect();
    unknown.sort_unstable();
    match unknown.first() {
        Some(key) => Err(KubeconfigError::Unsupported {
            field: format!("{path}.{}", field_key(key)),
            allowed: allowed_text,
        }),
        None => Ok(()),
    }
}

/// A string field, `None` when absent, null or empty.
fn optional_string<'a>(
    map: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<&'a str>, KubeconfigError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(wrong_type(format!("{path}.{key}"), "a string")),
    }
}

fn parse_server(raw: &str, field: &str) -> Result<http::Uri, KubeconfigError> {
    let bad = |why| KubeconfigError::BadServer {
        field: field.to_owned(),
        why,
    };
    let uri: http::Uri = raw.trim().parse().map_err(|_| bad("it is not a URL"))?;
    match uri.scheme_str() {
        Some(s) if s.eq_ignore_ascii_case("https") => {}
        Some(s) if s.eq_ignore_ascii_case("http") => {
            return Err(KubeconfigError::InsecureServer {
                field: field.to_owned(),
            });
        }
        _ => return Err(bad("it must start with https://")),
    }
    let authority = uri.authority().ok_or_else(|| bad("it has no host"))?;
    // User info would be a credential outside the allow-list, and could surface in
    // status through the URL; a query has no meaning for an API server.
    if authority.as_str().contains('@') {
        return Err(bad("it must not contain a user name or password"));
    }
    if authority.host().is_empty() {
        return Err(bad("it has no host"));
    }
    if uri.query().is_some() {
        return Err(bad("it must not have a query (`?...`)"));
    }
    Ok(uri)
}

fn decode_base64_field(data: &str, field: &str) -> Result<Vec<u8>, KubeconfigError> {
    decode_base64(data.as_bytes()).ok_or_else(|| KubeconfigError::BadBase64 {
        field: field.to_owned(),
    })
}

/// Base64 with whitespace (line breaks) anywhere.
fn decode_base64(data: &[u8]) -> Option<Vec<u8>> {
    let compact: Vec<u8> = data
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    BASE64.decode(compact).ok()
}

/// The DER of every certificate in a PEM bundle, `None` unless there is at least one
/// and each parses as X.509.
fn certificates_der(pem: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    for block in x509_parser::pem::Pem::iter_from_buffer(pem) {
        let block = block.ok()?;
        if block.label != "CERTIFICATE" {
            continue;
        }
        block.parse_x509().ok()?;
        out.push(block.contents);
    }
    (!out.is_empty()).then_some(out)
}

/// Whether the PEM holds an unencrypted private key in a form the TLS stack loads:
/// PKCS#8, PKCS#1 (RSA) or SEC1 (EC). An encrypted key would need a passphrase.
fn holds_private_key(pem: &[u8]) -> bool {
    x509_parser::pem::Pem::iter_from_buffer(pem)
        .filter_map(Result::ok)
        .any(|block| {
            matches!(
                block.label.as_str(),
                "PRIVATE KEY" | "RSA PRIVATE KEY" | "EC PRIVATE KEY"
            ) && !block.contents.is_empty()
        })
}

/// An entry name (user input) for an error: quoted and bounded.
fn entry_name(text: &str) -> String {
    quoted(text, MAX_QUOTED_NAME)
}

/// A mapping key as it appears in a field path: bare when it looks like a key,
/// quoted otherwise.
fn field_key(key: &str) -> String {
    // No '.': it would read as a step of the path.
    plain_or_quoted(key, MAX_QUOTED_NAME, &['-', '_'])
}

#[cfg(test)]
mod tests;
