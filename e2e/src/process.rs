//! Child processes of the supervisor: spawning with a log file, liveness, and a
//! terminate-then-kill stop. Every child runs in a process group of its own (so a Ctrl-C in
//! the terminal reaches only the supervisor, which then stops them in order) and, where
//! `setpriv` exists, with a parent-death signal, so that even a SIGKILLed supervisor leaves
//! no child behind.

use std::collections::HashSet;
use std::ffi::OsString;
use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::{Context, PlaneError, Result};
use crate::protocol::{Pids, ProcessState, write_json};

/// The supervisor's record of its children, mirrored to `pids.json` on every change.
static REGISTRY: Mutex<Option<(PathBuf, Pids)>> = Mutex::new(None);

/// Makes every later [`spawn`] and [`Managed::stop`] rewrite `path`.
pub fn record_pids_in(path: PathBuf) -> Result<()> {
    let pids = Pids {
        supervisor_pid: std::process::id(),
        supervisor_exe: std::env::current_exe().unwrap_or_default(),
        processes: Vec::new(),
    };
    write_json(&path, &pids)?;
    *REGISTRY.lock().expect("registry poisoned") = Some((path, pids));
    Ok(())
}

fn update_registry(change: impl FnOnce(&mut Vec<ProcessState>)) {
    let mut guard = REGISTRY.lock().expect("registry poisoned");
    if let Some((path, pids)) = guard.as_mut() {
        change(&mut pids.processes);
        if let Err(e) = write_json(path, pids) {
            tracing::warn!(error = %e, "could not update the pid file");
        }
    }
}

/// SIGKILLs listed processes that are still alive and still run the recorded executable
/// (a recycled pid is left alone).
pub fn kill_stragglers(processes: &[ProcessState]) -> Vec<u32> {
    let mut killed = Vec::new();
    for p in processes {
        if runs(p.pid, &p.exe) {
            tracing::warn!(name = %p.name, pid = p.pid, "killing a leftover process");
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(p.pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            killed.push(p.pid);
        }
    }
    killed
}

/// Every child currently registered.
pub fn registered() -> Vec<ProcessState> {
    REGISTRY
        .lock()
        .expect("registry poisoned")
        .as_ref()
        .map(|(_, pids)| pids.processes.clone())
        .unwrap_or_default()
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Spawn {
    /// Short name used in logs and the state file (`etcd`, `apiserver-target-a`, …).
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub env: Vec<(String, String)>,
    /// stdout and stderr are appended here.
    pub log: PathBuf,
}

impl Spawn {
    pub fn new(
        name: impl Into<String>,
        program: impl Into<PathBuf>,
        log: impl Into<PathBuf>,
    ) -> Self {
        Spawn {
            name: name.into(),
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            log: log.into(),
        }
    }

    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }
}

/// A running child.
#[derive(Debug)]
pub struct Managed {
    pub spec: Spawn,
    pub pid: u32,
    child: tokio::process::Child,
}

fn setpriv() -> Option<&'static Path> {
    static SETPRIV: OnceLock<Option<PathBuf>> = OnceLock::new();
    SETPRIV
        .get_or_init(|| {
            ["/usr/bin/setpriv", "/bin/setpriv"]
                .iter()
                .map(PathBuf::from)
                .find(|p| p.exists())
        })
        .as_deref()
}

/// Starts `spec`. Must be called from a thread that lives as long as the child should
/// (the supervisor's main thread): Linux delivers the parent-death signal when the
/// *thread* that forked exits.
pub fn spawn(spec: Spawn) -> Result<Managed> {
    if let Some(parent) = spec.log.parent() {
        std::fs::create_dir_all(parent).context(|| format!("creating {}", parent.display()))?;
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&spec.log)
        .context(|| format!("opening {}", spec.log.display()))?;
    let log_err = log
        .try_clone()
        .context(|| "duplicating a log handle".into())?;
    let mut cmd = match setpriv() {
        Some(setpriv) => {
            let mut cmd = tokio::process::Command::new(setpriv);
            cmd.args(["--pdeathsig", "KILL", "--"]).arg(&spec.program);
            cmd
        }
        None => tokio::process::Command::new(&spec.program),
    };
    cmd.args(&spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .process_group(0)
        .kill_on_drop(true);
    let child = cmd
        .spawn()
        .context(|| format!("starting {} ({})", spec.name, spec.program.display()))?;
    let pid = child.id().ok_or_else(|| PlaneError::Exited {
        what: spec.name.clone(),
        status: "at once".into(),
        log: Some(spec.log.clone()),
    })?;
    tracing::info!(name = %spec.name, pid, log = %spec.log.display(), "started");
    let entry = ProcessState {
        name: spec.name.clone(),
        pid,
        exe: std::fs::canonicalize(&spec.program).unwrap_or_else(|_| spec.program.clone()),
        log: spec.log.clone(),
    };
    update_registry(|all| all.push(entry));
    Ok(Managed { spec, pid, child })
}

impl Managed {
    /// `Err(Exited)` if the process is gone: used inside readiness waits so that a crash is
    /// reported at once, with its log, instead of as a timeout.
    pub fn check_running(&mut self) -> Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(PlaneError::Exited {
                what: self.spec.name.clone(),
                status: status.to_string(),
                log: Some(self.spec.log.clone()),
            }),
            Err(e) => Err(PlaneError::Io {
                context: format!("checking {}", self.spec.name),
                source: e,
            }),
        }
    }

    /// Polls `probe` until it answers `Some`, failing at once if the child exits; a
    /// time-out carries the child's log. The one readiness wait of every process the plane
    /// runs.
    pub async fn wait_until<T, F, Fut>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut probe: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let log = self.spec.log.clone();
        poll(what, timeout, || {
            let running = self.check_running();
            let next = probe();
            async move {
                running?;
                Ok(next.await)
            }
        })
        .await
        .map_err(|e| with_log(e, log))
    }

    /// Waits until the child answers 200 on `http://127.0.0.1:<port>/healthz` (kopf's
    /// liveness endpoint, for the Python peers); a crash or a time-out carries its log.
    pub async fn wait_healthz(&mut self, what: &str, port: u16, timeout: Duration) -> Result<()> {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        self.wait_until(what, timeout, || async move {
            matches!(http_get(addr, "/healthz").await, Ok((200, _))).then_some(())
        })
        .await
    }

    /// Resolves when the child exits; used by the supervisor to notice crashes.
    pub async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.child.wait().await
    }

    /// SIGTERM to the child's process group, then SIGKILL after `grace`; a zero grace is a
    /// crash on purpose: SIGKILL at once.
    pub async fn stop(&mut self, grace: Duration) {
        let pid = self.pid;
        if self.child.try_wait().ok().flatten().is_some() {
            update_registry(|all| all.retain(|p| p.pid != pid));
            return;
        }
        let group = Pid::from_raw(self.pid as i32);
        if !grace.is_zero() {
            let _ = killpg(group, Signal::SIGTERM);
        }
        if tokio::time::timeout(grace, self.child.wait())
            .await
            .is_err()
        {
            if !grace.is_zero() {
                tracing::warn!(name = %self.spec.name, pid = self.pid, "did not stop after SIGTERM; killing");
            }
            let _ = killpg(group, Signal::SIGKILL);
            let _ = self.child.wait().await;
        }
        // Anything the child itself started in its group goes too.
        let _ = killpg(group, Signal::SIGKILL);
        update_registry(|all| all.retain(|p| p.pid != pid));
        tracing::info!(name = %self.spec.name, pid = self.pid, "stopped");
    }
}

/// Whether `pid` is a live (non-zombie) process.
pub fn is_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state letter follows the parenthesised command name, which may contain spaces.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// The executable behind `pid`.
pub fn exe_of(pid: u32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

/// Whether `pid` is alive and runs `exe`: a pid from a state file may have been recycled.
/// An executable replaced on disk since it started (cargo rebuilt `hearth-plane`) still
/// counts: the kernel then reports it as `<path> (deleted)`.
pub fn runs(pid: u32, exe: &Path) -> bool {
    is_alive(pid)
        && exe_of(pid).is_some_and(|actual| {
            let actual = actual.to_string_lossy();
            Path::new(actual.strip_suffix(" (deleted)").unwrap_or(&actual)) == exe
        })
}

/// Ports [`free_port`] hands out: below Linux's ephemeral range (32768–60999), so no
/// outgoing connection on the machine takes one between the pick and the listener's bind.
const PORTS: std::ops::Range<u16> = 20_000..32_768;

/// A free loopback port, reserved for the life of this process against every other
/// process on the machine that asks here (two e2e binaries run at once, a plane of
/// `hearth-plane up`, a benchmark): each port has a lock file in
/// `$TMPDIR/hearth-e2e-ports`, held (`flock`) until this process exits, and the kernel
/// drops the lock of a process that died. Ports handed out by this process are never
/// handed out twice.
pub fn free_port() -> Result<u16> {
    use std::hash::{BuildHasher as _, Hasher as _};
    static HELD: OnceLock<Mutex<(HashSet<u16>, Vec<std::fs::File>)>> = OnceLock::new();
    let dir = std::env::temp_dir().join("hearth-e2e-ports");
    std::fs::create_dir_all(&dir).context(|| format!("creating {}", dir.display()))?;
    let random = std::collections::hash_map::RandomState::new();
    for attempt in 0u64..500 {
        let mut hasher = random.build_hasher();
        hasher.write_u64(attempt);
        let port = PORTS.start + (hasher.finish() % u64::from(PORTS.end - PORTS.start)) as u16;
        let mut held = HELD
            .get_or_init(Default::default)
            .lock()
            .expect("port set poisoned");
        if held.0.contains(&port) {
            continue;
        }
        let path = dir.join(port.to_string());
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .context(|| format!("opening {}", path.display()))?;
        // Held by another live process, or in use by something that does not ask here.
        if file.try_lock().is_err() || TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        held.0.insert(port);
        held.1.push(file);
        return Ok(port);
    }
    Err(PlaneError::Invalid(format!(
        "no free loopback port in {}..{}",
        PORTS.start, PORTS.end
    )))
}

/// The stdout of a short command run to completion (no stdin); an error carrying its exit
/// status and stderr when it fails.
pub fn stdout_of(command: &mut std::process::Command) -> anyhow::Result<Vec<u8>> {
    use anyhow::Context as _;
    let out = command
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {command:?}"))?;
    anyhow::ensure!(
        out.status.success(),
        "{command:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out.stdout)
}

/// The e2e kit's one polling loop: calls `probe` until it returns `Ok(Ok(value))` or
/// `timeout` passes, and then returns `Ok(Err(last state seen))`. An `Err` ends the wait at
/// once. The interval grows from 50 ms to 500 ms: fast when things are quick, quiet when
/// they are not. Never a fixed sleep as synchronisation. [`until`], [`eventually`] and
/// [`poll`] are this loop with their error types.
pub async fn wait<T, E, F, Fut>(
    timeout: Duration,
    mut probe: F,
) -> std::result::Result<std::result::Result<T, String>, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<std::result::Result<T, String>, E>>,
{
    let deadline = Instant::now() + timeout;
    let mut interval = Duration::from_millis(50);
    loop {
        let last = match probe().await? {
            Ok(value) => return Ok(Ok(value)),
            Err(state) => state,
        };
        if Instant::now() >= deadline {
            return Ok(Err(last));
        }
        tokio::time::sleep(interval).await;
        interval = (interval * 2).min(Duration::from_millis(500));
    }
}

/// Attaches a log file to a timeout so the error shows what the component said.
pub(crate) fn with_log(error: PlaneError, log: PathBuf) -> PlaneError {
    match error {
        PlaneError::Timeout {
            what,
            secs,
            log: None,
        } => PlaneError::Timeout {
            what,
            secs,
            log: Some(log),
        },
        other => other,
    }
}

/// [`wait`] for the harness: `probe` yields `Some(value)` when done; a time-out is a
/// [`PlaneError::Timeout`] naming what was awaited.
pub async fn poll<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let waited = wait(timeout, || {
        let next = probe();
        async move { Ok::<_, PlaneError>(next.await?.ok_or_else(String::new)) }
    })
    .await?;
    waited.map_err(|_| PlaneError::Timeout {
        what: what.to_string(),
        secs: timeout.as_secs(),
        log: None,
    })
}

/// [`until`] for a probe that has no state worth reporting: `Some(value)` when done.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    until(what, timeout, || {
        let next = probe();
        async move { Ok(next.await?.ok_or_else(|| "not yet".to_owned())) }
    })
    .await
}

/// [`wait`] for tests: `Ok(Err(state))` means not yet, and the last such state is in the
/// time-out error, so a failing test says what it saw.
pub async fn until<T, F, Fut>(what: &str, timeout: Duration, probe: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<std::result::Result<T, String>>>,
{
    wait(timeout, probe).await?.map_err(|last| {
        anyhow::anyhow!(
            "timed out after {}s waiting for {what}; last seen: {last}",
            timeout.as_secs()
        )
    })
}

/// The opposite wait: `probe` must keep returning `Ok(())` for all of `window`; the first
/// `Err(why)` fails with it. For "nothing happens" checks (no write, no eviction).
pub async fn holds_for<F, Fut>(what: &str, window: Duration, mut probe: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<std::result::Result<(), String>>>,
{
    let broken = wait(window, || {
        let next = probe();
        // Inverted: a broken promise ends the wait as its "value".
        async move {
            Ok::<_, anyhow::Error>(match next.await? {
                Ok(()) => Err(String::new()),
                Err(why) => Ok(why),
            })
        }
    })
    .await?;
    match broken {
        Ok(why) => anyhow::bail!("{what} did not hold: {why}"),
        Err(_) => Ok(()),
    }
}

/// A minimal plain-HTTP GET for loopback health endpoints (etcd, Kueue, Hearth's admin
/// server): returns the status code and body.
pub async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let io = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream
            .write_all(
                format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(3), io)
        .await
        .map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::TimedOut, "health probe timed out")
        })??;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, "not an HTTP response")
        })?;
    Ok((code, body.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_outside_the_ephemeral_range_and_held_against_other_processes() {
        // Each port is bound as soon as it is handed out, as its user would: the lock
        // keeps out the processes that ask here, not a process anywhere on the machine
        // that binds this range on its own, so a later bind would test the machine.
        let picked: Vec<(u16, TcpListener)> = (0..20)
            .map(|_| {
                let port = free_port().unwrap();
                let listener = TcpListener::bind(("127.0.0.1", port))
                    .unwrap_or_else(|e| panic!("{port} is handed out but not free: {e}"));
                (port, listener)
            })
            .collect();
        let distinct: HashSet<u16> = picked.iter().map(|(port, _)| *port).collect();
        assert_eq!(distinct.len(), picked.len(), "{distinct:?}");
        for (port, _listener) in &picked {
            assert!(PORTS.contains(port), "{port}");
            // Another process opens the lock file anew: its flock is refused while this
            // process lives.
            let other = std::fs::File::open(
                std::env::temp_dir()
                    .join("hearth-e2e-ports")
                    .join(port.to_string()),
            )
            .unwrap();
            assert!(other.try_lock().is_err(), "{port} is not held");
        }
    }

    #[test]
    fn a_replaced_executable_still_counts_as_itself() {
        let dir = std::env::temp_dir().join(format!("hearth-e2e-runs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("sleeper");
        std::fs::copy("/bin/sleep", &exe).unwrap();
        let mut child = std::process::Command::new(&exe).arg("30").spawn().unwrap();
        assert!(runs(child.id(), &exe));
        assert!(!runs(child.id(), Path::new("/bin/true")));
        // What `cargo build` does to a running binary: a new file takes the old one's name.
        std::fs::copy("/bin/sleep", dir.join("next")).unwrap();
        std::fs::rename(dir.join("next"), &exe).unwrap();
        assert!(runs(child.id(), &exe));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!runs(child.id(), &exe));
        assert!(!is_alive(child.id()));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
