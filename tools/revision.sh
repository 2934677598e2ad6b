#!/usr/bin/env bash
# The revision the images are labelled with (org.opencontainers.image.revision): HEAD's
# commit, with -dirty when tracked files differ from it; "unknown" outside git.
set -euo pipefail
cd "$(dirname "$0")/.."
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ "$revision" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    revision="$revision-dirty"
fi
echo "$revision"
