#!/usr/bin/env bash
# Builds the release binaries that everything shipped is made from: the three controllers
# (the images, tools/images.sh) and kubectl-fournos (the release folder, tools/release.sh),
# in one cargo invocation, so both share one feature resolution and one set of artifacts:
# `just release` after `just images` finds them fresh and compiles nothing. Prints the
# directory that holds them (under cargo's target directory, wherever that is).
set -euo pipefail
cd "$(dirname "$0")/.."
packages=()
for bin in hearth-discovery hearth-kueue-sync hearth-lock-manager kubectl-fournos; do
    packages+=(-p "$bin" --bin "$bin")
done
cargo build --release --locked "${packages[@]}" >&2
echo "$(tools/target-dir.sh)/release"
