# Hearth development recipes. `just --list` shows them; `./dev <recipe>` runs one
# on a fresh machine (it installs `just` first).

set shell := ["bash", "-euo", "pipefail", "-c"]

# Show the recipes.
default:
    @just --list

# Build every crate (debug).
build:
    cargo build --workspace --all-targets

# Build the pinned control-plane binaries (kube-apiserver, kube-controller-manager, etcd, kubectl, Kueue, helm, promtool) into ~/.cache/hearth-e2e.
tools:
    e2e/tools/build.sh

# Check formatting, clippy (warnings as errors), the toolchain pin and the supply chain.
lint: toolchain deny
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings

# Check the code's shape: files of at most 1,000 lines, controller functions of at most 80, no import circle or upward import inside a crate (`--report` only counts).
structure *ARGS:
    python3 tools/structure.py {{ARGS}}

# Check that rust-toolchain.toml's channel and Cargo.toml's rust-version name the same release.
toolchain:
    #!/usr/bin/env bash
    set -euo pipefail
    channel="$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)"
    msrv="$(sed -n 's/^rust-version *= *"\(.*\)"/\1/p' Cargo.toml)"
    if [ "${channel%.0}" != "${msrv%.0}" ]; then
        echo "rust-toolchain.toml pins $channel but Cargo.toml says rust-version = $msrv: make them agree" >&2
        exit 1
    fi
    echo "toolchain: $channel (rust-version $msrv)"

# RustSec advisories come from the pinned snapshot in ../shared/advisory-db
# (HEARTH_ADVISORY_DB) or a fetched copy, with the snapshot's date; one line says so when
# there is no database.
# Check the supply chain (deny.toml): licenses, banned crates, sources and RustSec advisories.
deny:
    command -v cargo-deny >/dev/null || cargo install --locked cargo-deny@0.20.2
    cargo deny check licenses bans sources
    tools/advisories.sh

# Fetch or refresh the RustSec advisory database into target/advisory-dbs (needs github.com).
deny-fetch:
    cargo deny fetch db

# Regenerate manifests/crd.yaml and manifests/reservation-crd.yaml from the Rust types.
crdgen:
    cargo run -q -p hearth-api --bin crdgen > manifests/crd.yaml
    cargo run -q -p hearth-api --bin crdgen reservation > manifests/reservation-crd.yaml

# Regenerate every generated manifest: the CRD, its copy in the chart, and the plain install.
manifests: crdgen tools
    cp manifests/crd.yaml charts/hearth/crds/fournosclusters.yaml
    cp manifests/reservation-crd.yaml charts/hearth/crds/reservations.yaml
    HELM="$(e2e/tools/build.sh)/helm" manifests/render.sh > manifests/install.yaml

# Run the unit tests only (no control plane).
unit:
    cargo test --workspace --exclude hearth-e2e

# The e2e tests run the controllers' binaries, so every binary is built first;
# e2e/tests/images.rs runs the images built here, and e2e/tests/release.rs checks the
# release folder; both must (not skip) when podman is installed. The tests that need the
# peers in ../shared/peers (HEARTH_PEERS_DIR) must run when that folder is there.
# Run everything CI runs: lint, images, unit and end-to-end tests, with each phase's time.
test:
    #!/usr/bin/env bash
    set -euo pipefail
    phase() {
        local name=$1 start=$SECONDS rc=0
        shift
        "$@" || rc=$?
        echo "phase $name: $((SECONDS - start))s$([ "$rc" = 0 ] || echo " (failed: exit $rc)")"
        return "$rc"
    }
    phase lint just lint
    # The images compile in their own builder stage (release, a cache of its own), so they
    # need nothing of the phases below: they build alongside tools and build, whose Go
    # module downloads and single-threaded links leave a core idle (so does the images'
    # fat-LTO link). Their lines are printed when they are waited for, before release.
    images_pid=""
    if command -v podman >/dev/null; then
        images_log=$(mktemp)
        phase images just images >"$images_log" 2>&1 &
        images_pid=$!
    else
        echo "phase images: skipped: podman is not installed (./dev installs it where it can)"
        echo "phase release: skipped: podman is not installed"
    fi
    phase tools just tools
    phase workflows just workflows
    # Every target at once, so cargo resolves features as `cargo test --workspace` does
    # (hearth-runtime's tests turn on tokio's test-util): the tests phase then compiles
    # nothing. Built for the binaries alone, everything on tokio was compiled twice, and a
    # third time by the e2e tests' own build of the controllers, which the binaries just
    # built make unnecessary (HEARTH_E2E_NO_BUILD).
    # A run that has the peers (the real Fournos and Python Hearth) must run their tests:
    # one missing or misplaced then fails them instead of skipping (e2e/src/peers.rs).
    if [ -d "${HEARTH_PEERS_DIR:-../shared/peers}" ]; then
        export HEARTH_E2E_REQUIRE_PEERS=1
    else
        echo "peers: ${HEARTH_PEERS_DIR:-../shared/peers} is not there: the tests that need the real Fournos or Python Hearth skip"
    fi
    phase build cargo build --workspace --all-targets
    if [ -n "$images_pid" ]; then
        images_rc=0
        wait "$images_pid" || images_rc=$?
        sed 's/^phase images: .*/& (alongside tools and build)/' "$images_log"
        rm -f "$images_log"
        [ "$images_rc" = 0 ] || exit "$images_rc"
        # The image test runs them under chroot, which needs root.
        if [ "$(id -u)" = 0 ]; then export HEARTH_E2E_REQUIRE_IMAGES=1; fi
        phase release just release
        export HEARTH_E2E_REQUIRE_RELEASE=1
    fi
    HEARTH_E2E_BIN_DIR="$(e2e/tools/build.sh)"
    export HEARTH_E2E_BIN_DIR HEARTH_E2E_NO_BUILD=1
    # Every test binary, three at a time (tools/tests.sh says why), then the doc tests.
    phase tests tools/tests.sh

# The e2e files of quota, locks, cordon, pools and the real Fournos: the ones run on every
# Kueue version (docs/support.md).
kueue_tests := "kueue_sync kueue_sync_places lock_manager lock_holds lock_trust cordon pools fournos_real fournos_attacks fournos_cordon kueue_facts"

# Run the Kueue-version tests on Kueue VERSION (0.16 or 0.19; HEARTH_E2E_KUEUE), webhooks on.
test-kueue version:
    #!/usr/bin/env bash
    set -euo pipefail
    export HEARTH_E2E_KUEUE={{version}}
    if [ -d "${HEARTH_PEERS_DIR:-../shared/peers}" ]; then export HEARTH_E2E_REQUIRE_PEERS=1; fi
    cargo build --workspace --all-targets
    HEARTH_E2E_BIN_DIR="$(e2e/tools/build.sh)"
    export HEARTH_E2E_BIN_DIR HEARTH_E2E_NO_BUILD=1
    HEARTH_TESTS="{{kueue_tests}}" tools/tests.sh

# Built with podman from Containerfile.discovery, .kueue and .lock, as a pipeline builds
# them (a Rust builder stage, then the base and one binary; tools/images.sh), from
# HEARTH_BUILDER_IMAGE and HEARTH_BASE_IMAGE, by default made from Debian's archive
# (tools/builder-image.sh, tools/base-image.sh) where no registry is reachable. Prints
# each image's size.
# Build the three controller images, localhost/<binary>:<workspace version>.
images:
    tools/images.sh

# Checks that the versions agree (tools/versions.sh), then writes dist/<version>/: the three
# images as OCI archives (those `just images` built for this commit), the packaged chart,
# kubectl-fournos and its krew archive and manifest, SHA256SUMS (docs/release.md).
# Write the release folder: images, chart, plugin and krew manifest, with SHA-256 sums.
release:
    tools/release.sh

# Remake the Debian-made base image (e.g. for the archive's security updates).
base-image:
    tools/base-image.sh

# Remake the Debian-made Rust builder image (after a toolchain pin change).
builder-image:
    tools/builder-image.sh

# actionlint is built from its pinned Go module with the other tools (e2e/tools/build.sh).
# Check the GitHub Actions workflows (.github/workflows) with actionlint.
workflows:
    "$(e2e/tools/build.sh)/actionlint"

# Run the end-to-end tests only.
e2e: tools
    cargo build --workspace --bins
    HEARTH_E2E_BIN_DIR="$(e2e/tools/build.sh)" cargo test -p hearth-e2e --no-fail-fast

# `just up --fournos` also runs the real Fournos (../shared/peers/fournos) with fournosjob
# sentinels. Cold: builds the pinned Go tools and the workspace first.
# Start the local control plane, an emulated GPU fleet and Hearth (state in .hearth/plane).
up *flags: tools
    cargo build --workspace --bins
    bin="$(tools/target-dir.sh)/debug" && HEARTH_E2E_BIN_DIR="$(e2e/tools/build.sh)" \
        "$bin/hearth-plane" up --state-dir .hearth/plane --hearth-bin-dir "$bin" {{flags}}

# Stop everything `just up` started.
down:
    "$(tools/target-dir.sh)/debug/hearth-plane" down --state-dir .hearth/plane

# One holds a copy of the Secret's data. Stop the Python Hearth first. `--dry-run` only
# reports; other flags as `kubectl fournos migrate scrub-secrets` takes them.
# Migration: remove the kopf annotations the Python Hearth left on kubeconfig Secrets.
scrub-secrets *flags:
    cargo run -q -p kubectl-fournos -- migrate scrub-secrets {{flags}}

# The finalizer would keep a deleted cluster Terminating for good. `--dry-run` only reports.
# Migration: remove the kopf finalizer and annotations the Python Hearth left on FournosClusters.
scrub-clusters *flags:
    cargo run -q -p kubectl-fournos -- migrate scrub-clusters {{flags}}

# Installs nightly and cargo-fuzz if missing. Crashes land in fuzz/artifacts/<target>/;
# the corpus grows in fuzz/corpus/<target>/ (see fuzz/README.md).
# Fuzz kubeconfig validation, GPU short names and node GPU counting, `seconds` per target.
fuzz seconds="60":
    rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
    command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
    cd fuzz && cargo +nightly fuzz build
    cd fuzz && for target in kubeconfig_validate kubeconfig_secrets short_name node_gpus; do \
        mkdir -p "corpus/$target" "seeds/$target"; \
        dict=""; [ "$target" = kubeconfig_validate ] && dict="-dict=kubeconfig.dict"; \
        echo "== $target: {{seconds}}s"; \
        cargo +nightly fuzz run "$target" "corpus/$target" "seeds/$target" -- \
            -max_total_time={{seconds}} -rss_limit_mb=4096 -timeout=10 -print_final_stats=1 $dict; \
    done

# Release builds, production intervals: onboarding and lock latency, memory/CPU at 1/10/100
# and `scale` FournosClusters, idle API load from the management apiserver's audit log,
# the scale ceiling. A full run (idle 600 s, scale 1000) takes about 15 minutes on 2 cores.
# Side by side with the Python Hearth when ../shared/peers/hearth-py is there
# (HEARTH_PEERS_DIR). Defaults take about 14 minutes after the build (two 300 s idle
# windows); any hearth-bench flag may follow, e.g. `just bench --py-sizes 1,10,100`.
# Benchmark Hearth on the local control plane into bench-results/<date>/SUMMARY.md.
bench *flags: tools
    cargo build --release --workspace --bins
    HEARTH_E2E_MANAGEMENT_AUDIT=1 HEARTH_E2E_BIN_DIR="$(e2e/tools/build.sh)" \
        "$(tools/target-dir.sh)/release/hearth-bench" {{flags}}

# 100 clusters are onboarded, 30 locked/unlocked and 20 offboarded; then the invariants
# are checked from the live API. Takes a few minutes.
# Chaos: SIGKILL the controllers while clusters come and go (bench-results/<date>/CHAOS.md).
chaos: tools
    cargo build --release --workspace --bins
    HEARTH_E2E_BIN_DIR="$(e2e/tools/build.sh)" "$(tools/target-dir.sh)/release/hearth-chaos"
