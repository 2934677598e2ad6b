//! The command line.

use std::path::PathBuf;

use clap::Parser;
use serde::Serialize;

#[derive(Parser, Debug, Clone, Serialize)]
#[command(about = "Benchmarks Hearth on the local control plane")]
pub struct Args {
    /// Where SUMMARY.md and results.json go (default bench-results/<UTC date>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Onboarding batch sizes (clusters created at once).
    #[arg(long, value_delimiter = ',', default_value = "1,10,100")]
    pub sizes: Vec<usize>,
    /// Lock/unlock cycles measured on the batch of 10.
    #[arg(long, default_value_t = 20)]
    pub lock_samples: usize,
    /// Idle window for the API load, in seconds (on the batch of --idle-clusters); one
    /// discovery interval by default. 0 skips it.
    #[arg(long, default_value_t = 300)]
    pub idle_secs: u64,
    /// The onboarding batch that stays up for the idle window (one of --sizes).
    #[arg(long, default_value_t = 10)]
    pub idle_clusters: usize,
    /// Batch sizes run on the real Python Hearth too, when it is in the peers folder
    /// (HEARTH_PEERS_DIR, default ../shared/peers); 0 skips it.
    #[arg(long, value_delimiter = ',', default_value = "1,10")]
    pub py_sizes: Vec<usize>,
    /// How long each Python batch may take to get its quota, in seconds; what it has by
    /// then is reported (it may never get there).
    #[arg(long, default_value_t = 120)]
    pub py_timeout_secs: u64,
    /// Lock/unlock cycles measured on the first Python batch, with the real Fournos
    /// (HEARTH_PEERS_DIR/fournos) turning its sentinels into Workloads; 0 skips it.
    #[arg(long, default_value_t = 5)]
    pub py_lock_samples: usize,
    /// FournosClusters in the scale phase (0 skips it).
    #[arg(long, default_value_t = 1000)]
    pub scale: usize,
    /// Longest any phase may take to converge, in seconds.
    #[arg(long, default_value_t = 1200)]
    pub timeout_secs: u64,
    /// Measure only lock-manager's reaction (see `hearth_e2e::reaction`): N sentinel
    /// evictions and N deletions under a held lock, each timed from the write to
    /// `locked` going false; written to LOCK-REACTION.md and lock-reaction.json in --out.
    /// 0 runs the other phases.
    #[arg(long, default_value_t = 0)]
    pub lock_reaction: usize,
}
