//! The images as a cluster runs them (DESIGN, "Hearth runs where its users run it"): each
//! image `just images` built is exported from podman, and its own filesystem runs its
//! entrypoint as an arbitrary non-root UID with GID 0 (what OpenShift's restricted SCC
//! assigns) on a root filesystem that UID cannot write (as `readOnlyRootFilesystem`),
//! against the plane with the chart's ServiceAccount credentials. Discovery must onboard
//! a cluster, kueue-sync give it quota and lock-manager hold a lock.
//!
//! `podman run` does not work in the sandboxes this runs in (crun cannot set rlimits), so
//! the filesystem runs under `chroot --userspec`, which needs root (CAP_SYS_CHROOT).
//! Without podman, images of this commit (`just images`) or root the test says so in one
//! line and passes, unless `HEARTH_E2E_REQUIRE_IMAGES` is set (`just test` sets it after
//! `just images`).

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use hearth_api::KubeconfigStatus;
use hearth_api::names::condition_types::KUBECONFIG_VALID;
use hearth_api::names::{CLUSTER_SLOT_RESOURCE, KUBECONFIG_SECRET_LABEL};
use hearth_e2e::ControlPlane;
use hearth_e2e::hearth::{self, Controller, Running};
use hearth_e2e::invariants::{cluster_condition, entry, is_active, kueue_problems};
use hearth_e2e::lab::{is_held, lock_state};
use hearth_e2e::process::{stdout_of, until};
use hearth_e2e::world::World;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// A UID from OpenShift's range, with the root group, as the restricted SCC runs pods.
const USERSPEC: &str = "1000650000:0";
const DEADLINE: Duration = Duration::from_secs(90);
/// Where the test puts the ServiceAccount's kubeconfig inside each image's filesystem.
const KUBECONFIG_DIR: &str = "hearth-e2e";

fn podman() -> Command {
    let mut command = Command::new("podman");
    command.args([
        "--storage-driver",
        &std::env::var("HEARTH_PODMAN_STORAGE_DRIVER").unwrap_or_else(|_| "vfs".into()),
    ]);
    command
}

fn run(command: &mut Command) -> Result<String> {
    Ok(String::from_utf8(stdout_of(command)?)?)
}

fn image_ref(controller: Controller) -> String {
    format!(
        "localhost/{}:{}",
        controller.binary(),
        env!("CARGO_PKG_VERSION")
    )
}

/// Why the images cannot be run here, if they cannot.
fn missing() -> Option<String> {
    if Command::new("podman")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_err()
    {
        return Some("podman is not installed (./dev installs it with apt-get)".into());
    }
    for controller in Controller::ALL {
        let exists = podman()
            .args(["image", "exists", &image_ref(controller)])
            .status()
            .is_ok_and(|s| s.success());
        if !exists {
            return Some(format!(
                "{} is not built (run `just images`)",
                image_ref(controller)
            ));
        }
    }
    // Images of another commit would test other code: `just images` again.
    let head = run(Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR")))
    .map(|h| h.trim().to_owned())
    .unwrap_or_default();
    for controller in Controller::ALL {
        let revision = run(podman().args([
            "image",
            "inspect",
            "--format",
            "{{index .Labels \"org.opencontainers.image.revision\"}}",
            &image_ref(controller),
        ]))
        .unwrap_or_default();
        if head.is_empty() || !revision.starts_with(&head) {
            return Some(format!(
                "{} is of revision {}, HEAD is {head} (run `just images`)",
                image_ref(controller),
                revision.trim()
            ));
        }
    }
    match run(Command::new("id").arg("-u")) {
        Ok(uid) if uid.trim() == "0" => None,
        _ => Some("chroot needs root, and this test does not run as root".into()),
    }
}

/// A directory removed when dropped (the exported filesystems).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One image: what podman says of it, and its filesystem exported under `rootfs`.
struct Image {
    controller: Controller,
    inspect: Value,
    rootfs: PathBuf,
}

impl Image {
    fn export(controller: Controller, into: &Path) -> Result<Image> {
        let reference = image_ref(controller);
        let inspect: Value = serde_json::from_str(&run(
            podman().args(["image", "inspect", "--format", "json", &reference])
        )?)?;
        let rootfs = into.join(controller.binary());
        std::fs::create_dir_all(&rootfs)?;
        // As /proc/<pid>/root shows it.
        let rootfs = rootfs.canonicalize()?;
        let container = format!("hearth-e2e-{}-{}", controller.binary(), std::process::id());
        run(podman().args(["create", "--name", &container, &reference]))?;
        let archive = into.join(format!("{}.tar", controller.binary()));
        let exported = run(podman()
            .args(["export", "--output"])
            .arg(&archive)
            .arg(&container));
        run(podman().args(["rm", &container]))?;
        exported?;
        run(Command::new("tar")
            .args(["--numeric-owner", "-xf"])
            .arg(&archive)
            .arg("-C")
            .arg(&rootfs))?;
        std::fs::remove_file(&archive)?;
        Ok(Image {
            controller,
            inspect: inspect[0].clone(),
            rootfs,
        })
    }

    fn binary_path(&self) -> String {
        format!("/usr/local/bin/{}", self.controller.binary())
    }

    /// What the image says of itself: its entrypoint, user and labels.
    fn check_config(&self) -> Result<()> {
        let bin = self.controller.binary();
        let config = &self.inspect["Config"];
        ensure!(
            config["Entrypoint"] == json!([self.binary_path()]),
            "{bin}: entrypoint {}",
            config["Entrypoint"]
        );
        let user = config["User"].as_str().unwrap_or_default();
        let (uid, gid) = user.split_once(':').unwrap_or((user, ""));
        ensure!(
            uid.parse::<u32>().is_ok_and(|u| u != 0) && gid == "0",
            "{bin}: USER {user:?} is not a numeric non-root UID with GID 0"
        );
        let labels = &config["Labels"];
        let label = |name: &str| {
            labels[format!("org.opencontainers.image.{name}")]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        ensure!(label("title") == bin, "{bin}: title {:?}", label("title"));
        ensure!(
            label("version") == env!("CARGO_PKG_VERSION"),
            "{bin}: version label {:?}, the workspace says {}",
            label("version"),
            env!("CARGO_PKG_VERSION")
        );
        ensure!(
            label("licenses") == "Apache-2.0",
            "{bin}: licenses {:?}",
            label("licenses")
        );
        // The base it was built on, by digest, even when it was named by a tag.
        let digest = label("base.digest");
        ensure!(
            !label("base.name").is_empty()
                && digest.strip_prefix("sha256:").is_some_and(|hex| {
                    hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())
                }),
            "{bin}: base {:?} at {digest:?} is not named by a sha256 digest",
            label("base.name")
        );
        let revision = label("revision");
        ensure!(
            revision.len() >= 40 && revision.chars().take(40).all(|c| c.is_ascii_hexdigit()),
            "{bin}: revision {revision:?} is not a git commit"
        );
        for name in ["description", "source"] {
            ensure!(!label(name).is_empty(), "{bin}: no {name} label");
        }
        println!("{bin}: user {user}, revision {revision}");
        Ok(())
    }

    /// What the filesystem holds: the binary and the CA bundle, readable through GID 0 or
    /// by anyone, and no shell.
    fn check_files(&self) -> Result<()> {
        let bin = self.controller.binary();
        let readable = |path: &str, execute: bool| -> Result<()> {
            let meta = std::fs::metadata(self.rootfs.join(path.trim_start_matches('/')))
                .with_context(|| format!("{bin}: {path}"))?;
            let mode = meta.permissions().mode();
            let (need_group, need_other) = if execute {
                (0o050, 0o005)
            } else {
                (0o040, 0o004)
            };
            ensure!(
                (meta.gid() == 0 && mode & need_group == need_group)
                    || mode & need_other == need_other,
                "{bin}: {path} (mode {mode:o}, gid {}) is out of reach of GID 0",
                meta.gid()
            );
            Ok(())
        };
        readable(&self.binary_path(), true)?;
        let bundle = "/etc/ssl/certs/ca-certificates.crt";
        readable(bundle, false)?;
        let certificates = std::fs::read_to_string(self.rootfs.join(&bundle[1..]))?
            .matches("-----BEGIN CERTIFICATE-----")
            .count();
        ensure!(
            certificates >= 100,
            "{bin}: {bundle} holds {certificates} certificates"
        );
        for shell in ["bin/sh", "bin/bash", "usr/bin/sh"] {
            ensure!(
                std::fs::symlink_metadata(self.rootfs.join(shell)).is_err(),
                "{bin}: the image has a shell ({shell})"
            );
        }
        Ok(())
    }

    /// Takes write permission from group and others on the whole filesystem: files stay
    /// root's, so the controller's UID (GID 0) can write nothing, as on a read-only root.
    /// Then adds the ServiceAccount's kubeconfig, readable by GID 0 only.
    fn seal(&self, kubeconfig: &Path) -> Result<String> {
        run(Command::new("chmod").args(["-R", "go-w"]).arg(&self.rootfs))?;
        let dir = self.rootfs.join(KUBECONFIG_DIR);
        std::fs::create_dir(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o550))?;
        let inside = format!("/{KUBECONFIG_DIR}/kubeconfig");
        let file = self.rootfs.join(&inside[1..]);
        std::fs::copy(kubeconfig, &file)?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o440))?;
        Ok(inside)
    }

    /// A program for the plane to start: the image's entrypoint, in its filesystem, as
    /// [`USERSPEC`]. `exec` all the way, so a signal reaches the controller itself.
    fn launcher(&self, scratch: &Path) -> Result<PathBuf> {
        let chroot = ["/usr/sbin/chroot", "/usr/bin/chroot"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .context("no chroot (coreutils)")?;
        let path = scratch.join(format!("launch-{}", self.controller.binary()));
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\nexec {chroot} --userspec={USERSPEC} '{}' {}\n",
                self.rootfs.display(),
                self.binary_path()
            ),
        )?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        Ok(path)
    }

    /// Starts the image's controller in `world`'s scope as its chart ServiceAccount.
    async fn start(&self, world: &mut World<'_>, scratch: &Path) -> Result<Running> {
        let host_kubeconfig =
            hearth::service_account_kubeconfig(world.plane, &world.scope, self.controller).await?;
        let kubeconfig = self.seal(&host_kubeconfig)?;
        let launcher = self.launcher(scratch)?;
        let running = hearth::start_program(
            world.plane,
            &world.scope,
            self.controller,
            "image",
            &launcher,
            &[("KUBECONFIG", &kubeconfig)],
        )
        .await?;
        world.controllers.push(running.clone());
        self.check_process()?;
        Ok(running)
    }

    /// The controller that answers is the image's: a process whose root directory is
    /// this filesystem, running as [`USERSPEC`] with no other group.
    fn check_process(&self) -> Result<()> {
        let bin = self.controller.binary();
        let (uid, gid) = USERSPEC.split_once(':').expect("uid:gid");
        for entry in std::fs::read_dir("/proc")? {
            let dir = entry?.path();
            if std::fs::read_link(dir.join("root")).ok().as_deref() != Some(&self.rootfs) {
                continue;
            }
            let status = std::fs::read_to_string(dir.join("status"))?;
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.split_whitespace().collect::<Vec<_>>())
                    .unwrap_or_default()
            };
            ensure!(
                field("Uid:").iter().all(|u| *u == uid)
                    && field("Gid:").iter().all(|g| *g == gid)
                    && field("Groups:").iter().all(|g| *g == gid),
                "{bin} runs as Uid {:?} Gid {:?} Groups {:?}, not {USERSPEC}",
                field("Uid:"),
                field("Gid:"),
                field("Groups:")
            );
            return Ok(());
        }
        bail!(
            "no process runs in {bin}'s filesystem {}",
            self.rootfs.display()
        )
    }
}

#[tokio::test]
async fn each_image_runs_its_controller_as_an_arbitrary_uid_on_a_read_only_root() -> Result<()> {
    if let Some(why) = missing() {
        if std::env::var_os("HEARTH_E2E_REQUIRE_IMAGES").is_some() {
            bail!("the images cannot be run: {why}");
        }
        println!("images: SKIPPED: {why}");
        return Ok(());
    }
    let scratch =
        Scratch(std::env::temp_dir().join(format!("hearth-images-{}", std::process::id())));
    std::fs::create_dir_all(&scratch.0)?;
    let mut images = Vec::new();
    for controller in Controller::ALL {
        let image = Image::export(controller, &scratch.0)?;
        image.check_config()?;
        image.check_files()?;
        images.push(image);
    }

    let plane = ControlPlane::shared().await?;
    let mut world = World::new(plane, plane.isolated("images").await?).await?;
    for image in &images {
        image.start(&mut world, &scratch.0).await?;
    }

    // Discovery onboards a cluster of the plane from its kubeconfig Secret.
    let cluster = world.scope.cluster("image");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {
            "name": format!("kubeconfig-{cluster}"),
            "namespace": world.scope.secrets_namespace,
            "labels": { KUBECONFIG_SECRET_LABEL: "true" },
        },
    }))?;
    let secret = Secret {
        data: Some(
            [(
                "kubeconfig".to_owned(),
                ByteString(plane.targets()[0].node_reader_kubeconfig().into()),
            )]
            .into(),
        ),
        ..secret
    };
    world
        .secrets
        .create(&PostParams::default(), &secret)
        .await
        .context("creating the kubeconfig Secret")?;
    let logs = |e: anyhow::Error| hearth::with_logs(e, &world.controllers);
    until(
        &format!("{cluster}: KubeconfigValid=True"),
        DEADLINE,
        || async {
            let Some(fc) = world.clusters.get_opt(&cluster).await? else {
                return Ok(Err("no FournosCluster".to_owned()));
            };
            let status = fc.status.as_ref().and_then(|s| s.kubeconfig_status);
            let valid = cluster_condition(&fc, KUBECONFIG_VALID);
            Ok(
                if status == Some(KubeconfigStatus::Valid)
                    && valid.is_some_and(|c| c.status == "True")
                {
                    Ok(())
                } else {
                    Err(format!(
                        "kubeconfigStatus {status:?}, KubeconfigValid {valid:?}"
                    ))
                },
            )
        },
    )
    .await
    .map_err(logs)?;

    // kueue-sync gives it its slots in the scope's ClusterQueue, which Kueue accepts.
    until(
        &format!("{cluster}'s quota in {}", world.scope.cluster_queue),
        DEADLINE,
        || async {
            let cq = world.queue().await?;
            let quota = entry(&cq, &cluster);
            let problems = kueue_problems(&cq);
            Ok(
                if quota
                    .as_ref()
                    .is_some_and(|q| q.get(CLUSTER_SLOT_RESOURCE).is_some_and(|s| *s > 0))
                    && problems.is_empty()
                    && is_active(&cq)
                {
                    Ok(())
                } else {
                    Err(format!("entry {quota:?}, problems {problems:?}"))
                },
            )
        },
    )
    .await
    .map_err(logs)?;

    // lock-manager holds a lock for a person: its sentinel is admitted, locked=true.
    world
        .clusters
        .patch(
            &cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "owner": "alice" } })),
        )
        .await
        .context("locking the cluster")?;
    until(&format!("{cluster}: held"), DEADLINE, || async {
        let fc = world.clusters.get(&cluster).await?;
        Ok(if is_held(&fc) {
            Ok(())
        } else {
            Err(lock_state(&fc))
        })
    })
    .await
    .map_err(logs)?;

    for running in &world.controllers {
        running.stop_cleanly(plane).await?;
    }
    Ok(())
}
