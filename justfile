# Hearth development recipes. `just --list` shows them; `./dev <recipe>` runs one
# on a fresh machine (it installs `just` first).

set shell := ["bash", "-euo", "pipefail", "-c"]

# Show the recipes.
default:
    @just --list

# Build every crate (debug).
build:
    cargo build --workspace --all-targets

# Build the pinned control-plane binaries (kube-apiserver, etcd, kubectl, Kueue, helm) into ~/.cache/hearth-e2e.
tools:
    e2e/tools/build.sh

# Formatting and clippy with warnings as errors.
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings

# Regenerate manifests/crd.yaml from the Rust types.
crdgen:
    cargo run -q -p hearth-api --bin crdgen > manifests/crd.yaml

# Regenerate every generated manifest: the CRD, its copy in the chart, and the plain install.
manifests: crdgen tools
    cp manifests/crd.yaml charts/hearth/crds/fournosclusters.yaml
    HELM="$(e2e/tools/build.sh)/helm" manifests/render.sh > manifests/install.yaml

# Unit tests only (no control plane).
unit:
    cargo test --workspace --exclude hearth-e2e

# Everything CI runs: lint, unit tests, and the end-to-end tests on a real control plane.
# The e2e tests run the controllers' binaries, so every binary is built first.
test: lint tools
    cargo build --workspace --bins
    HEARTH_E2E_BIN_DIR="$(e2e/tools/build.sh)" cargo test --workspace --no-fail-fast

# End-to-end tests only.
e2e: tools
    cargo build --workspace --bins
    HEARTH_E2E_BIN_DIR="$(e2e/tools/build.sh)" cargo test -p hearth-e2e --no-fail-fast

# Start the local control plane, the emulated GPU fleet and the three controllers (state in .hearth/plane).
up: tools
    cargo build --workspace --bins
    HEARTH_E2E_BIN_DIR="$(e2e/tools/build.sh)" target/debug/hearth-plane up --state-dir .hearth/plane --hearth-bin-dir target/debug

# Stop everything `just up` started.
down:
    target/debug/hearth-plane down --state-dir .hearth/plane
