#!/usr/bin/env bash
# RustSec advisories for Cargo.lock, offline. `just deny` runs this.
#
# cargo-deny reads the database from a git checkout under deny.toml's `db-path`
# (target/advisory-dbs, in a directory named after a hash of the database's URL), and
# offline it refuses one whose last fetch is older than 90 days. The machines that run CI
# reach package registries but not GitHub, so the database comes from a pinned, dated
# snapshot folder (HEARTH_ADVISORY_DB, default ../shared/advisory-db): it becomes a
# throwaway git repository, and `cargo deny fetch` clones it into place through a git
# `insteadOf` rewrite of the upstream URL, so cargo-deny itself picks the directory.
# The snapshot's age is reported here, from its SNAPSHOT.md, and never fails the run: a
# stale database still finds every advisory it knows.
set -euo pipefail
cd "$(dirname "$0")/.."

snapshot=${HEARTH_ADVISORY_DB:-../shared/advisory-db}
upstream=https://github.com/RustSec/advisory-db
stale_days=90

if [ -f "$snapshot/SNAPSHOT.md" ]; then
    # SNAPSHOT.md's table row: | rustsec/advisory-db | <commit> | <YYYY-MM-DD> |
    row=$(grep -m1 '^| *rustsec/advisory-db *|' "$snapshot/SNAPSHOT.md" || true)
    commit=$(awk -F'|' '{gsub(/ /, "", $3); print $3}' <<<"$row")
    date=$(awk -F'|' '{gsub(/ /, "", $4); print $4}' <<<"$row")
    if ! date -u -d "$date" +%s >/dev/null 2>&1; then
        echo "deny: $snapshot/SNAPSHOT.md names no snapshot date (want a '| rustsec/advisory-db | <commit> | <YYYY-MM-DD> |' row)" >&2
        exit 1
    fi
    age=$((($(date -u +%s) - $(date -u -d "$date" +%s)) / 86400))
    freshness="$age days old"
    if [ "$age" -gt "$stale_days" ]; then
        freshness="$age days old: STALE (over $stale_days days), refresh $snapshot"
    fi
    echo "deny: RustSec advisory database snapshot of $date (upstream commit ${commit:0:12}, $freshness), from $snapshot"

    # The same files give the same commit (fixed author and dates), so a re-run fetches nothing new.
    repo="$PWD/target/advisory-db-snapshot"
    rm -rf "$repo"
    mkdir -p "$repo"
    cp -R "$snapshot/." "$repo/"
    chmod -R u+w "$repo"
    export GIT_AUTHOR_NAME=hearth GIT_AUTHOR_EMAIL=hearth@localhost
    export GIT_COMMITTER_NAME=hearth GIT_COMMITTER_EMAIL=hearth@localhost
    export GIT_AUTHOR_DATE="${date}T00:00:00Z" GIT_COMMITTER_DATE="${date}T00:00:00Z"
    git -C "$repo" init -q -b main
    git -C "$repo" add -A
    git -C "$repo" -c commit.gpgsign=false -c core.hooksPath=/dev/null commit -q -m "RustSec advisory-db snapshot $commit ($date)"
    GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0="url.file://$repo.insteadOf" GIT_CONFIG_VALUE_0="$upstream" \
        cargo deny fetch db
else
    # A copy `just deny-fetch` made; one this script made from a snapshot (committed by
    # hearth@localhost) does not count once the snapshot is gone.
    fetched=$(compgen -G "target/advisory-dbs/advisory-db-*" | head -n1 || true)
    committer=""
    [ -z "$fetched" ] || committer=$(git -C "$fetched" log -1 --format=%ce 2>/dev/null || true)
    if [ -z "$committer" ] || [ "$committer" = hearth@localhost ]; then
        echo "deny: advisories NOT checked: no RustSec database ($snapshot is absent and none was fetched; run 'just deny-fetch' where github.com is reachable)"
        exit 0
    fi
    echo "deny: RustSec advisory database fetched into $fetched, newest commit $(git -C "$fetched" log -1 --format=%cs)"
fi

# --offline keeps cargo-deny from fetching the database, and also keeps `cargo metadata`
# from downloading crates: every crate of Cargo.lock (all targets) must be here already.
cargo fetch --locked --quiet
# Diagnostics go to stderr; keep them, and say the verdict in one line.
if cargo deny --offline check advisories; then
    echo "deny: advisories ok"
else
    echo "deny: advisories FOUND (above): upgrade the crate, or add an ignore with a reason to deny.toml" >&2
    exit 1
fi
