#!/usr/bin/env bash
# Builds the three controller images with podman (`just images`): release binaries on the
# host, the shared runtime layer (Containerfile), then one image per controller
# (Containerfile.discovery, .kueue, .lock), tagged localhost/<binary>:<workspace version>.
#
# HEARTH_BASE_IMAGE picks the base: by default localhost/hearth-base:bookworm, made from
# Debian's archive by tools/base-image.sh when podman does not have it yet (no registry
# needed); where a registry is reachable, pass the production base, e.g.
# HEARTH_BASE_IMAGE=gcr.io/distroless/cc-debian12@sha256:<digest>.
# podman runs with the vfs storage driver and chroot isolation, which work unprivileged
# and inside containers (HEARTH_PODMAN_STORAGE_DRIVER overrides the driver).
set -euo pipefail
cd "$(dirname "$0")/.."
podman=(podman --storage-driver "${HEARTH_PODMAN_STORAGE_DRIVER:-vfs}")
binaries=(hearth-discovery hearth-kueue-sync hearth-lock-manager)
declare -A containerfile=(
    [hearth-discovery]=Containerfile.discovery
    [hearth-kueue-sync]=Containerfile.kueue
    [hearth-lock-manager]=Containerfile.lock
)

# The workspace version, once the chart and the crates agree with it.
version=$(tools/versions.sh)
revision=$(tools/revision.sh)
source=${HEARTH_IMAGE_SOURCE:-$(git remote get-url origin 2>/dev/null || echo unknown)}

base=${HEARTH_BASE_IMAGE:-localhost/hearth-base:bookworm}
if [ -z "${HEARTH_BASE_IMAGE:-}" ] && ! "${podman[@]}" image exists "$base"; then
    tools/base-image.sh "$base"
fi

release_dir=$(tools/release-binaries.sh)
# The Containerfiles COPY target/release/<binary> from the build context (the repository);
# with the target cache elsewhere (CARGO_TARGET_DIR, e.g. the one .ci/run keeps across
# clones), the binaries are copied there first.
if [ "$(realpath -m "$release_dir")" != "$(realpath -m target/release)" ]; then
    mkdir -p target/release
    for bin in "${binaries[@]}"; do cp -p "$release_dir/$bin" target/release/; done
fi

build() {
    "${podman[@]}" build --isolation chroot --quiet "$@" . >/dev/null
}
runtime="localhost/hearth-runtime:$version"
# The images these tags named before: removed below once nothing names them (vfs keeps a
# full copy of every layer, so old builds would fill the disk).
# Children before the runtime they were built on, which podman keeps while they exist.
tags=()
for bin in "${binaries[@]}"; do tags+=("localhost/$bin:$version"); done
tags+=("$runtime")
previous=()
for tag in "${tags[@]}"; do
    id=$("${podman[@]}" image inspect --format '{{.Id}}' "$tag" 2>/dev/null) && previous+=("$id")
done
build -f Containerfile -t "$runtime" --build-arg BASE_IMAGE="$base"
# The base by digest, whatever name it was given: an image built from a tag still says
# exactly what it was built on (OCI's base.name / base.digest annotations, as labels).
base_digest=$("${podman[@]}" image inspect --format '{{.Digest}}' "$base")
echo "images: base $base ($base_digest), version $version, revision $revision"
# As --label, not ARGs in a LABEL step, whose cached layer buildah reuses (see Containerfile).
labels=(
    --label "org.opencontainers.image.version=$version"
    --label "org.opencontainers.image.revision=$revision"
    --label "org.opencontainers.image.source=$source"
    --label "org.opencontainers.image.base.name=$base"
    --label "org.opencontainers.image.base.digest=$base_digest"
)
for bin in "${binaries[@]}"; do
    build -f "${containerfile[$bin]}" -t "localhost/$bin:$version" --build-arg RUNTIME_IMAGE="$runtime" "${labels[@]}"
    size=$("${podman[@]}" image inspect --format '{{.Size}}' "localhost/$bin:$version")
    printf 'images: localhost/%s:%s  %s MB  (%s)\n' "$bin" "$version" \
        "$(awk -v s="$size" 'BEGIN { printf "%.1f", s / 1000000 }')" "${containerfile[$bin]}"
done
for id in "${previous[@]}"; do
    if [ -z "$("${podman[@]}" image inspect --format '{{.RepoTags}}' "$id" 2>/dev/null | tr -d '[]')" ]; then
        "${podman[@]}" rmi "$id" >/dev/null 2>&1 || true
    fi
done
