//! The plugin's I/O: the user's kubeconfig, reads and guarded patches of FournosClusters,
//! who the user is, Events and Workloads for `why`, and the watch behind `wait`.

use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};
use futures::TryStreamExt as _;
use hearth_api::FournosCluster;
use hearth_api::kueue::workload_conditions::{ADMITTED, QUOTA_RESERVED};
use hearth_api::kueue::{ClusterQueue, KUEUE_GROUP, LocalQueue, Workload};
use hearth_api::names::{self, CLUSTER_LOCK_LABEL, KUBECONFIG_SECRET_SELECTOR};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Event, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kube::{Client, Config};

use crate::CONFLICT_RETRIES;
use crate::cli::Global;
use crate::doctor;
use crate::error::{Failure, Op, describe};
use crate::explain::{self, EventLine, Evidence, Progress, Target};
use crate::scrub::{self, Kind, Report};

const FOURNOS_CLUSTERS: &str = "fournosclusters.fournos.dev";
const WORKLOADS: &str = "workloads.kueue.x-k8s.io";

pub struct Session {
    client: Client,
    namespace: String,
    execution_namespace: String,
    /// The current context's user entry name, when a kubeconfig was read.
    context_user: Option<String>,
}

impl Session {
    /// A client from `--kubeconfig`/`--context`, else `$KUBECONFIG` or `~/.kube/config`,
    /// else the in-cluster ServiceAccount. The user's own kubeconfig is trusted as kubectl
    /// trusts it (exec plugins included): the plugin acts as the user.
    pub async fn connect(global: &Global) -> Result<Session> {
        let kubeconfig = match &global.kubeconfig {
            Some(path) => Some(
                Kubeconfig::read_from(path)
                    .with_context(|| format!("reading kubeconfig {}", path.display()))?,
            ),
            None => match Kubeconfig::read() {
                Ok(kubeconfig) => Some(kubeconfig),
                // A broken $KUBECONFIG is a mistake to report, not a reason to try in-cluster.
                Err(e) if std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty()) => {
                    return Err(e).context("reading the kubeconfig named by $KUBECONFIG");
                }
                Err(_) => None,
            },
        };
        let (config, context_user) = match kubeconfig {
            Some(kubeconfig) => {
                let user = context_user(&kubeconfig, global.context.as_deref());
                let options = KubeConfigOptions {
                    context: global.context.clone(),
                    ..Default::default()
                };
                let config = Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .context("loading the kubeconfig")?;
                (config, user)
            }
            None if global.context.is_some() => {
                anyhow::bail!(
                    "--context needs a kubeconfig: none found ($KUBECONFIG, ~/.kube/config)"
                )
            }
            None => (
                Config::incluster().context(
                    "no kubeconfig found ($KUBECONFIG, ~/.kube/config) and not running in a pod",
                )?,
                None,
            ),
        };
        Ok(Session {
            client: Client::try_from(config).context("building the Kubernetes client")?,
            namespace: global.namespace.clone(),
            execution_namespace: global.execution_namespace.clone(),
            context_user,
        })
    }

    fn clusters(&self) -> Api<FournosCluster> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn op<'a>(&'a self, verb: &'a str, name: Option<&'a str>) -> Op<'a> {
        op(verb, FOURNOS_CLUSTERS, &self.namespace, name)
    }

    pub async fn get(&self, name: &str) -> Result<FournosCluster> {
        self.clusters()
            .get(name)
            .await
            .map_err(|e| api_error(&self.op("get", Some(name)), e))
    }

    /// The FournosClusters, those matching the label `selector` if given (e.g.
    /// `fournos.dev/pool=b`), by name.
    pub async fn list(&self, selector: Option<&str>) -> Result<Vec<FournosCluster>> {
        let params = selector.map_or_else(ListParams::default, |s| ListParams::default().labels(s));
        let mut items = self
            .clusters()
            .list(&params)
            .await
            .map_err(|e| api_error(&self.op("list", None), e))?
            .items;
        items.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        Ok(items)
    }

    /// Sends a merge patch planned by [`crate::lock`]. `Ok(None)`: the object changed
    /// since it was read (409), so the caller reads it again and re-plans.
    pub async fn patch(
        &self,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<Option<FournosCluster>> {
        match self
            .clusters()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(fc) => Ok(Some(fc)),
            Err(kube::Error::Api(status)) if status.is_conflict() => Ok(None),
            Err(e) => Err(api_error(&self.op("patch", Some(name)), e)),
        }
    }

    /// Removes (or, with `dry_run`, only finds) kopf's annotations on the labeled
    /// kubeconfig Secrets of `namespace`. Metadata only: it never reads a Secret's data.
    pub async fn scrub_secrets(&self, namespace: &str, dry_run: bool) -> Result<Report> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let scope = Scrub {
            kind: Kind::KubeconfigSecrets,
            resource: "secrets",
            namespace,
            selector: Some(KUBECONFIG_SECRET_SELECTOR),
        };
        scrub_all(&secrets, &scope, dry_run).await
    }

    /// Removes (or, with `dry_run`, only finds) kopf's annotations and finalizers on the
    /// FournosClusters of the namespace.
    pub async fn scrub_clusters(&self, dry_run: bool) -> Result<Report> {
        let scope = Scrub {
            kind: Kind::FournosClusters,
            resource: FOURNOS_CLUSTERS,
            namespace: &self.namespace,
            selector: None,
        };
        scrub_all(&self.clusters(), &scope, dry_run).await
    }

    /// Who the apiserver says the user is (SelfSubjectReview): the identity RBAC and the
    /// audit log see. Falls back to the kubeconfig's user entry name when the review is
    /// unavailable.
    pub async fn whoami(&self) -> Result<String> {
        let reviews: Api<SelfSubjectReview> = Api::all(self.client.clone());
        let review = reviews
            .create(&PostParams::default(), &SelfSubjectReview::default())
            .await;
        let reviewed = review
            .as_ref()
            .ok()
            .and_then(|r| r.status.as_ref()?.user_info.as_ref()?.username.clone())
            .filter(|u| !u.is_empty());
        match (reviewed, &self.context_user, review) {
            (Some(user), _, _) => Ok(user),
            (None, Some(user), Err(e)) => {
                eprintln!(
                    "{}",
                    crate::print::lines(&format!(
                        "warning: could not ask the apiserver who you are ({e}); locking as \
                         the kubeconfig user {user:?} (pass --owner to choose)"
                    ))
                );
                Ok(user.clone())
            }
            (None, _, _) => Err(anyhow!(
                "could not tell who you are (SelfSubjectReview gave no user name): pass --owner"
            )),
        }
    }

    /// Everything `why` reads besides the cluster. What cannot be read is noted, not fatal.
    pub async fn evidence(&self, fc: &FournosCluster) -> Evidence {
        let name = fc.metadata.name.clone().unwrap_or_default();
        let mut evidence = Evidence::default();
        match self.warnings(&name).await {
            Ok(warnings) => evidence.warnings = warnings,
            Err(e) => {
                evidence
                    .unreadable
                    .push(format!("Events in {}: {}", self.namespace, short(&e)))
            }
        }
        let wanted = crate::view::owner(fc).is_some() && !crate::view::is_held(fc);
        if wanted {
            let job = fc.status.as_ref().and_then(|s| s.lock_job_name.as_deref());
            match self.workloads().await {
                Ok(workloads) => workload_evidence(&mut evidence, &workloads, &name, job),
                Err(e) => evidence.unreadable.push(format!(
                    "Workloads in {}: {}",
                    self.execution_namespace,
                    short(&e)
                )),
            }
        }
        evidence
    }

    async fn warnings(&self, name: &str) -> Result<Vec<EventLine>> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        let selector =
            format!("involvedObject.kind=FournosCluster,involvedObject.name={name},type=Warning");
        let op = op("list", "events", &self.namespace, None);
        let mut lines: Vec<EventLine> = events
            .list(&ListParams::default().fields(&selector))
            .await
            .map_err(|e| api_error(&op, e))?
            .items
            .into_iter()
            .map(|e| EventLine {
                at: e
                    .event_time
                    .map(|t| t.0)
                    .or(e.last_timestamp.map(|t| t.0))
                    .or(e.metadata.creation_timestamp.map(|t| t.0)),
                reason: e.reason.unwrap_or_default(),
                message: e.message.unwrap_or_default(),
            })
            .collect();
        lines.sort_by_key(|l| std::cmp::Reverse(l.at));
        Ok(lines)
    }

    async fn workloads(&self) -> Result<Vec<Workload>> {
        let api: Api<Workload> = Api::namespaced(self.client.clone(), &self.execution_namespace);
        let op = op("list", WORKLOADS, &self.execution_namespace, None);
        Ok(api
            .list(&ListParams::default())
            .await
            .map_err(|e| api_error(&op, e))?
            .items)
    }

    /// Watches the cluster until `target` is reached, it cannot be, or `timeout` passes.
    pub async fn wait(&self, name: &str, target: Target, timeout: Duration) -> Result<Progress> {
        let mut last = explain::progress(Some(&self.get(name).await?), target);
        if !matches!(last, Progress::Pending(_)) {
            return Ok(last);
        }
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let stream = watcher(self.clusters(), config);
        let watching = async {
            futures::pin_mut!(stream);
            while let Some(event) = stream
                .try_next()
                .await
                .map_err(|e| self.watch_error(name, e))?
            {
                let fc = match event {
                    watcher::Event::Apply(fc) | watcher::Event::InitApply(fc) => Some(fc),
                    watcher::Event::Delete(_) => None,
                    watcher::Event::Init | watcher::Event::InitDone => continue,
                };
                last = explain::progress(fc.as_ref(), target);
                if !matches!(last, Progress::Pending(_)) {
                    return Ok(last.clone());
                }
            }
            Ok::<_, anyhow::Error>(last.clone())
        };
        match tokio::time::timeout(timeout, watching).await {
            Ok(result) => result,
            Err(_) => Ok(last),
        }
    }

    /// A failed watch as the user can act on it: the watcher lists, then watches.
    fn watch_error(&self, name: &str, error: watcher::Error) -> anyhow::Error {
        match error {
            watcher::Error::InitialListFailed(e) => api_error(&self.op("list", None), e),
            watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => {
                api_error(&self.op("watch", None), e)
            }
            other => anyhow!("watching FournosCluster {name}: {other}"),
        }
    }

    /// What `doctor` checks, as this user sees it. Each read that fails is an unknown
    /// (said, with the reason), never a pass.
    pub async fn observe(&self, settings: &doctor::Settings) -> doctor::Observed {
        let client = &self.client;
        let kubernetes_version = client.apiserver_version().await.ok().map(|v| v.git_version);
        let kueue_versions: Vec<String> = client
            .list_api_groups()
            .await
            .map(|list| {
                list.groups
                    .into_iter()
                    .filter(|g| g.name == KUEUE_GROUP)
                    .flat_map(|g| g.versions.into_iter().map(|v| v.version))
                    .collect()
            })
            .unwrap_or_default();
        let fournos_resources: Vec<String> = client
            .list_api_group_resources(&format!("{}/{}", names::GROUP, names::VERSION))
            .await
            .map(|list| list.resources.into_iter().map(|r| r.name).collect())
            .unwrap_or_default();
        let mut namespaces = Vec::new();
        for name in doctor::namespaces(settings) {
            let seen = seen(read(Api::<Namespace>::all(client.clone()), &name, "namespaces").await);
            namespaces.push((name, seen));
        }
        let (cluster_queue, local_queue) = if doctor::serves_kueue(&kueue_versions) {
            let cq = Api::<ClusterQueue>::all(client.clone());
            let lq = Api::<LocalQueue>::namespaced(client.clone(), &settings.execution_namespace);
            (
                Some(seen(
                    read(cq, &settings.cluster_queue, "clusterqueues.kueue.x-k8s.io").await,
                )),
                Some(seen(
                    read(lq, &settings.local_queue, "localqueues.kueue.x-k8s.io").await,
                )),
            )
        } else {
            (None, None)
        };
        let mut rights = Vec::new();
        for right in doctor::rights(settings) {
            let allowed = self.allowed(&settings.install_namespace, &right).await;
            rights.push((right, allowed));
        }
        let crds = Api::<CustomResourceDefinition>::all(client.clone());
        let fournos_cluster_crd = read(crds, names::CRD_NAME, "customresourcedefinitions").await;
        let policies =
            Api::<NetworkPolicy>::namespaced(client.clone(), &settings.install_namespace);
        let discovery_policy = read(
            policies,
            names::controllers::DISCOVERY,
            "networkpolicies.networking.k8s.io",
        )
        .await;
        doctor::Observed {
            fournos_cluster_crd,
            discovery_policy,
            rights,
            kubernetes_version,
            kueue_versions,
            fournos_resources,
            namespaces,
            cluster_queue,
            local_queue,
        }
    }

    /// Whether the controller's ServiceAccount in `namespace` has `right`: a
    /// SubjectAccessReview, the apiserver's own authorizer.
    async fn allowed(&self, namespace: &str, right: &doctor::Right) -> doctor::Allowed {
        let accounts = Api::<ServiceAccount>::namespaced(self.client.clone(), namespace);
        match seen(read(accounts, right.controller, "serviceaccounts").await) {
            doctor::Seen::Present => {}
            doctor::Seen::Missing => return doctor::Allowed::NoServiceAccount,
            doctor::Seen::Unknown(why) => return doctor::Allowed::Unknown(why),
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(format!(
                    "system:serviceaccount:{namespace}:{}",
                    right.controller
                )),
                groups: Some(vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{namespace}"),
                    "system:authenticated".into(),
                ]),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(right.verb.into()),
                    group: Some(right.group.into()),
                    resource: Some(right.resource.into()),
                    name: right.name.clone(),
                    namespace: right.namespace.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await;
        match answer {
            Ok(review) if review.status.as_ref().is_some_and(|s| s.allowed) => doctor::Allowed::Yes,
            Ok(_) => doctor::Allowed::No,
            Err(e) => doctor::Allowed::Unknown(unanswered(e, "create", "subjectaccessreviews")),
        }
    }
}

/// What `why` tells of the Workloads: the sentinel's (labeled for the cluster, or owned by
/// the FournosJob sentinel) `QuotaReserved` condition and whether it tolerates the cordon,
/// and the other Workloads admitted on the cluster's flavor.
fn workload_evidence(
    evidence: &mut Evidence,
    workloads: &[Workload],
    cluster: &str,
    job: Option<&str>,
) {
    let id = |w: &Workload| {
        format!(
            "{}/{}",
            w.metadata.namespace.as_deref().unwrap_or_default(),
            w.metadata.name.as_deref().unwrap_or_default()
        )
    };
    let is_sentinel = |w: &Workload| {
        w.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(CLUSTER_LOCK_LABEL))
            .is_some_and(|c| c == cluster)
            || w.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "FournosJob" && Some(o.name.as_str()) == job)
    };
    fn conditions(w: &Workload) -> &[Condition] {
        w.status.as_ref().map_or(&[], |s| &s.conditions)
    }
    if let Some(w) = workloads.iter().find(|w| is_sentinel(w)) {
        let reserved = hearth_api::conditions::find(conditions(w), QUOTA_RESERVED).cloned();
        evidence.sentinel = Some((id(w), reserved));
        evidence.sentinel_tolerates_cordon = Some(explain::tolerates_cordon(w));
    }
    evidence.admitted_on_cluster = workloads
        .iter()
        .filter(|w| !is_sentinel(w))
        .filter(|w| hearth_api::conditions::is_true(conditions(w), ADMITTED))
        .filter(|w| {
            w.status
                .as_ref()
                .and_then(|s| s.admission.as_ref())
                .is_some_and(|a| {
                    a.pod_set_assignments
                        .iter()
                        .any(|p| p.flavors.values().any(|f| f == cluster))
                })
        })
        .map(id)
        .collect();
}

fn context_user(kubeconfig: &Kubeconfig, context: Option<&str>) -> Option<String> {
    let context = context.or(kubeconfig.current_context.as_deref())?;
    kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context)?
        .context
        .as_ref()?
        .user
        .clone()
}

/// Which objects a scrub looks at.
struct Scrub<'a> {
    kind: Kind,
    resource: &'a str,
    namespace: &'a str,
    selector: Option<&'a str>,
}

/// What the plugin was doing in `namespace`, for [`api_error`].
fn op<'a>(verb: &'a str, resource: &'a str, namespace: &'a str, name: Option<&'a str>) -> Op<'a> {
    Op {
        verb,
        resource,
        namespace: Some(namespace),
        name,
    }
}

/// Lists the objects' metadata, plans each ([`scrub::plan`]) and, unless `dry_run`,
/// patches each guarded by the version read; on a conflict reads it again and re-plans.
async fn scrub_all<K>(api: &Api<K>, scope: &Scrub<'_>, dry_run: bool) -> Result<Report>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = scope
        .selector
        .map_or_else(ListParams::default, |s| ListParams::default().labels(s));
    let listed = api
        .list_metadata(&params)
        .await
        .map_err(|e| api_error(&op("list", scope.resource, scope.namespace, None), e))?
        .items;
    let mut report = Report {
        kind: scope.kind,
        namespace: scope.namespace.to_owned(),
        dry_run,
        scanned: listed.len(),
        objects: Vec::new(),
    };
    for mut object in listed {
        let name = object.metadata.name.clone().unwrap_or_default();
        for attempt in 0..CONFLICT_RETRIES {
            let meta = &object.metadata;
            let finalizers = meta.finalizers.clone().unwrap_or_default();
            let Some(found) = scrub::plan(
                &name,
                meta.annotations.as_ref().unwrap_or(&Default::default()),
                &finalizers,
            ) else {
                break;
            };
            if !dry_run {
                let version = meta.resource_version.as_deref().unwrap_or_default();
                let patch = scrub::removal_patch(version, &found, &finalizers);
                match api
                    .patch_metadata(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(status))
                        if status.is_conflict() && attempt + 1 < CONFLICT_RETRIES =>
                    {
                        object = api.get_metadata(&name).await.map_err(|e| {
                            api_error(&op("get", scope.resource, scope.namespace, Some(&name)), e)
                        })?;
                        continue;
                    }
                    Err(e) => {
                        return Err(api_error(
                            &op("patch", scope.resource, scope.namespace, Some(&name)),
                            e,
                        )
                        .context(format!(
                            "removing kopf's leftovers from {name}; done so far:\n{}",
                            report.render()
                        )));
                    }
                }
            }
            report.objects.push(found);
            break;
        }
    }
    Ok(report)
}

/// An object, or why it could not be read (a refusal says what right is missing); `None`
/// when it does not exist.
async fn read<K>(api: Api<K>, name: &str, resource: &str) -> Option<Result<K, String>>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let answer = api.get_opt(name).await;
    answer
        .map_err(|e| unanswered(e, "get", resource))
        .transpose()
}

/// Whether a [`read`] object exists.
fn seen<K>(read: Option<Result<K, String>>) -> doctor::Seen {
    match read {
        Some(Ok(_)) => doctor::Seen::Present,
        None => doctor::Seen::Missing,
        Some(Err(why)) => doctor::Seen::Unknown(why),
    }
}

/// Why the doctor could not tell: the right the user lacks, or the error (bounded).
fn unanswered(error: kube::Error, verb: &str, resource: &str) -> String {
    match error {
        kube::Error::Api(status) if status.code == 403 => format!(
            "you may not {verb} {resource} (`kubectl auth can-i {verb} {resource}`): run the \
             doctor as a user who may"
        ),
        e => hearth_api::text::bounded(&e.to_string(), 400),
    }
}

fn api_error(op: &Op<'_>, error: kube::Error) -> anyhow::Error {
    match &error {
        kube::Error::Api(status) => match describe(op, status.code, &status.message) {
            Some(failure) => failure.into(),
            None => anyhow!("{} {}: {}", op.verb, op.resource, status.message),
        },
        _ => anyhow::Error::new(error).context(format!("{} {}", op.verb, op.resource)),
    }
}

/// An error as a note at the end of `why`: the full RBAC advice is for verbs that fail.
fn short(error: &anyhow::Error) -> String {
    match error.downcast_ref::<Failure>() {
        Some(Failure::Forbidden(_)) => "forbidden by RBAC".to_owned(),
        Some(Failure::NotFound(_)) => "not found".to_owned(),
        _ => error.to_string(),
    }
}
