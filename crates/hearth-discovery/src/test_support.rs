//! Builders for test objects, in one place: certificates (generated, never committed),
//! kubeconfigs, JWTs, Nodes and cached clusters.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use crate::cluster_cache::{CachedCluster, ClusterObject};

/// A generated certificate and its private key, both PEM.
pub struct TestCert {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A self-signed certificate valid until midnight UTC of the given day.
pub fn cert_until(year: i32, month: u8, day: u8) -> TestCert {
    let key = rcgen::KeyPair::generate().expect("key generation");
    let mut params = rcgen::CertificateParams::new(vec!["hearth-test".to_owned()]).expect("params");
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(year, month, day);
    let cert = params.self_signed(&key).expect("self-signed certificate");
    TestCert {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

pub fn cert() -> TestCert {
    cert_until(2030, 1, 1)
}

pub fn b64(data: impl AsRef<[u8]>) -> String {
    STANDARD.encode(data)
}

/// A JWT-shaped token (unsigned: only `exp` matters to Hearth).
pub fn jwt(claims: Value) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","kid":"test"}"#);
    let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
    format!("{header}.{payload}.c2lnbmF0dXJlLW5vdC1jaGVja2Vk")
}

pub const TOKEN: &str = "hearth-test-token-5f3c9a1e7b2d4c6a8e0f";

/// A complete, valid kubeconfig (JSON form) with `cluster` and `user` bodies.
pub fn kubeconfig(cluster: Value, user: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "target",
        "clusters": [{ "name": "target-cluster", "cluster": cluster }],
        "contexts": [{ "name": "target", "context": { "cluster": "target-cluster", "user": "admin" } }],
        "users": [{ "name": "admin", "user": user }],
    })
}

pub fn https_cluster() -> Value {
    json!({ "server": "https://api.target.example:6443", "certificate-authority-data": b64(cert().cert_pem) })
}

pub fn token_user() -> Value {
    json!({ "token": TOKEN })
}

/// A Node with GPU labels and allocatable resources, Ready and schedulable unless told.
#[derive(Clone, Default)]
pub struct NodeBuilder {
    name: String,
    labels: BTreeMap<String, String>,
    allocatable: BTreeMap<String, Quantity>,
    unschedulable: Option<bool>,
    ready: Option<&'static str>,
    no_conditions: bool,
}

pub fn node(name: &str) -> NodeBuilder {
    NodeBuilder {
        name: name.to_owned(),
        ready: Some("True"),
        ..Default::default()
    }
    .allocatable("cpu", "64")
    .allocatable("memory", "512Gi")
}

impl NodeBuilder {
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_owned(), value.to_owned());
        self
    }

    pub fn allocatable(mut self, resource: &str, quantity: &str) -> Self {
        self.allocatable
            .insert(resource.to_owned(), Quantity(quantity.to_owned()));
        self
    }

    /// GPU Feature Discovery's labels and the device plugin's resource for `count` GPUs.
    pub fn nvidia(self, product: &str, count: u32) -> Self {
        self.label("nvidia.com/gpu.present", "true")
            .label("nvidia.com/gpu.product", product)
            .label("nvidia.com/gpu.count", &count.to_string())
            .label("nvidia.com/gpu.replicas", "1")
            .allocatable("nvidia.com/gpu", &count.to_string())
    }

    /// The ROCm labeller's label for a single-model node and the device plugin's resource.
    pub fn amd(self, product: &str, count: u32) -> Self {
        self.label("amd.com/gpu.product-name", product)
            .allocatable("amd.com/gpu", &count.to_string())
    }

    pub fn cordoned(mut self) -> Self {
        self.unschedulable = Some(true);
        self
    }

    pub fn ready(mut self, status: &'static str) -> Self {
        self.ready = Some(status);
        self
    }

    pub fn without_conditions(mut self) -> Self {
        self.no_conditions = true;
        self
    }

    pub fn build(self) -> Node {
        let conditions = if self.no_conditions {
            None
        } else {
            Some(vec![
                NodeCondition {
                    type_: "MemoryPressure".into(),
                    status: "False".into(),
                    ..Default::default()
                },
                NodeCondition {
                    type_: "Ready".into(),
                    status: self.ready.unwrap_or("True").into(),
                    ..Default::default()
                },
            ])
        };
        Node {
            metadata: ObjectMeta {
                name: Some(self.name),
                labels: Some(self.labels),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                unschedulable: self.unschedulable,
                ..Default::default()
            }),
            status: Some(NodeStatus {
                capacity: Some(self.allocatable.clone()),
                allocatable: Some(self.allocatable),
                conditions,
                ..Default::default()
            }),
        }
    }
}

/// A decoded cached cluster `c-<uid>` of uid `uid` at version `rv`.
pub fn cached_cluster(uid: &str, rv: &str) -> Arc<ClusterObject> {
    let mut cluster = CachedCluster::default();
    cluster.metadata.name = Some(format!("c-{uid}"));
    cluster.metadata.uid = Some(uid.to_owned());
    cluster.metadata.resource_version = Some(rv.to_owned());
    Arc::new(kube::core::DeserializeGuard(Ok(cluster)))
}
