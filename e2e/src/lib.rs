//! Hearth's local control plane: the real components Hearth talks to, run as processes on
//! loopback, and the helpers end-to-end tests need.
//!
//! # What runs
//!
//! One supervisor process (`hearth-plane run`) owns:
//! - one **etcd** (`--unsafe-no-fsync`, data in the state dir);
//! - the **management** kube-apiserver (RBAC on, `--endpoint-reconciler-type=none`, own CA,
//!   admin client certificate in `system:masters`, ServiceAccount signing keys);
//! - **target** kube-apiservers (two or more) on the same etcd under their own
//!   `--etcd-prefix`, each with its own CA and keys, carrying the emulated fleet
//!   ([`fleet::FLEET`]) and a `hearth-node-reader` ServiceAccount that may only read nodes;
//! - **Kueue**'s manager out of cluster against the management apiserver (see [`kueue`]
//!   for its configuration and why), with the base fixtures ([`fixtures`]);
//! - optionally Hearth's three controllers.
//!
//! The binaries come from `e2e/tools/build.sh` (pinned Go modules, cached by pin hash under
//! `~/.cache/hearth-e2e/`). Readiness is always polled against a deadline (`/readyz`,
//! `/health`, Kueue reconciling a ClusterQueue), never slept on.
//!
//! # Process hygiene
//!
//! [`ControlPlane::start`] spawns the supervisor with a pipe on its stdin and reads its
//! answers from its stdout. The supervisor stops every child in order when that pipe closes
//! (the plane is dropped, the test process exits, panics or is SIGKILLed) or on
//! SIGTERM/SIGINT/SIGHUP. Each child also runs under `setpriv --pdeathsig KILL`, so even a
//! SIGKILLed supervisor leaves nothing behind, and in a process group of its own, so a
//! Ctrl-C in a terminal reaches only the supervisor. `pids.json` in the state dir lists the
//! live children; the next start in that dir (and `hearth-plane down`) kills what a dead
//! supervisor left, after checking each pid still runs the recorded executable.
//!
//! # Isolation model
//!
//! Starting a plane takes tens of seconds, so the tests of one test binary share one plane,
//! started lazily by [`ControlPlane::shared`] (a process-wide `OnceCell`; it dies with the
//! test process). Tests run in parallel on it, and stay apart by construction:
//! - **Namespaced and cluster-scoped Hearth/Kueue objects**: each test calls
//!   [`ControlPlane::isolated`] and works only in its [`Scope`]: namespaces `hearth-<id>`,
//!   `secrets-<id>`, `exec-<id>` (labeled `fournos.dev/queue-access=true`), a ClusterQueue
//!   `cq-<id>` (namespace selector on that label, no flavors) and a LocalQueue
//!   `fournos-queue` in `exec-<id>` pointing at it. Cluster names come from
//!   [`Isolated::cluster`] (`<base>-<id>`), so ResourceFlavors, Secrets and sentinels never
//!   collide. Controllers under test get the scope through [`Scope::controller_env`]. The
//!   base scope (`hearth`, `psap-secrets`, `psap-automation`, `fournos-queue`) belongs to
//!   `hearth-plane up` and to tests that run alone on a plane of their own.
//! - **Targets** are read-only for shared use: any test may read nodes and use the
//!   `hearth-node-reader` kubeconfig. A test that changes a target (adds nodes, stops the
//!   apiserver, revokes the shared token) must use a target of its own from
//!   [`ControlPlane::add_target`]; to revoke credentials, it issues its own ServiceAccount's
//!   with [`Target::issue_node_reader`] and revokes that.
//! - The `<id>` contains the test name and a run token, so reruns against a long-lived plane
//!   (`HEARTH_E2E_PLANE_DIR` pointing at `hearth-plane up`'s state dir) do not collide with
//!   leftovers: without a controller manager (a plane runs one only when asked,
//!   [`PlaneOptions::controller_manager`]) namespaces never finish deleting, so tests do
//!   not clean up namespaces; a test plane is discarded as a whole.
//! - A test that must own the whole plane (tear-down, base scope) starts its own with
//!   [`ControlPlane::start`], in a test binary of its own.
//!
//! # Hearth's controllers
//!
//! `hearth-plane run --hearth-bin-dir DIR` starts the three controllers for the base scope.
//! Tests start their own for their scope with [`ControlPlane::start_controller`] (binary
//! from [`plane::hearth_binary`], environment from [`Scope::controller_env`]); they run as
//! children of the supervisor, so they die with the plane, and
//! [`ControlPlane::kill_controller`] crashes one on purpose. Controllers get the admin
//! kubeconfig, `HEARTH_ADMIN_ADDR` on a free port (readiness: its `/readyz`),
//! `HEARTH_SENTINEL=workload` and `HEARTH_LOCAL_QUEUE_NAME=fournos-queue`.
//!
//! # Environment
//!
//! [`ControlPlane::shared`] reads [`layout::env`]: `HEARTH_E2E_PLANE_DIR` (attach to a running
//! `hearth-plane up` instead of starting a plane), `HEARTH_E2E_TARGETS`,
//! `HEARTH_E2E_WAIT_FOR_PODS_READY` (`default`, `off`, `30s`), `HEARTH_E2E_HEARTH_BIN_DIR`;
//! `HEARTH_E2E_BIN_DIR` skips `build.sh`; `HEARTH_PLANE_BIN` names the supervisor binary;
//! `HEARTH_E2E_NO_BUILD=1` skips the one `cargo build` of Hearth's binaries that
//! [`hearth::ensure_built`] does per test process.
//!
//! # The e2e kit
//!
//! Every test file uses the same pieces: [`hearth`] (the controller under test: built
//! once, started in a scope, metrics, log tail), [`process::until`] (the one polling loop,
//! with [`process::holds_for`] for "nothing happens"), [`world::World`] (a scope's APIs,
//! its controllers, and the one wait on a FournosCluster, [`world::World::wait_cluster`]),
//! [`invariants`] (shared checks, and the Kueue validity oracle
//! `hearth_api::kueue_validity` that the unit tests use too), [`lab`] (a test binary's
//! own plane; `LockLab` for the lock tests) and [`layout`] (the names of the plane's state
//! dir and environment, shared by the supervisor, the tests and `hearth-plane`).
//!
//! # Kueue webhooks, versions and root
//!
//! Kueue runs with its admission webhooks on, registered from the pinned module's
//! manifests (see [`kueue`]): a write Kueue's webhook refuses fails on the plane as it
//! would in a cluster. `HEARTH_E2E_KUEUE` chooses the Kueue version (`0.19`, the default,
//! or `0.16`); a test whose feature differs by version says so in one line
//! ([`kueue::KueueVersion`]). Kueue insists on reading `/etc/kueue/metrics/certs/tls.{crt,key}`; the
//! harness writes a pair there when missing, which needs root (or that directory made
//! writable once).

pub mod apiserver;
pub mod bench;
pub mod bench_peer;
pub mod bench_watch;
pub mod blackhole;
pub mod certs;
pub mod chart;
pub mod controller_manager;
pub mod discovery;
pub mod docs;
pub mod downstream;
pub mod error;
pub mod etcd;
pub mod fixtures;
pub mod fleet;
pub mod fournos;
pub mod fournos_lab;
pub mod fournos_real;
pub mod hearth;
pub mod hearth_py;
pub mod hostile;
pub mod hostile_target;
pub mod invariants;
pub mod kubeconfig;
pub mod kueue;
pub mod kueue_sync;
pub mod lab;
pub mod layout;
pub mod node_reader;
pub mod objects;
pub mod otlp;
pub mod peers;
pub mod plane;
pub mod pods_ready;
pub mod process;
pub mod protocol;
pub mod reaction;
pub mod release;
pub mod resources;
pub mod supervisor;
pub mod takeover;
pub mod tools;
pub mod world;

pub use blackhole::BlackHole;
pub use error::{PlaneError, Result};
pub use fixtures::Scope;
pub use fleet::{FLEET, GpuVendor, Gpus, NodeSpec, TargetFleet};
pub use hostile_target::{Answer, Asked, HostileTarget};
pub use plane::{ControlPlane, Isolated, PlaneOptions, Target};
pub use pods_ready::WaitForPodsReady;
pub use protocol::PlaneState;

/// Logging of the e2e tools (`hearth-bench`, `hearth-chaos`): warnings and worse on stderr,
/// unless `RUST_LOG` asks for more; what they report goes to stdout and their result files.
pub fn init_tool_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
}
