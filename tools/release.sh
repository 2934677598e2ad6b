#!/usr/bin/env bash
# `just release`: one folder, dist/<version>/ (HEARTH_RELEASE_DIR overrides), holding
# everything a release page serves (docs/release.md lists it):
#   hearth-<controller>-<version>.oci.tar   the three images (podman save --format oci-archive)
#   hearth-<version>.tgz                    the Helm chart (helm package), CRD included
#   kubectl-fournos-<version>-<os>-<arch>   the plugin's release binary
#   kubectl-fournos-<version>-<os>-<arch>.tar.gz   the same binary and LICENSE, for krew
#   fournos.yaml                            the krew plugin manifest (sha256 of that archive)
#   SHA256SUMS                              sha256sum -c SHA256SUMS checks every file above
#
# The version is the workspace's (Cargo.toml); tools/versions.sh refuses the release when
# the chart, a crate, a binary's --version or an image's label says another.
# The images are the ones `just images` built for this commit (their revision label is
# HEAD's), and are built here only when they are not; kubectl-fournos comes from the same
# cargo build as the images' binaries (their builder stage, which tools/images.sh writes
# out to <target dir>/images), so nothing is compiled again.
# HEARTH_RELEASE_URL: where the release page will serve the files (the krew manifest's
# uri); HEARTH_HOMEPAGE: the project's page. Both default to placeholders.
set -euo pipefail
cd "$(dirname "$0")/.."
podman=(podman --storage-driver "${HEARTH_PODMAN_STORAGE_DRIVER:-vfs}")
controllers=(hearth-discovery hearth-kueue-sync hearth-lock-manager)

version=$(tools/versions.sh)
revision=$(tools/revision.sh)
homepage=${HEARTH_HOMEPAGE:-https://github.com/hearth-dev/hearth}
url=${HEARTH_RELEASE_URL:-$homepage/releases/download/v$version}
out=${HEARTH_RELEASE_DIR:-dist/$version}
case $revision in
    unknown | *-dirty) echo "release: WARNING: revision $revision: this is not the release of a commit" >&2 ;;
esac

stale=""
for bin in "${controllers[@]}"; do
    labelled=$("${podman[@]}" image inspect --format \
        '{{index .Labels "org.opencontainers.image.revision"}}' "localhost/$bin:$version" 2>/dev/null || true)
    if [ "$labelled" != "$revision" ] || [ "$revision" = unknown ] || [[ $revision = *-dirty ]]; then
        stale="localhost/$bin:$version is of revision '${labelled:-none}', not $revision"
        break
    fi
done
if [ -n "$stale" ]; then
    echo "release: $stale: building the images (tools/images.sh)"
    tools/images.sh
else
    echo "release: reusing the images of $revision (just images)"
fi
release_dir="$(tools/target-dir.sh)/images"
if [ "$(cat "$release_dir/REVISION" 2>/dev/null)" != "$revision" ]; then
    echo "release: $release_dir is not of revision $revision: building the images (tools/images.sh)"
    tools/images.sh
fi
tools/versions.sh --binaries "$release_dir" --images >/dev/null

host=$(rustc -vV | sed -n 's/^host: //p')
case $host in
    x86_64-*) arch=amd64 ;;
    aarch64-*) arch=arm64 ;;
    *) echo "release: no krew arch for host $host" >&2; exit 1 ;;
esac
case $host in
    *-linux-*) os=linux ;;
    *-apple-darwin) os=darwin ;;
    *) echo "release: no krew os for host $host" >&2; exit 1 ;;
esac

rm -rf "$out"
mkdir -p "$out"
for bin in "${controllers[@]}"; do
    "${podman[@]}" save --quiet --format oci-archive --output "$out/$bin-$version.oci.tar" \
        "localhost/$bin:$version"
done

helm=${HELM:-$(e2e/tools/build.sh)/helm}
"$helm" package charts/hearth --destination "$out" >/dev/null
chart=$out/hearth-$version.tgz
tar -tzf "$chart" | grep -x 'hearth/crds/fournosclusters.yaml' >/dev/null \
    || { echo "release: $chart holds no crds/fournosclusters.yaml" >&2; exit 1; }

# Every file in the archive is root's and dated by the commit, so the same binary always
# gives the same archive (and the same sha256 in the krew manifest).
plugin=kubectl-fournos-$version-$os-$arch
cp "$release_dir/kubectl-fournos" "$out/$plugin"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp "$release_dir/kubectl-fournos" LICENSE "$stage/"
chmod 0755 "$stage/kubectl-fournos"
chmod 0644 "$stage/LICENSE"
epoch=$(git log -1 --format=%ct 2>/dev/null || echo 0)
tar -C "$stage" --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
    -cf - kubectl-fournos LICENSE | gzip -9n >"$out/$plugin.tar.gz"
sha=$(sha256sum "$out/$plugin.tar.gz" | cut -d' ' -f1)
cat >"$out/fournos.yaml" <<YAML
# krew plugin manifest (krew-index: plugins/fournos.yaml). Try it before publishing:
#   kubectl krew install --manifest=fournos.yaml --archive=$plugin.tar.gz
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: fournos
spec:
  version: v$version
  homepage: $homepage
  shortDescription: Lock, unlock and inspect FournosClusters
  description: |
    kubectl fournos locks a GPU cluster of the Fournos fleet for a person, unlocks it,
    and shows the clusters' status and why one is not ready (Hearth's FournosClusters).
    It reads and patches through your own kubeconfig and RBAC.
  platforms:
    - selector:
        matchLabels:
          os: $os
          arch: $arch
      uri: $url/$plugin.tar.gz
      sha256: "$sha"
      bin: kubectl-fournos
      files:
        - from: kubectl-fournos
          to: .
        - from: LICENSE
          to: .
YAML

(
    cd "$out"
    files=(*)
    sha256sum -- "${files[@]}" >SHA256SUMS.tmp
    mv SHA256SUMS.tmp SHA256SUMS
    sha256sum --quiet -c SHA256SUMS
)
echo "release: $out ($version, revision $revision), sums verified:"
(cd "$out" && for f in *; do printf '  %10s  %s\n' "$(du -k --apparent-size "$f" | cut -f1)K" "$f"; done)
