#!/usr/bin/env bash
# The one version of a Hearth release is Cargo.toml's [workspace.package] version. This
# checks that everything else carrying a version says the same, prints the version on
# stdout, and exits 1 naming every disagreement (`just release` refuses to build then):
# - every workspace member takes `version.workspace = true` (so `--version` of each binary,
#   which clap takes from the crate's version, is the workspace's);
# - the chart's `version` and `appVersion`, and no image tag in values.yaml (the images'
#   tag defaults to appVersion; tools/images.sh tags and labels them with the workspace
#   version);
# - with `--binaries DIR`: DIR/<binary> --version for the three controllers and the plugin;
# - with `--images`: localhost/<controller>:<version> exists, labelled with that version.
set -euo pipefail
cd "$(dirname "$0")/.."
binaries_dir=""
images=false
while [ $# -gt 0 ]; do
    case $1 in
        --binaries) binaries_dir=$2; shift 2 ;;
        --images) images=true; shift ;;
        *) echo "versions: unknown argument $1" >&2; exit 2 ;;
    esac
done

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
[ -n "$version" ] || { echo "versions: no [workspace.package] version in Cargo.toml" >&2; exit 1; }
problems=()
disagree() { problems+=("$1"); }

for manifest in crates/*/Cargo.toml e2e/Cargo.toml; do
    grep -Eq '^version(\.workspace *= *true| *= *\{ *workspace *= *true *\})' "$manifest" \
        || disagree "$manifest does not take the workspace version (version.workspace = true)"
done

chart=charts/hearth/Chart.yaml
for key in version appVersion; do
    value=$(sed -n "s/^$key: *\"\{0,1\}\([^\"]*\)\"\{0,1\} *$/\1/p" "$chart")
    [ "$value" = "$version" ] || disagree "$chart: $key is '$value', Cargo.toml's workspace version is $version"
done
# An image tag set in values.yaml would pin the images to another version than the chart's.
while read -r line; do
    disagree "charts/hearth/values.yaml: '$line' (leave tag empty: it defaults to appVersion)"
done < <(grep -E '^ *tag: *[^ #"]|^ *tag: *"[^"]' charts/hearth/values.yaml || true)

if [ -n "$binaries_dir" ]; then
    for bin in hearth-discovery hearth-kueue-sync hearth-lock-manager kubectl-fournos; do
        said=$("$binaries_dir/$bin" --version 2>&1) || said="(failed: $said)"
        [ "$said" = "$bin $version" ] \
            || disagree "$binaries_dir/$bin --version says '$said', want '$bin $version'"
    done
fi

if $images; then
    podman=(podman --storage-driver "${HEARTH_PODMAN_STORAGE_DRIVER:-vfs}")
    for bin in hearth-discovery hearth-kueue-sync hearth-lock-manager; do
        label=$("${podman[@]}" image inspect --format \
            '{{index .Labels "org.opencontainers.image.version"}}' "localhost/$bin:$version" 2>&1) \
            || { disagree "localhost/$bin:$version: no such image (just images)"; continue; }
        [ "$label" = "$version" ] \
            || disagree "localhost/$bin:$version is labelled org.opencontainers.image.version=$label"
    done
fi

if [ "${#problems[@]}" -gt 0 ]; then
    printf 'versions: %s\n' "${problems[@]}" >&2
    echo "versions: ${#problems[@]} disagreement(s) with Cargo.toml's workspace version $version" >&2
    exit 1
fi
echo "$version"
