#!/usr/bin/env bash
# Makes the images' Rust builder stage (BUILDER_IMAGE in Containerfile.discovery, .kueue,
# .lock) for machines that reach Debian's archive and crates.io but no container registry
# (CI here): Debian bookworm (a shell, gcc and libc6-dev as the linker, the CA bundle for
# crates.io) with the Rust toolchain that rust-toolchain.toml pins, copied from this
# machine's rustup (CI machines have exactly that release installed and cannot download
# another). It stands in for docker.io/library/rust:<version>-bookworm, the Containerfiles'
# default, where a pipeline reaches a registry: cargo and rustc on PATH, CARGO_HOME
# /usr/local/cargo. Imports it into podman as $1 (default
# localhost/hearth-rust:<version>-bookworm) and prints that name.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)
image=${1:-localhost/hearth-rust:$version-bookworm}
mirror=${HEARTH_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${HEARTH_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
podman=(podman --storage-driver "${HEARTH_PODMAN_STORAGE_DRIVER:-vfs}")

# The pinned release's own directory (rustup links `<version>-<host>` to stable where
# ./dev named stable so), with rustc's and cargo's shared libraries and the host's std.
sysroot=$(rustc +"$version" --print sysroot 2>/dev/null || rustc --print sysroot)
have=$("$sysroot/bin/rustc" --version | awk '{print $2}')
[ "$have" = "$version" ] \
    || { echo "builder-image: $sysroot holds rustc $have, rust-toolchain.toml pins $version" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# minbase: Debian's essential packages (a shell, coreutils) and apt, nothing else; package
# scripts run (mmdebstrap's root mode), so gcc's alternatives and the CA bundle are set up.
mmdebstrap --quiet --variant=minbase --include=gcc,libc6-dev,ca-certificates \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    bookworm "$work/root" \
    "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
    "deb $security bookworm-security main" </dev/null
root=$work/root
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin
# cargo in the builder fetches crates through whatever this machine's own trust store
# admits (here, a proxy with its own CA); Debian's bundle alone would refuse it. The stand-in
# is for this machine only: a registry's rust image brings its own.
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
mkdir -p "$root/usr/local/rust" "$root/usr/local/cargo"
cp -a "$sysroot/bin" "$sysroot/lib" "$root/usr/local/rust/"
# The Rust license and copyright texts travel with the toolchain, not its 800 MB of HTML.
mkdir -p "$root/usr/local/rust/share"
tar -C "$sysroot/share" --exclude=doc/rust/html -cf - doc | tar -C "$root/usr/local/rust/share" -xf -

tar -C "$root" --numeric-owner -cf - . \
    | "${podman[@]}" import --quiet \
        --change 'ENV PATH=/usr/local/cargo/bin:/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV CARGO_HOME=/usr/local/cargo' \
        --change 'CMD ["/bin/bash"]' \
        --message "Debian bookworm with gcc and Rust $version (tools/builder-image.sh)" \
        - "$image" >/dev/null
echo "builder image: $image ($(du -sh "$root" | cut -f1))" >&2
echo "$image"
