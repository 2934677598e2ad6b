//! One version and one release folder (issue 25). The workspace version in Cargo.toml is
//! the only place a version is written: the chart, the images' tags and labels and every
//! binary's `--version` must say the same, and `just release` (tools/release.sh) must
//! refuse to build when one does not. The folder `just release` writes holds the three
//! images as OCI archives of this commit, the chart with its CRD, the plugin with its krew
//! archive and manifest, and a SHA256SUMS that checks every file.
//!
//! No control plane: these read files and run the built binaries. Without a release folder
//! of this commit the folder test says so in one line and passes, unless
//! `HEARTH_E2E_REQUIRE_RELEASE` is set (`just test` sets it after `just release`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, bail, ensure};
use hearth_e2e::chart::{chart_dir, helm_template};
use hearth_e2e::hearth::{Controller, PLUGIN};
use hearth_e2e::plane::hearth_binary;
use hearth_e2e::process::stdout_of;
use hearth_e2e::resources::parse_yaml_documents;
use serde_json::Value;

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn yaml(text: &str, origin: &str) -> Result<Value> {
    parse_yaml_documents(text, origin)?
        .into_iter()
        .next()
        .with_context(|| format!("{origin} is empty"))
}

/// `[workspace.package] version = "…"` of a Cargo.toml.
fn workspace_version(cargo_toml: &str) -> Option<&str> {
    cargo_toml
        .split("\n[")
        .find(|table| table.starts_with("workspace.package]"))?
        .lines()
        .find_map(|l| l.strip_prefix("version = "))
        .map(|v| v.trim().trim_matches('"'))
}

/// Every workspace member's Cargo.toml.
fn member_manifests() -> Result<Vec<PathBuf>> {
    let mut manifests = vec![repo().join("e2e/Cargo.toml")];
    for entry in std::fs::read_dir(repo().join("crates"))? {
        let manifest = entry?.path().join("Cargo.toml");
        if manifest.exists() {
            manifests.push(manifest);
        }
    }
    Ok(manifests)
}

#[test]
fn versions_agree_with_the_workspace_version() -> Result<()> {
    let cargo_toml = std::fs::read_to_string(repo().join("Cargo.toml"))?;
    ensure!(
        workspace_version(&cargo_toml) == Some(VERSION),
        "Cargo.toml's workspace version is {:?}, this build says {VERSION}",
        workspace_version(&cargo_toml)
    );
    // clap's `--version` is the crate's version: each crate must take the workspace's.
    let manifests = member_manifests()?;
    ensure!(manifests.len() >= 7, "members: {manifests:?}");
    for manifest in &manifests {
        let text = std::fs::read_to_string(manifest)?;
        ensure!(
            text.lines().any(|l| l.trim() == "version.workspace = true"),
            "{} does not take the workspace version (version.workspace = true)",
            manifest.display()
        );
    }

    let chart = yaml(
        &std::fs::read_to_string(chart_dir().join("Chart.yaml"))?,
        "Chart.yaml",
    )?;
    for key in ["version", "appVersion"] {
        ensure!(
            chart[key] == VERSION,
            "Chart.yaml's {key} is {}, the workspace version is {VERSION}",
            chart[key]
        );
    }
    // The images the chart runs are tagged with its appVersion, the tag tools/images.sh
    // gives them (e2e/tests/images.rs checks their version label).
    let docs = helm_template("hearth", &[])?;
    for controller in Controller::ALL {
        let deployment = docs
            .iter()
            .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == controller.binary())
            .with_context(|| format!("no Deployment {}", controller.binary()))?;
        let image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap_or_default();
        ensure!(
            image.ends_with(&format!("/{}:{VERSION}", controller.binary())),
            "the chart runs {image}, not {}:{VERSION}",
            controller.binary()
        );
    }

    for binary in Controller::ALL
        .map(Controller::binary)
        .into_iter()
        .chain([PLUGIN])
    {
        let said = stdout_of(Command::new(hearth_binary(binary)?).arg("--version"))?;
        let said = String::from_utf8(said)?;
        ensure!(
            said.trim() == format!("{binary} {VERSION}"),
            "{binary} --version says {said:?}"
        );
    }
    Ok(())
}

/// tools/versions.sh, which `just release` and `just images` run first, on a copy of the
/// files it reads: it agrees with the real tree, and refuses a chart of another version.
#[test]
fn the_release_refuses_a_chart_of_another_version() -> Result<()> {
    let said = stdout_of(&mut Command::new(repo().join("tools/versions.sh")))?;
    ensure!(
        String::from_utf8(said)?.trim() == VERSION,
        "tools/versions.sh disagrees"
    );

    let scratch = tempdir("versions")?;
    let copy = |relative: &Path| -> Result<()> {
        let to = scratch.0.join(relative);
        std::fs::create_dir_all(to.parent().context("a parent")?)?;
        std::fs::copy(repo().join(relative), &to)
            .with_context(|| format!("copying {}", relative.display()))?;
        Ok(())
    };
    for relative in [
        "tools/versions.sh",
        "Cargo.toml",
        "charts/hearth/Chart.yaml",
        "charts/hearth/values.yaml",
    ] {
        copy(Path::new(relative))?;
    }
    for manifest in member_manifests()? {
        copy(manifest.strip_prefix(repo())?)?;
    }
    let script = scratch.0.join("tools/versions.sh");
    ensure!(
        String::from_utf8(stdout_of(&mut Command::new(&script))?)?.trim() == VERSION,
        "the copy disagrees before any change"
    );

    let chart = scratch.0.join("charts/hearth/Chart.yaml");
    let text = std::fs::read_to_string(&chart)?;
    let other = format!("appVersion: \"{VERSION}-other\"");
    let changed = text.replace(&format!("appVersion: \"{VERSION}\""), &other);
    ensure!(
        changed.contains(&other),
        "Chart.yaml has no quoted appVersion"
    );
    std::fs::write(&chart, changed)?;
    let out = Command::new(&script).stdin(Stdio::null()).output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success()
            && stderr.contains(&format!(
                "appVersion is '{VERSION}-other', Cargo.toml's workspace version is {VERSION}"
            )),
        "tools/versions.sh accepted appVersion {VERSION}-other: {}\n{stderr}",
        out.status
    );
    Ok(())
}

/// A directory removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir(what: &str) -> Result<Scratch> {
    let dir = std::env::temp_dir().join(format!("hearth-release-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(Scratch(dir))
}

fn release_dir() -> PathBuf {
    std::env::var_os("HEARTH_RELEASE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("dist").join(VERSION))
}

/// krew's names for this machine, as tools/release.sh names the plugin's files.
fn platform() -> Result<(&'static str, &'static str)> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => bail!("no krew arch for {other}"),
    };
    Ok((std::env::consts::OS, arch))
}

/// One member of a tar archive (gzip-compressed when `gzip`).
fn tar_member(archive: &Path, member: &str, gzip: bool) -> Result<Vec<u8>> {
    stdout_of(
        Command::new("tar")
            .arg(if gzip { "-xzOf" } else { "-xOf" })
            .arg(archive)
            .arg(member),
    )
    .with_context(|| format!("{member} in {}", archive.display()))
}

fn tar_list(archive: &Path) -> Result<BTreeSet<String>> {
    let out = String::from_utf8(stdout_of(Command::new("tar").arg("-tzf").arg(archive))?)?;
    Ok(out.lines().map(str::to_owned).collect())
}

/// The image config an OCI archive holds: index.json → its one manifest → the config.
fn oci_config(archive: &Path, reference: &str) -> Result<Value> {
    let blob = |digest: &str| -> Result<Value> {
        let hex = digest
            .strip_prefix("sha256:")
            .with_context(|| format!("digest {digest}"))?;
        Ok(serde_json::from_slice(&tar_member(
            archive,
            &format!("blobs/sha256/{hex}"),
            false,
        )?)?)
    };
    let index: Value = serde_json::from_slice(&tar_member(archive, "index.json", false)?)?;
    let manifests = index["manifests"].as_array().context("index.json")?;
    ensure!(
        manifests.len() == 1,
        "{}: {} manifests",
        archive.display(),
        manifests.len()
    );
    let name = manifests[0]["annotations"]["org.opencontainers.image.ref.name"]
        .as_str()
        .unwrap_or_default();
    ensure!(
        reference.ends_with(name) && !name.is_empty(),
        "{}: the image is named {name:?}, not {reference}",
        archive.display()
    );
    let manifest = blob(manifests[0]["digest"].as_str().unwrap_or_default())?;
    blob(manifest["config"]["digest"].as_str().unwrap_or_default())
}

/// The revision of this checkout, as tools/revision.sh labels the images.
fn head() -> Result<String> {
    Ok(String::from_utf8(stdout_of(
        Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(repo()),
    )?)?
    .trim()
    .to_owned())
}

#[test]
fn the_release_folder_holds_images_chart_and_plugin_with_their_sums() -> Result<()> {
    let dir = release_dir();
    let required = std::env::var_os("HEARTH_E2E_REQUIRE_RELEASE").is_some();
    let skip = |why: String| -> Result<()> {
        if required {
            bail!("no release folder to check: {why}");
        }
        println!("release: SKIPPED: {why}");
        Ok(())
    };
    if !dir.join("SHA256SUMS").exists() {
        return skip(format!(
            "{} has no SHA256SUMS (run `just release`)",
            dir.display()
        ));
    }
    let (os, arch) = platform()?;
    let plugin = format!("{PLUGIN}-{VERSION}-{os}-{arch}");
    let archive = format!("{plugin}.tar.gz");
    let images = Controller::ALL.map(|c| (c.binary(), format!("{}-{VERSION}.oci.tar", c.binary())));
    let chart = format!("hearth-{VERSION}.tgz");

    // SHA256SUMS names every other file, and each sum holds.
    let sums = std::fs::read_to_string(dir.join("SHA256SUMS"))?;
    let summed: BTreeSet<String> = sums
        .lines()
        .filter_map(|l| l.split_once("  ").map(|(_, f)| f.to_owned()))
        .collect();
    let mut present = BTreeSet::new();
    println!("release folder {}:", dir.display());
    for entry in std::fs::read_dir(&dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        println!("  {:>10}  {name}", entry.metadata()?.len());
        present.insert(name);
    }
    let mut expected: BTreeSet<String> = [&chart, &plugin, &archive]
        .into_iter()
        .cloned()
        .chain(images.iter().map(|(_, file)| file.clone()))
        .chain(["fournos.yaml".to_owned()])
        .collect();
    ensure!(
        summed == expected,
        "SHA256SUMS names {summed:?}, expected {expected:?}"
    );
    expected.insert("SHA256SUMS".to_owned());
    ensure!(
        present == expected,
        "the folder holds {present:?}, expected {expected:?}"
    );
    stdout_of(
        Command::new("sha256sum")
            .args(["--quiet", "--strict", "-c", "SHA256SUMS"])
            .current_dir(&dir),
    )?;

    // The images of this commit, labelled with the workspace version.
    let head = head()?;
    for (binary, file) in &images {
        let config = oci_config(&dir.join(file), &format!("localhost/{binary}:{VERSION}"))?;
        let labels = &config["config"]["Labels"];
        let revision = labels["org.opencontainers.image.revision"]
            .as_str()
            .unwrap_or_default();
        if !revision.starts_with(&head) {
            return skip(format!(
                "{file} is of revision {revision:?}, HEAD is {head} (run `just release`)"
            ));
        }
        ensure!(labels["org.opencontainers.image.version"] == VERSION);
        ensure!(labels["org.opencontainers.image.title"] == *binary);
        ensure!(
            config["config"]["Entrypoint"][0] == format!("/usr/local/bin/{binary}"),
            "{file}: entrypoint {}",
            config["config"]["Entrypoint"]
        );
    }

    // The chart, its CRD the generated one.
    let chart = dir.join(&chart);
    let packaged = yaml(
        &String::from_utf8(tar_member(&chart, "hearth/Chart.yaml", true)?)?,
        "the packaged Chart.yaml",
    )?;
    ensure!(packaged["version"] == VERSION && packaged["appVersion"] == VERSION);
    let crd = tar_member(&chart, "hearth/crds/fournosclusters.yaml", true)?;
    ensure!(
        crd == std::fs::read(repo().join("manifests/crd.yaml"))?,
        "the packaged chart's CRD is not manifests/crd.yaml"
    );

    // The plugin: a release binary of this version, and krew's archive of it and LICENSE.
    let said = String::from_utf8(stdout_of(Command::new(dir.join(&plugin)).arg("--version"))?)?;
    ensure!(said.trim() == format!("{PLUGIN} {VERSION}"), "{said}");
    let archive_path = dir.join(&archive);
    let members = tar_list(&archive_path)?;
    ensure!(
        members == BTreeSet::from([PLUGIN.to_owned(), "LICENSE".to_owned()]),
        "{archive} holds {members:?}"
    );
    ensure!(tar_member(&archive_path, PLUGIN, true)? == std::fs::read(dir.join(&plugin))?);
    ensure!(tar_member(&archive_path, "LICENSE", true)? == std::fs::read(repo().join("LICENSE"))?);

    // The krew manifest installs that archive, by its sum.
    let manifest = yaml(
        &std::fs::read_to_string(dir.join("fournos.yaml"))?,
        "fournos.yaml",
    )?;
    ensure!(manifest["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2");
    ensure!(manifest["kind"] == "Plugin" && manifest["metadata"]["name"] == "fournos");
    ensure!(
        manifest["spec"]["version"] == format!("v{VERSION}"),
        "krew version {}",
        manifest["spec"]["version"]
    );
    let platforms = manifest["spec"]["platforms"]
        .as_array()
        .context("platforms")?;
    ensure!(platforms.len() == 1, "{platforms:?}");
    let platform = &platforms[0];
    ensure!(platform["selector"]["matchLabels"] == serde_json::json!({ "os": os, "arch": arch }));
    ensure!(
        platform["uri"]
            .as_str()
            .is_some_and(|u| u.starts_with("https://") && u.ends_with(&format!("/{archive}"))),
        "uri {}",
        platform["uri"]
    );
    let archive_sum = sums
        .lines()
        .find_map(|l| l.strip_suffix(&format!("  {archive}")))
        .context("the archive's sum")?;
    ensure!(
        platform["sha256"] == archive_sum,
        "krew sha256 {} is not the archive's {archive_sum}",
        platform["sha256"]
    );
    ensure!(platform["bin"] == PLUGIN);
    let files: BTreeSet<&str> = platform["files"]
        .as_array()
        .context("files")?
        .iter()
        .filter_map(|f| f["from"].as_str())
        .collect();
    ensure!(files == BTreeSet::from([PLUGIN, "LICENSE"]), "{files:?}");
    Ok(())
}
