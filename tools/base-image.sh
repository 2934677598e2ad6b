#!/usr/bin/env bash
# Makes the images' base from Debian bookworm's packages, for machines that reach Debian's
# archive but no container registry (CI here): the same content as distroless/cc-debian12
# (glibc, libgcc, the CA bundle), no shell, no package manager. Imports it into podman as
# $1 (default localhost/hearth-base:bookworm).
#
# mmdebstrap's `extract` variant unpacks the packages without running their scripts, so
# nothing executes inside the tree; it also unpacks what ca-certificates depends on
# (openssl, debconf, perl-base), which the images do not need, so only an allow-list of
# the unpacked files goes into the image: the shared libraries, the CA bundle (built
# here the way update-ca-certificates builds it: every Mozilla root, PEM-concatenated) and
# the Debian copyright files of what is shipped.
set -euo pipefail
image=${1:-localhost/hearth-base:bookworm}
mirror=${HEARTH_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${HEARTH_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
podman=(podman --storage-driver "${HEARTH_PODMAN_STORAGE_DRIVER:-vfs}")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
packages=(libc6 libgcc-s1 gcc-12-base ca-certificates)
mmdebstrap --quiet --variant=extract --include="$(IFS=,; echo "${packages[*]}")" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    bookworm "$work/unpacked" \
    "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
    "deb $security bookworm-security main" </dev/null

from=$work/unpacked
root=$work/root
mkdir -p "$root/etc/ssl/certs" "$root/usr/share/doc" "$root/tmp"
chmod 1777 "$root/tmp"
# glibc's and libgcc's shared objects (/lib/<triple>) and the dynamic loader's link (/lib64).
for dir in "$from"/lib/*-linux-gnu "$from"/lib64; do
    [ -e "$dir" ] || continue
    mkdir -p "$root/${dir#"$from"/}"
    cp -a "$dir/." "$root/${dir#"$from"/}/"
done
for pkg in "${packages[@]}"; do
    mkdir -p "$root/usr/share/doc/$pkg"
    cp "$from/usr/share/doc/$pkg/copyright" "$root/usr/share/doc/$pkg/"
done
certs=("$from"/usr/share/ca-certificates/mozilla/*.crt)
[ "${#certs[@]}" -gt 100 ] || { echo "base-image: only ${#certs[@]} CA certificates unpacked" >&2; exit 1; }
for crt in "${certs[@]}"; do cat "$crt"; [ -z "$(tail -c1 "$crt")" ] || echo; done \
    >"$root/etc/ssl/certs/ca-certificates.crt"
chmod -R u=rwX,go=rX "$root/etc" "$root/usr"
compgen -G "$root/lib/*-linux-gnu/libc.so.6" >/dev/null \
    || { echo "base-image: no libc.so.6 in the tree" >&2; exit 1; }

tar -C "$root" --numeric-owner --owner=0 --group=0 -cf - . \
    | "${podman[@]}" import --quiet \
        --message "Debian bookworm: ${packages[*]} (tools/base-image.sh)" \
        - "$image" >/dev/null
echo "base image: $image ($(du -sh "$root" | cut -f1), ${#certs[@]} CA certificates)"
