//! The pinned peer systems under `HEARTH_PEERS_DIR` (default `../shared/peers` from the
//! repository root): the real Fournos operator and the real Python Hearth. Tests and
//! benchmarks *run* them from a venv cached beside the other tools; nothing of theirs is
//! copied into the project. An absent peer is a skip with one line, unless
//! [`REQUIRE_PEERS_ENV`] is set: then a test that needs it fails ([`when_absent`]), so that
//! a run that has the peers cannot pass by skipping them (`just test` sets it when the peers
//! folder is there).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Context as _, PlaneError, Result};
use crate::process::{self, Managed, Spawn};

/// Where the peer systems are (a folder holding `fournos/` and `hearth-py/`).
pub const PEERS_DIR_ENV: &str = "HEARTH_PEERS_DIR";

/// Set (to anything but empty or `0`), a test that needs a peer fails when the peer is
/// absent instead of skipping. `just test` sets it when the peers folder exists.
pub const REQUIRE_PEERS_ENV: &str = "HEARTH_E2E_REQUIRE_PEERS";

/// What a test does about a peer it needs and cannot find.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Absent {
    /// Pass after printing this one line (`<test>: skipped: …`).
    Skip(String),
    /// Fail with this message: the peers are required.
    Fail(String),
}

/// The decision for `test`, whose peer is absent for `why` (from [`Peer::source`]), given
/// the value of [`REQUIRE_PEERS_ENV`].
pub fn when_absent(test: &str, why: &str, require: Option<&std::ffi::OsStr>) -> Absent {
    let required = require.is_some_and(|v| !v.is_empty() && v != "0");
    if required {
        Absent::Fail(format!(
            "{test}: {why}, and {REQUIRE_PEERS_ENV} is set (`just test` sets it when the peers \
             folder exists), so a test that needs a peer fails instead of skipping: put the \
             peer there, or unset {REQUIRE_PEERS_ENV} to let the test skip"
        ))
    } else {
        Absent::Skip(format!("{test}: skipped: {why}"))
    }
}

/// [`when_absent`] with [`REQUIRE_PEERS_ENV`] as this process has it.
pub fn on_absent(test: &str, why: &str) -> Absent {
    when_absent(test, why, std::env::var_os(REQUIRE_PEERS_ENV).as_deref())
}

impl Absent {
    /// Skip: prints the line past libtest's capture (which hides what a passing test
    /// prints), so that a run shows the test was skipped, and returns `Ok`. Fail: `Err`.
    pub fn skip_or_fail(self) -> Result<()> {
        match self {
            Absent::Skip(line) => {
                use std::io::Write as _;
                let _ = writeln!(std::io::stderr(), "{line}");
                Ok(())
            }
            Absent::Fail(message) => Err(PlaneError::Invalid(message)),
        }
    }
}

/// `HEARTH_PEERS_DIR`, or `../shared/peers` from the repository root.
pub fn peers_dir() -> PathBuf {
    match std::env::var_os(PEERS_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/peers"),
    }
}

/// One of the pinned peers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// The Fournos operator (`fournos/`).
    Fournos,
    /// The Python (kopf) Hearth that Hearth replaces (`hearth-py/`).
    HearthPy,
}

impl Peer {
    /// Its folder under the peers directory, also the prefix of its cached venv.
    pub fn folder(self) -> &'static str {
        match self {
            Peer::Fournos => "fournos",
            Peer::HearthPy => "hearth-py",
        }
    }

    fn display_name(self) -> &'static str {
        match self {
            Peer::Fournos => "the real Fournos",
            Peer::HearthPy => "the real Python Hearth",
        }
    }

    /// Its source folder, or why there is none (for [`when_absent`]).
    pub fn source(self) -> std::result::Result<PathBuf, String> {
        let dir = peers_dir().join(self.folder());
        if dir.join("pyproject.toml").is_file() {
            Ok(dir)
        } else {
            Err(format!(
                "{} is not at {} (set {PEERS_DIR_ENV} to the folder holding {}/)",
                self.display_name(),
                dir.display(),
                self.folder()
            ))
        }
    }

    /// A venv with this peer installed, under the e2e cache, keyed by its `pyproject.toml`
    /// and the Python version. Built once (blocking: minutes on a cold cache, PyPI needed);
    /// concurrent builders each build aside and the first rename wins.
    pub fn venv(self, source: &Path) -> Result<PathBuf> {
        let python = Path::new("python3");
        let version = run(python, &["--version"], "python3 --version")?;
        let pyproject = std::fs::read(source.join("pyproject.toml"))
            .context(|| format!("reading {}/pyproject.toml", source.display()))?;
        let mut hasher = DefaultHasher::new();
        (version.trim(), &pyproject).hash(&mut hasher);
        let key = format!("{}-venv-{:016x}", self.folder(), hasher.finish());
        let dir = cache_root().join(&key);
        let ready = dir.join(".installed");
        if ready.exists() {
            return Ok(dir);
        }
        std::fs::create_dir_all(cache_root()).context(|| "creating the e2e cache".into())?;
        let building = cache_root().join(format!("{key}.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&building);
        let building_str = building.to_string_lossy().into_owned();
        run(python, &["-m", "venv", &building_str], "python3 -m venv").map_err(|e| {
            PlaneError::Invalid(format!(
                "{e}\n(on Debian/Ubuntu the venv module is the python3-venv package: apt-get install python3-venv)"
            ))
        })?;
        tracing::info!(venv = %dir.display(), peer = self.folder(), "installing with pip (once per pyproject)");
        run(
            &building.join("bin/pip"),
            &[
                "install",
                "--quiet",
                "--disable-pip-version-check",
                &source.to_string_lossy(),
            ],
            &format!("pip install {}", self.folder()),
        )?;
        std::fs::write(building.join(".installed"), b"").context(|| "marking the venv".into())?;
        if std::fs::rename(&building, &dir).is_err() {
            // Another process finished first; use its venv.
            let _ = std::fs::remove_dir_all(&building);
        }
        if ready.exists() {
            Ok(dir)
        } else {
            Err(PlaneError::Invalid(format!("no venv at {}", dir.display())))
        }
    }
}

/// A running peer (a kopf operator) and its kopf liveness endpoint, which says it is up.
#[derive(Debug)]
pub struct KopfProcess {
    spec: Spawn,
    managed: Managed,
    liveness: u16,
}

impl KopfProcess {
    /// Spawns `spec` (which must serve kopf's liveness on `127.0.0.1:liveness`) and waits
    /// until it answers.
    pub async fn start(spec: Spawn, liveness: u16) -> Result<KopfProcess> {
        let managed = process::spawn(spec.clone())?;
        let mut running = KopfProcess {
            spec,
            managed,
            liveness,
        };
        running.wait_live().await?;
        Ok(running)
    }

    /// `--liveness=` for a kopf command line on `port`.
    pub fn liveness_arg(port: u16) -> String {
        format!("--liveness=http://127.0.0.1:{port}/healthz")
    }

    async fn wait_live(&mut self) -> Result<()> {
        let what = format!("{} liveness", self.spec.name);
        self.managed
            .wait_healthz(&what, self.liveness, Duration::from_secs(90))
            .await
    }

    /// The last lines of its log, for failure messages.
    pub fn log(&self) -> String {
        crate::error::tail(&self.spec.log, 40)
    }

    pub fn log_path(&self) -> &Path {
        &self.spec.log
    }

    /// Stops it: SIGTERM (kopf's graceful shutdown), SIGKILL after 10 s.
    pub async fn stop(&mut self) {
        self.managed.stop(Duration::from_secs(10)).await;
    }

    /// Starts it again with the same settings.
    pub async fn restart(&mut self) -> Result<()> {
        self.managed.stop(Duration::from_secs(10)).await;
        self.managed = process::spawn(self.spec.clone())?;
        self.wait_live().await
    }
}

fn cache_root() -> PathBuf {
    match std::env::var_os("HEARTH_E2E_CACHE") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/hearth-e2e"),
    }
}

fn run(program: &Path, args: &[&str], what: &str) -> Result<String> {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .context(|| format!("{what}: running {}", program.display()))?;
    if !out.status.success() {
        return Err(PlaneError::Invalid(format!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    const WHY: &str = "the real Fournos is not at /x/fournos (set HEARTH_PEERS_DIR to the folder holding fournos/)";

    #[test]
    fn an_absent_peer_is_a_skip_unless_required() {
        for require in [None, Some(OsStr::new("")), Some(OsStr::new("0"))] {
            assert_eq!(
                when_absent("fournos_real", WHY, require),
                Absent::Skip(format!("fournos_real: skipped: {WHY}")),
                "{require:?}"
            );
        }
    }

    #[test]
    fn a_required_peer_that_is_absent_fails_saying_why_and_what_to_do() {
        for require in ["1", "yes"] {
            let Absent::Fail(message) = when_absent("takeover_py", WHY, Some(OsStr::new(require)))
            else {
                panic!("{require}: not a failure");
            };
            assert!(
                message.starts_with(&format!("takeover_py: {WHY}, and")),
                "{message}"
            );
            assert!(
                message.contains("HEARTH_E2E_REQUIRE_PEERS is set"),
                "{message}"
            );
            assert!(message.contains("put the peer there"), "{message}");
            assert!(!message.contains("skipped"), "{message}");
        }
    }

    #[test]
    fn a_failure_is_an_error_and_a_skip_is_not() {
        assert!(Absent::Fail("x".into()).skip_or_fail().is_err());
        assert!(Absent::Skip("x: skipped: y".into()).skip_or_fail().is_ok());
    }
}
