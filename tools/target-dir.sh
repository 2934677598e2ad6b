#!/usr/bin/env bash
# Prints cargo's target directory for this workspace: target/ in the checkout, or wherever
# CARGO_TARGET_DIR (or a cargo config's build.target-dir) puts it, e.g. the cache that
# .ci/run keeps across clones. Scripts and recipes find built binaries through this,
# never through a literal target/.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo metadata --no-deps --format-version 1 \
    | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p'
