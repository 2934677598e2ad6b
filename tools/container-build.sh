#!/usr/bin/env bash
# The images' builder stage (Containerfile.discovery, .kueue, .lock): compiles the three
# controllers and kubectl-fournos in one cargo invocation and copies them to $1. One
# invocation for all four means one feature resolution and one set of artifacts, so the
# three Containerfiles run the very same step (buildah reuses its layer after the first)
# and `just release` takes kubectl-fournos from it. target/ and cargo's registry are cache mounts: kept by podman between builds, so a
# source change recompiles only Hearth's own crates.
set -euo pipefail
out=${1:?usage: container-build.sh OUT_DIR}
packages=()
for bin in hearth-discovery hearth-kueue-sync hearth-lock-manager kubectl-fournos; do
    packages+=(-p "$bin" --bin "$bin")
done
cargo build --release --locked "${packages[@]}"
mkdir -p "$out"
for bin in hearth-discovery hearth-kueue-sync hearth-lock-manager kubectl-fournos; do
    cp target/release/"$bin" "$out/"
done
