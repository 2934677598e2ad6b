use super::*;
use crate::test_support::{TOKEN, b64, cert, https_cluster, jwt, kubeconfig, token_user};
use pretty_assertions::assert_eq;
use serde_json::json;

fn yaml(doc: &Value) -> Vec<u8> {
    serde_saphyr::to_string(doc)
        .expect("serializable")
        .into_bytes()
}

fn json_bytes(doc: &Value) -> Vec<u8> {
    serde_json::to_vec_pretty(doc).expect("serializable")
}

/// What a corpus case must produce.
enum Expect {
    Valid(fn(&ValidatedKubeconfig)),
    /// `reason()` and a fragment the offending field path must contain.
    Invalid(&'static str, Option<&'static str>),
}

struct Case {
    name: &'static str,
    input: Vec<u8>,
    expect: Expect,
}

fn case(name: &'static str, input: Vec<u8>, expect: Expect) -> Case {
    Case {
        name,
        input,
        expect,
    }
}

fn with_user(user: Value) -> Vec<u8> {
    yaml(&kubeconfig(https_cluster(), user))
}

fn with_cluster(cluster: Value) -> Vec<u8> {
    yaml(&kubeconfig(cluster, token_user()))
}

fn cluster_plus(extra: Value) -> Value {
    let mut c = https_cluster();
    c.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    c
}

fn token_plus(extra: Value) -> Value {
    let mut u = token_user();
    u.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    u
}

fn is_token(k: &ValidatedKubeconfig) {
    match k.auth() {
        Auth::Token(t) => assert_eq!(t.expose_secret(), TOKEN),
        other => panic!("expected a token, got {other:?}"),
    }
    assert_eq!(k.server().to_string(), "https://api.target.example:6443/");
}

fn is_client_cert(k: &ValidatedKubeconfig) {
    assert!(matches!(k.auth(), Auth::ClientCert { .. }), "{k:?}");
}

fn client_cert_user() -> Value {
    let c = cert();
    json!({ "client-certificate-data": b64(&c.cert_pem), "client-key-data": b64(&c.key_pem) })
}

/// The classic billion laughs: nine aliases per level, nine levels, 9^9 copies of
/// the innermost string if nothing stopped the expansion.
fn billion_laughs() -> Vec<u8> {
    let mut s = String::from(
        "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    let mut prev = 'a';
    for n in 'b'..='i' {
        let refs = vec![format!("*{prev}"); 9].join(",");
        s.push_str(&format!("{n}: &{n} [{refs}]\n"));
        prev = n;
    }
    s.push_str("users: *i\n");
    s.into_bytes()
}

fn corpus() -> Vec<Case> {
    use Expect::{Invalid, Valid};
    let c = cert();
    let good_yaml = with_user(token_user());
    let mut two_contexts = kubeconfig(https_cluster(), token_user());
    two_contexts
        .as_object_mut()
        .unwrap()
        .remove("current-context");
    two_contexts["contexts"].as_array_mut().unwrap().push(
        json!({ "name": "laptop", "context": { "cluster": "target-cluster", "user": "plugin" } }),
    );
    two_contexts["users"].as_array_mut().unwrap().push(
        json!({ "name": "plugin", "user": { "exec": { "command": "touch", "args": ["/tmp/x"] } } }),
    );
    let mut second_selected = two_contexts.clone();
    second_selected["current-context"] = json!("laptop");
    let mut empty_current = kubeconfig(https_cluster(), token_user());
    empty_current["current-context"] = json!("");
    let mut dangling_context = kubeconfig(https_cluster(), token_user());
    dangling_context["current-context"] = json!("nope");
    let mut dangling_cluster = kubeconfig(https_cluster(), token_user());
    dangling_cluster["contexts"][0]["context"]["cluster"] = json!("gone");
    let mut dangling_user = kubeconfig(https_cluster(), token_user());
    dangling_user["contexts"][0]["context"]["user"] = json!("gone");
    let mut no_user = kubeconfig(https_cluster(), token_user());
    no_user["contexts"][0]["context"]
        .as_object_mut()
        .unwrap()
        .remove("user");
    let mut no_contexts = kubeconfig(https_cluster(), token_user());
    no_contexts.as_object_mut().unwrap().remove("contexts");
    no_contexts
        .as_object_mut()
        .unwrap()
        .remove("current-context");
    let mut users_not_list = kubeconfig(https_cluster(), token_user());
    users_not_list["users"] = json!({ "admin": { "token": TOKEN } });
    let mut with_extras = kubeconfig(
        cluster_plus(
            json!({ "extensions": [{ "name": "x", "extension": {} }], "disable-compression": true }),
        ),
        token_plus(json!({ "extensions": [] })),
    );
    with_extras["contexts"][0]["context"]["namespace"] = json!("default");
    with_extras["preferences"] = json!({});
    let ca_bundle = format!("{}{}", cert().cert_pem, cert().cert_pem);
    let wrapped_b64 = {
        let encoded = b64(&good_yaml);
        let lines: Vec<String> = encoded
            .as_bytes()
            .chunks(76)
            .map(|c| String::from_utf8(c.to_vec()).unwrap())
            .collect();
        lines.join("\n").into_bytes()
    };
    let mut crlf_bom = b"\xef\xbb\xbf".to_vec();
    crlf_bom.extend(
        String::from_utf8(good_yaml.clone())
            .unwrap()
            .replace('\n', "\r\n")
            .into_bytes(),
    );

    vec![
        // ---- accepted ----
        case("token, YAML", good_yaml.clone(), Valid(is_token)),
        case(
            "token, JSON",
            json_bytes(&kubeconfig(https_cluster(), token_user())),
            Valid(is_token),
        ),
        case(
            "client certificate",
            with_user(client_cert_user()),
            Valid(is_client_cert),
        ),
        case(
            "double base64",
            b64(&good_yaml).into_bytes(),
            Valid(is_token),
        ),
        case("double base64, line-wrapped", wrapped_b64, Valid(is_token)),
        case(
            "double base64 of JSON",
            b64(json_bytes(&kubeconfig(https_cluster(), token_user()))).into_bytes(),
            Valid(is_token),
        ),
        case("BOM and CRLF line endings", crlf_bom, Valid(is_token)),
        case(
            "no current-context: first context, other users never looked at",
            yaml(&two_contexts),
            Valid(|k| {
                is_token(k);
                assert_eq!(k.context(), "target");
            }),
        ),
        case(
            "empty current-context: first context",
            yaml(&empty_current),
            Valid(is_token),
        ),
        case(
            "JWT token",
            with_user(json!({ "token": jwt(json!({ "exp": 1_900_000_000 })) })),
            Valid(|k| assert!(matches!(k.auth(), Auth::Token(_)))),
        ),
        case(
            "no CA data: platform roots",
            with_cluster(json!({ "server": "https://api.public.example" })),
            Valid(|k| assert!(k.ca_pem().is_none())),
        ),
        case(
            "CA bundle of two certificates",
            with_cluster(
                json!({ "server": "https://10.0.0.1:6443", "certificate-authority-data": b64(&ca_bundle) }),
            ),
            Valid(|k| assert_eq!(k.cluster.ca_der.len(), 2)),
        ),
        case(
            "tls-server-name and insecure-skip-tls-verify: false",
            with_cluster(cluster_plus(
                json!({ "tls-server-name": "kubernetes.default", "insecure-skip-tls-verify": false }),
            )),
            Valid(|k| assert_eq!(k.tls_server_name(), Some("kubernetes.default"))),
        ),
        case(
            "server behind a path (Rancher style)",
            with_cluster(json!({ "server": "https://rancher.example/k8s/clusters/c-m-abc" })),
            Valid(|k| assert_eq!(k.server().path(), "/k8s/clusters/c-m-abc")),
        ),
        case(
            "harmless extras: extensions, namespace, preferences",
            yaml(&with_extras),
            Valid(is_token),
        ),
        case(
            "null fields are unset",
            with_user(token_plus(json!({ "exec": null, "tokenFile": null }))),
            Valid(is_token),
        ),
        // ---- refused: things that would run commands or read files ----
        case(
            "exec plugin",
            with_user(token_plus(
                json!({ "exec": { "apiVersion": "client.authentication.k8s.io/v1", "command": "aws", "args": ["eks", "get-token"] } }),
            )),
            Invalid("RefusedField", Some("users[\"admin\"].user.exec")),
        ),
        case(
            "auth-provider",
            with_user(
                json!({ "auth-provider": { "name": "gcp", "config": { "cmd-path": "/usr/bin/gcloud" } } }),
            ),
            Invalid("RefusedField", Some(".user.auth-provider")),
        ),
        case(
            "tokenFile",
            with_user(
                json!({ "tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token" }),
            ),
            Invalid("RefusedField", Some(".user.tokenFile")),
        ),
        case(
            "client-certificate path",
            with_user(
                json!({ "client-certificate": "/etc/hearth/cert.pem", "client-key-data": b64(&c.key_pem) }),
            ),
            Invalid("RefusedField", Some(".user.client-certificate")),
        ),
        case(
            "client-key path",
            with_user(
                json!({ "client-certificate-data": b64(&c.cert_pem), "client-key": "/etc/hearth/key.pem" }),
            ),
            Invalid("RefusedField", Some(".user.client-key")),
        ),
        case(
            "certificate-authority path",
            with_cluster(
                json!({ "server": "https://api.target.example:6443", "certificate-authority": "/etc/passwd" }),
            ),
            Invalid(
                "RefusedField",
                Some("clusters[\"target-cluster\"].cluster.certificate-authority"),
            ),
        ),
        case(
            "username and password",
            with_user(json!({ "username": "admin", "password": "hunter2" })),
            Invalid("RefusedField", Some(".user.username")),
        ),
        case(
            "password alone",
            with_user(token_plus(json!({ "password": "hunter2" }))),
            Invalid("RefusedField", Some(".user.password")),
        ),
        case(
            "proxy-url",
            with_cluster(cluster_plus(
                json!({ "proxy-url": "http://evil.example:3128" }),
            )),
            Invalid("RefusedField", Some(".cluster.proxy-url")),
        ),
        case(
            "insecure-skip-tls-verify",
            with_cluster(cluster_plus(json!({ "insecure-skip-tls-verify": true }))),
            Invalid("RefusedField", Some(".cluster.insecure-skip-tls-verify")),
        ),
        case(
            "insecure-skip-tls-verify as a string",
            with_cluster(
                json!({ "server": "https://x.example", "insecure-skip-tls-verify": "true" }),
            ),
            Invalid("RefusedField", Some(".cluster.insecure-skip-tls-verify")),
        ),
        case(
            "impersonation (as)",
            with_user(token_plus(json!({ "as": "system:admin" }))),
            Invalid("RefusedField", Some(".user.as")),
        ),
        case(
            "impersonation (as-groups)",
            with_user(token_plus(json!({ "as-groups": ["system:masters"] }))),
            Invalid("RefusedField", Some(".user.as-groups")),
        ),
        case(
            "unknown user field",
            with_user(token_plus(json!({ "oidc-magic": "x" }))),
            Invalid("UnsupportedField", Some(".user.oidc-magic")),
        ),
        case(
            "unknown cluster field",
            with_cluster(cluster_plus(json!({ "socks": "x" }))),
            Invalid("UnsupportedField", Some(".cluster.socks")),
        ),
        // ---- refused: server ----
        case(
            "plain http server",
            with_cluster(json!({ "server": "http://api.target.example:6443" })),
            Invalid("InsecureServer", Some(".cluster.server")),
        ),
        case(
            "server without scheme",
            with_cluster(json!({ "server": "api.target.example:6443" })),
            Invalid("BadServer", Some(".cluster.server")),
        ),
        case(
            "server with user info",
            with_cluster(json!({ "server": "https://admin:pw@api.target.example" })),
            Invalid("BadServer", Some(".cluster.server")),
        ),
        case(
            "server with a query",
            with_cluster(json!({ "server": "https://api.target.example/?token=x" })),
            Invalid("BadServer", Some(".cluster.server")),
        ),
        case(
            "missing server",
            with_cluster(json!({ "certificate-authority-data": b64(&c.cert_pem) })),
            Invalid("MissingServer", Some(".cluster.server")),
        ),
        case(
            "server is a number",
            with_cluster(json!({ "server": 6443 })),
            Invalid("WrongType", Some(".cluster.server")),
        ),
        // ---- refused: credentials ----
        case(
            "no credentials",
            with_user(json!({})),
            Invalid("MissingCredentials", Some("users[\"admin\"].user")),
        ),
        case(
            "empty token",
            with_user(json!({ "token": "  " })),
            Invalid("MissingCredentials", None),
        ),
        case(
            "both token and client certificate",
            with_user(
                json!({ "token": TOKEN, "client-certificate-data": b64(&c.cert_pem), "client-key-data": b64(&c.key_pem) }),
            ),
            Invalid("ConflictingCredentials", None),
        ),
        case(
            "certificate without key",
            with_user(json!({ "client-certificate-data": b64(&c.cert_pem) })),
            Invalid("IncompleteClientCert", Some("client-key-data")),
        ),
        case(
            "key without certificate",
            with_user(json!({ "client-key-data": b64(&c.key_pem) })),
            Invalid("IncompleteClientCert", Some("client-certificate-data")),
        ),
        case(
            "CA data that is PEM, not base64",
            with_cluster(
                json!({ "server": "https://x.example", "certificate-authority-data": c.cert_pem.clone() }),
            ),
            Invalid("BadBase64", Some("certificate-authority-data")),
        ),
        case(
            "CA data that is not a certificate",
            with_cluster(
                json!({ "server": "https://x.example", "certificate-authority-data": b64("hello") }),
            ),
            Invalid("BadPem", Some("certificate-authority-data")),
        ),
        case(
            "key data that holds a certificate",
            with_user(
                json!({ "client-certificate-data": b64(&c.cert_pem), "client-key-data": b64(&c.cert_pem) }),
            ),
            Invalid("BadPem", Some("client-key-data")),
        ),
        case(
            "encrypted key",
            with_user(json!({
                "client-certificate-data": b64(&c.cert_pem),
                "client-key-data": b64(c.key_pem.replace("PRIVATE KEY", "ENCRYPTED PRIVATE KEY")),
            })),
            Invalid("BadPem", Some("client-key-data")),
        ),
        case(
            "token with a space inside",
            with_user(json!({ "token": "abc def" })),
            Invalid("BadToken", Some(".user.token")),
        ),
        // ---- refused: structure ----
        case(
            "dangling current-context",
            yaml(&dangling_context),
            Invalid("UnknownContext", None),
        ),
        case(
            "dangling cluster reference",
            yaml(&dangling_cluster),
            Invalid("UnknownCluster", None),
        ),
        case(
            "dangling user reference",
            yaml(&dangling_user),
            Invalid("UnknownUser", None),
        ),
        case(
            "context without user",
            yaml(&no_user),
            Invalid("IncompleteContext", None),
        ),
        case(
            "no contexts",
            yaml(&no_contexts),
            Invalid("NoContexts", None),
        ),
        case(
            "users is a mapping",
            yaml(&users_not_list),
            Invalid("WrongType", Some("users")),
        ),
        case(
            "current-context is a list",
            b"current-context: [a]\ncontexts: []\n".to_vec(),
            Invalid("WrongType", Some("current-context")),
        ),
        case(
            "a YAML scalar",
            b"just some words".to_vec(),
            Invalid("NotAKubeconfig", None),
        ),
        case(
            "a YAML list",
            b"- a\n- b\n".to_vec(),
            Invalid("NotAKubeconfig", None),
        ),
        case(
            "YAML syntax error",
            b"clusters: [\n  - name: x\n  cluster: {server: ".to_vec(),
            Invalid("Syntax", None),
        ),
        case(
            "JSON syntax error",
            br#"{"clusters": [}"#.to_vec(),
            Invalid("Syntax", None),
        ),
        case(
            "duplicate keys",
            format!("users:\n- name: admin\n  user:\n    token: {TOKEN}\n    token: other\n")
                .into_bytes(),
            Invalid("Syntax", None),
        ),
        // ---- refused: hostile input ----
        case("empty", Vec::new(), Invalid("Empty", None)),
        case(
            "only whitespace",
            b" \n\t\r\n ".to_vec(),
            Invalid("Empty", None),
        ),
        case(
            "binary garbage",
            (0..=255u8).cycle().take(4096).collect(),
            Invalid("NotText", None),
        ),
        case(
            "valid UTF-8 with control bytes",
            b"\x01\x02clusters: \x03".to_vec(),
            Invalid("NotText", None),
        ),
        case(
            "base64 of binary",
            b64([0u8, 159, 146, 150, 255, 0, 1]).into_bytes(),
            Invalid("NotText", None),
        ),
        case(
            "huge input",
            vec![b'#'; MAX_KUBECONFIG_BYTES + 1],
            Invalid("TooLarge", None),
        ),
        case(
            "billion laughs",
            billion_laughs(),
            Invalid("TooComplex", None),
        ),
        case(
            "deep YAML nesting",
            format!("{}{}", "[".repeat(200), "]".repeat(200)).into_bytes(),
            Invalid("TooComplex", None),
        ),
        case(
            "deep JSON nesting",
            format!("{{\"a\":{}{}}}", "[".repeat(500), "]".repeat(500)).into_bytes(),
            Invalid("TooComplex", None),
        ),
    ]
}

#[test]
fn corpus_of_good_and_hostile_kubeconfigs() {
    let cases = corpus();
    assert!(cases.len() >= 25);
    let c = cert();
    let key_body: String = c
        .key_pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    let mut failures = Vec::new();
    for Case {
        name,
        input,
        expect,
    } in cases
    {
        let result = validate(&input);
        match (&expect, &result) {
            (Expect::Valid(check), Ok(k)) => check(k),
            (Expect::Invalid(reason, field), Err(e)) => {
                if e.reason() != *reason {
                    failures.push(format!(
                        "{name}: reason {} ({e}), want {reason}",
                        e.reason()
                    ));
                }
                if let Some(field) = field
                    && !e.field().unwrap_or_default().contains(field)
                {
                    failures.push(format!(
                        "{name}: field {:?}, want it to contain {field:?}",
                        e.field()
                    ));
                }
                let msg = e.to_string();
                assert!(
                    !msg.contains(TOKEN) && !msg.contains("hunter2"),
                    "{name}: secret in {msg}"
                );
                assert!(
                    !msg.contains(&key_body[..40]),
                    "{name}: key material in {msg}"
                );
            }
            (Expect::Valid(_), Err(e)) => {
                failures.push(format!("{name}: refused: {e} ({})", e.reason()))
            }
            (Expect::Invalid(reason, _), Ok(k)) => {
                failures.push(format!("{name}: accepted ({k:?}), want {reason}"))
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn current_context_selects_a_later_context() {
    let mut doc = kubeconfig(https_cluster(), token_user());
    doc["contexts"].as_array_mut().unwrap().insert(
        0,
        json!({ "name": "other", "context": { "cluster": "target-cluster", "user": "plugin" } }),
    );
    doc["users"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "name": "plugin", "user": { "exec": { "command": "sh" } } }));
    // current-context is "target", the second context: the exec user is never used.
    let k = validate(&yaml(&doc)).unwrap();
    assert_eq!(k.context(), "target");
    // Pointing at the other context brings the refusal.
    doc["current-context"] = json!("other");
    let e = validate(&yaml(&doc)).unwrap_err();
    assert_eq!(e.field(), Some("users[\"plugin\"].user.exec"));
}

#[test]
fn errors_name_the_field_and_say_what_to_do() {
    let e = validate(&with_user(json!({ "exec": { "command": "sh" } }))).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`users[\"admin\"].user.exec` is refused: exec credential plugins would run a command inside Hearth; \
         put a token or client-certificate-data/client-key-data in the kubeconfig"
    );
    let e = validate(&with_cluster(json!({ "server": "http://a.example" }))).unwrap_err();
    assert!(
        e.to_string().contains("use the server's https:// URL"),
        "{e}"
    );
}

#[test]
fn long_or_odd_names_are_quoted_and_bounded_in_errors() {
    let long = "x".repeat(500);
    let mut doc = kubeconfig(https_cluster(), token_user());
    doc["current-context"] = json!(format!("{long}\n\u{1b}[31m"));
    let msg = validate(&yaml(&doc)).unwrap_err().to_string();
    assert!(msg.len() < 250, "{msg}");
    assert!(!msg.contains('\u{1b}') && !msg.contains('\n'), "{msg}");
}

#[test]
fn syntax_errors_say_where_but_never_quote_the_input() {
    let input = format!("users:\n- name: admin\n  user:\n    token: {TOKEN}\n   bad: [\n");
    let e = validate(input.as_bytes()).unwrap_err();
    assert_eq!(e.reason(), "Syntax");
    let msg = e.to_string();
    assert!(msg.contains("line"), "{msg}");
    assert!(!msg.contains(TOKEN), "{msg}");
}

#[test]
fn debug_output_redacts_token_and_key() {
    let k = validate(&with_user(token_user())).unwrap();
    let shown = format!("{k:?} {k:#?}");
    assert!(!shown.contains(TOKEN), "{shown}");
    assert!(shown.contains("REDACTED"), "{shown}");

    let c = cert();
    let user =
        json!({ "client-certificate-data": b64(&c.cert_pem), "client-key-data": b64(&c.key_pem) });
    let k = validate(&with_user(user)).unwrap();
    let shown = format!("{k:?} {k:#?}");
    let key_body: String = c
        .key_pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    assert!(!shown.contains(&key_body[..32]), "{shown}");
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");
}

#[test]
fn client_config_carries_the_token_and_nothing_else() {
    let k = validate(&with_user(token_user())).unwrap();
    let config = client_config(&k, Duration::from_secs(10));
    assert_eq!(
        config.cluster_url.to_string(),
        "https://api.target.example:6443/"
    );
    let auth = &config.auth_info;
    assert_eq!(auth.token.as_ref().map(|t| t.expose_secret()), Some(TOKEN));
    assert!(auth.exec.is_none() && auth.auth_provider.is_none());
    assert!(
        auth.token_file.is_none() && auth.client_certificate.is_none() && auth.client_key.is_none()
    );
    assert!(auth.client_certificate_data.is_none() && auth.client_key_data.is_none());
    assert!(auth.username.is_none() && auth.password.is_none());
    assert!(auth.impersonate.is_none() && auth.impersonate_groups.is_none());
    assert!(config.proxy_url.is_none());
    assert!(!config.accept_invalid_certs);
    assert!(config.root_cert_file.is_none());
    assert_eq!(config.root_cert.as_ref().map(Vec::len), Some(1));
    assert!(config.headers.is_empty());
    assert_eq!(config.connect_timeout, Some(Duration::from_secs(10)));
    assert_eq!(config.read_timeout, Some(Duration::from_secs(10)));
    assert_eq!(config.write_timeout, Some(Duration::from_secs(10)));
}

#[test]
fn client_config_carries_the_client_certificate() {
    let c = cert();
    let user =
        json!({ "client-certificate-data": b64(&c.cert_pem), "client-key-data": b64(&c.key_pem) });
    let cluster = json!({ "server": "https://10.1.2.3:6443", "tls-server-name": "api.internal" });
    let k = validate(&yaml(&kubeconfig(cluster, user))).unwrap();
    let config = client_config(&k, Duration::from_secs(5));
    let auth = &config.auth_info;
    assert_eq!(
        auth.client_certificate_data.as_deref(),
        Some(b64(&c.cert_pem).as_str())
    );
    assert_eq!(
        auth.client_key_data
            .as_ref()
            .map(|k| k.expose_secret().to_owned()),
        Some(b64(&c.key_pem))
    );
    assert!(auth.token.is_none() && auth.exec.is_none() && auth.token_file.is_none());
    assert!(auth.client_certificate.is_none() && auth.client_key.is_none());
    assert!(config.proxy_url.is_none() && !config.accept_invalid_certs);
    assert!(config.root_cert.is_none(), "no CA data: platform roots");
    assert_eq!(config.tls_server_name.as_deref(), Some("api.internal"));
}

/// The proof that a Secret cannot make Hearth run a command or read a file: a
/// kubeconfig whose exec plugin would create a marker and whose tokenFile points at a
/// marker is refused, building a client is impossible without validation, and the
/// validated type has no field that could hold a path or command.
#[test]
fn no_command_is_run_and_no_file_is_read() {
    let dir = std::env::temp_dir().join(format!("hearth-marker-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ran = dir.join("exec-ran");
    let secret_file = dir.join("token-file");
    std::fs::write(&secret_file, "token-from-a-file").unwrap();

    let exec_user = json!({
        "token": TOKEN,
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "sh",
            "args": ["-c", format!("touch {}", ran.display())],
        },
    });
    let file_user = json!({ "tokenFile": secret_file.display().to_string() });
    for (user, field) in [(exec_user, "exec"), (file_user, "tokenFile")] {
        let input = with_user(user);
        let err = validate(&input).unwrap_err();
        assert_eq!(
            err.field(),
            Some(format!("users[\"admin\"].user.{field}").as_str())
        );
        assert_eq!(err.reason(), "RefusedField");
        assert!(!err.to_string().contains("token-from-a-file"));
    }
    assert!(!ran.exists(), "the exec plugin ran");

    // Every field of the validated type, spelled out: adding one (a path, a command)
    // breaks this destructuring and makes its author look here.
    let k = validate(&with_user(token_user())).unwrap();
    let ValidatedKubeconfig {
        context: _,
        cluster:
            ClusterFields {
                server: _,
                ca_pem: _,
                ca_der: _,
                tls_server_name: _,
            },
        auth,
    } = &k;
    match auth {
        Auth::Token(_)
        | Auth::ClientCert {
            cert_pem: _,
            key_pem: _,
        } => {}
    }
    let config = client_config(&k, Duration::from_secs(1));
    assert!(config.auth_info.exec.is_none() && config.auth_info.token_file.is_none());
    assert!(!ran.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn error_reasons_are_stable_camel_case() {
    let errors = [
        KubeconfigError::Empty,
        KubeconfigError::TooComplex,
        KubeconfigError::Refused {
            field: "x".into(),
            why: "y",
        },
        KubeconfigError::BadToken { field: "x".into() },
        KubeconfigError::ClientSetup,
    ];
    for e in errors {
        let r = e.reason();
        assert!(
            r.chars().next().unwrap().is_ascii_uppercase()
                && r.chars().all(|c| c.is_ascii_alphanumeric()),
            "{r}"
        );
    }
}
