#!/usr/bin/env bash
# Builds the three controller images with podman (`just images`), each from its own
# Containerfile exactly as a pipeline would (`podman build -f Containerfile.<x> .`: a Rust
# builder stage compiles, the final stage is the base plus one binary), tagged
# localhost/<binary>:<workspace version>. Then writes the builder stage's binaries (the
# controllers and kubectl-fournos, one cargo build) to <target dir>/images/, where
# tools/release.sh takes kubectl-fournos from: nothing shipped is compiled twice.
#
# HEARTH_BUILDER_IMAGE and HEARTH_BASE_IMAGE pick the stages' images (the Containerfiles'
# BUILDER_IMAGE and BASE_IMAGE). By default they are made from Debian's archive when
# podman does not have them yet (tools/builder-image.sh, tools/base-image.sh): no
# registry needed. Where one is reachable, pass e.g.
# HEARTH_BUILDER_IMAGE=docker.io/library/rust:1.95.0-bookworm
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
rust=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)

base=${HEARTH_BASE_IMAGE:-localhost/hearth-base:bookworm}
if [ -z "${HEARTH_BASE_IMAGE:-}" ] && ! "${podman[@]}" image exists "$base"; then
    tools/base-image.sh "$base"
fi
builder=${HEARTH_BUILDER_IMAGE:-localhost/hearth-rust:$rust-bookworm}
if [ -z "${HEARTH_BUILDER_IMAGE:-}" ] && ! "${podman[@]}" image exists "$builder"; then
    tools/builder-image.sh "$builder" >/dev/null
fi

build() {
    "${podman[@]}" build --isolation chroot --layers --quiet \
        --build-arg BUILDER_IMAGE="$builder" --build-arg BASE_IMAGE="$base" "$@" . >/dev/null
}
# The images these tags named before: removed below once nothing names them (vfs keeps a
# full copy of every layer, so old builds would fill the disk).
stage="localhost/hearth-build:$version"
tags=("$stage")
for bin in "${binaries[@]}"; do tags+=("localhost/$bin:$version"); done
previous=()
for tag in "${tags[@]}"; do
    id=$("${podman[@]}" image inspect --format '{{.Id}}' "$tag" 2>/dev/null) && previous+=("$id")
done
# The base by digest, whatever name it was given: an image built from a tag still says
# exactly what it was built on (OCI's base.name / base.digest annotations, as labels).
# A registry's base is pulled first, so that its digest is known before the build.
"${podman[@]}" image exists "$base" || "${podman[@]}" pull --quiet "$base" >/dev/null
base_digest=$("${podman[@]}" image inspect --format '{{.Digest}}' "$base")
echo "images: builder $builder, base $base ($base_digest), version $version, revision $revision"
# As --label, not ARGs in a LABEL step, whose cached layer buildah reuses (see the
# Containerfiles).
labels=(
    --label "org.opencontainers.image.version=$version"
    --label "org.opencontainers.image.revision=$revision"
    --label "org.opencontainers.image.source=$source"
    --label "org.opencontainers.image.base.name=$base"
    --label "org.opencontainers.image.base.digest=$base_digest"
)
start=$SECONDS
# The builder stage first, tagged: the three builds below find it in the layer cache.
build -f Containerfile.discovery --target builder -t "$stage" "${labels[@]}"
echo "images: builder stage compiled in $((SECONDS - start))s ($stage)"
for bin in "${binaries[@]}"; do
    build -f "${containerfile[$bin]}" -t "localhost/$bin:$version" "${labels[@]}"
    size=$("${podman[@]}" image inspect --format '{{.Size}}' "localhost/$bin:$version")
    printf 'images: localhost/%s:%s  %s MB  (%s)\n' "$bin" "$version" \
        "$(awk -v s="$size" 'BEGIN { printf "%.1f", s / 1000000 }')" "${containerfile[$bin]}"
done

# The builder stage's binaries, for the release folder (tools/release.sh), with the
# revision they were built from.
out="$(tools/target-dir.sh)/images"
rm -rf "$out" && mkdir -p "$out"
container=$("${podman[@]}" create "$stage")
"${podman[@]}" cp "$container:/out/." "$out/"
"${podman[@]}" rm "$container" >/dev/null
echo "$revision" >"$out/REVISION"
# The builder stage holds the toolchain and the sources (with vfs, a full copy per layer):
# nothing needs it once its binaries are out, and the next commit's sources make a new one.
"${podman[@]}" rmi "$stage" >/dev/null

for id in "${previous[@]}"; do
    if [ -z "$("${podman[@]}" image inspect --format '{{.RepoTags}}' "$id" 2>/dev/null | tr -d '[]')" ]; then
        "${podman[@]}" rmi "$id" >/dev/null 2>&1 || true
    fi
done
