//! Kubeconfigs with a secret planted in every place a credential can go (and a few it
//! cannot), around fuzzer-chosen structure: whether `validate` accepts or refuses, the
//! token, the key and their encodings never appear in its error or in `{:?}`.
#![no_main]

use arbitrary::Arbitrary;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hearth_discovery::kubeconfig;
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};

/// Every planted secret starts with this, so fuzzer-chosen names can be kept clear of it.
const MARKER: &str = "hearthPLANTED";

#[derive(Arbitrary, Debug)]
enum Place {
    Token,
    Password,
    ExecEnv,
    ExecArg,
    AuthProviderConfig,
    ClientKeyData,
    ClientKeyDataBadBase64,
    TokenAndKey,
    UnknownUserField(String),
    UnknownClusterField(String),
    ProxyUrlUserInfo,
    ServerUserInfo,
    ServerQuery,
    Impersonate,
}

#[derive(Arbitrary, Debug)]
enum Server {
    Https,
    Http,
    Missing,
    Arbitrary(String),
    Number(i64),
}

#[derive(Arbitrary, Debug)]
struct Input {
    seed: u64,
    /// Characters added to the token: control or non-ASCII ones make it a bad header value.
    token_tail: String,
    place: Place,
    server: Server,
    context: String,
    cluster: String,
    user: String,
    with_current_context: bool,
    extra_user: Vec<(String, String)>,
    extra_cluster: Vec<(String, String)>,
    ca_data: Option<String>,
    cert_data: Option<String>,
    double_base64: bool,
    yaml: bool,
}

fn clear(s: &str) -> bool {
    !s.contains(MARKER) && !s.contains("PLANTED")
}

fuzz_target!(|input: Input| {
    let names = [
        &input.context,
        &input.cluster,
        &input.user,
        &input.token_tail,
    ];
    let extras = input.extra_user.iter().chain(&input.extra_cluster);
    if !names.iter().all(|n| clear(n))
        || !extras.clone().all(|(k, v)| clear(k) && clear(v))
        || !input
            .ca_data
            .iter()
            .chain(&input.cert_data)
            .all(|s| clear(s))
    {
        return;
    }

    let token = format!("{MARKER}{:016x}{}", input.seed, input.token_tail);
    let key_pem = format!(
        "-----BEGIN PRIVATE KEY-----\n{MARKER}{:016x}KEY\n-----END PRIVATE KEY-----\n",
        input.seed
    );
    let key_b64 = BASE64.encode(&key_pem);

    let mut cluster = Map::new();
    match &input.server {
        Server::Https => {
            cluster.insert("server".into(), json!("https://127.0.0.1:6443"));
        }
        Server::Http => {
            cluster.insert("server".into(), json!("http://127.0.0.1:6443"));
        }
        Server::Missing => {}
        Server::Arbitrary(s) => {
            cluster.insert("server".into(), json!(s));
        }
        Server::Number(n) => {
            cluster.insert("server".into(), json!(n));
        }
    }
    if let Some(ca) = &input.ca_data {
        cluster.insert("certificate-authority-data".into(), json!(ca));
    }
    for (k, v) in &input.extra_cluster {
        cluster.insert(k.clone(), json!(v));
    }

    let mut user = Map::new();
    if let Some(cert) = &input.cert_data {
        user.insert("client-certificate-data".into(), json!(cert));
    }
    for (k, v) in &input.extra_user {
        user.insert(k.clone(), json!(v));
    }
    match &input.place {
        Place::Token => {
            user.insert("token".into(), json!(token));
        }
        Place::Password => {
            user.insert("username".into(), json!("admin"));
            user.insert("password".into(), json!(token));
        }
        Place::ExecEnv => {
            user.insert(
                "exec".into(),
                json!({"command": "sh", "env": [{"name": "TOKEN", "value": token}]}),
            );
        }
        Place::ExecArg => {
            user.insert("exec".into(), json!({"command": "echo", "args": [token]}));
        }
        Place::AuthProviderConfig => {
            user.insert(
                "auth-provider".into(),
                json!({"name": "oidc", "config": {"id-token": token, "refresh-token": token}}),
            );
        }
        Place::ClientKeyData => {
            user.insert("client-key-data".into(), json!(key_b64));
        }
        Place::ClientKeyDataBadBase64 => {
            user.insert(
                "client-key-data".into(),
                json!(format!("{key_b64}!{token}")),
            );
        }
        Place::TokenAndKey => {
            user.insert("token".into(), json!(token));
            user.insert("client-key-data".into(), json!(key_b64));
        }
        Place::UnknownUserField(name) => {
            if !clear(name) {
                return;
            }
            user.insert(name.clone(), json!(token));
        }
        Place::UnknownClusterField(name) => {
            if !clear(name) {
                return;
            }
            cluster.insert(name.clone(), json!(token));
        }
        Place::ProxyUrlUserInfo => {
            cluster.insert(
                "proxy-url".into(),
                json!(format!("https://user:{token}@proxy:3128")),
            );
            user.insert("token".into(), json!(token));
        }
        Place::ServerUserInfo => {
            cluster.insert(
                "server".into(),
                json!(format!("https://user:{token}@127.0.0.1:6443")),
            );
        }
        Place::ServerQuery => {
            cluster.insert(
                "server".into(),
                json!(format!("https://127.0.0.1:6443/?access_token={token}")),
            );
        }
        Place::Impersonate => {
            user.insert("token".into(), json!(token));
            user.insert("as".into(), json!(token));
        }
    }

    let mut doc = Map::new();
    doc.insert("apiVersion".into(), json!("v1"));
    doc.insert("kind".into(), json!("Config"));
    doc.insert(
        "clusters".into(),
        json!([{"name": input.cluster, "cluster": cluster}]),
    );
    doc.insert("users".into(), json!([{"name": input.user, "user": user}]));
    doc.insert(
        "contexts".into(),
        json!([{"name": input.context, "context": {"cluster": input.cluster, "user": input.user}}]),
    );
    if input.with_current_context {
        doc.insert("current-context".into(), json!(input.context));
    }
    let text = if input.yaml {
        // JSON is YAML flow style; one top-level key per line takes the YAML parser.
        doc.iter()
            .map(|(k, v)| format!("{k}: {v}\n"))
            .collect::<String>()
    } else {
        Value::Object(doc).to_string()
    };
    let data = if input.double_base64 {
        BASE64.encode(text.as_bytes()).into_bytes()
    } else {
        text.into_bytes()
    };

    let shown = match kubeconfig::validate(&data) {
        Ok(valid) => format!("{valid:?}"),
        Err(e) => format!("{e} {e:?} {} {:?}", e.reason(), e.field()),
    };
    for secret in [
        format!("{MARKER}{:016x}", input.seed),
        key_b64.clone(),
        key_b64[..key_b64.len().min(24)].to_owned(),
    ] {
        assert!(
            !shown.contains(&secret),
            "secret {secret:?} shown in {shown:?}"
        );
    }
});
