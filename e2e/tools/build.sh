#!/usr/bin/env bash
# Builds the pinned control-plane binaries (kube-apiserver, kube-controller-manager,
# etcd, kubectl, Kueue, helm) and promtool (alert rule tests) from the Go modules under
# this directory and caches them under
# ${HEARTH_E2E_CACHE:-~/.cache/hearth-e2e}/<hash of the pins and this script>/bin.
# A second run with unchanged pins does nothing. After a change (a new tool, a new pin), a
# binary that an older cache directory holds is reused when its embedded build info says
# it is exactly what this script would build (see `reuse`), so only what changed is
# built. Prints the bin directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache_root=${HEARTH_E2E_CACHE:-$HOME/.cache/hearth-e2e}
key=$(cat "$here/build.sh" "$here"/*/go.mod "$here"/*/go.sum | sha256sum | cut -c1-16)
bin="$cache_root/$key/bin"
# Kueue's version is chosen by HEARTH_E2E_KUEUE (e2e/src/kueue.rs): 0.19, the default,
# pinned in ./kube, or 0.16 (the Red Hat build of Kueue's base), pinned in ./kueue-0.16
# because it is built against older Kubernetes libraries than the apiserver. Only the
# chosen one is built; each has its binary, CRDs and webhook manifests under its own name
# in the same cache directory.
case ${HEARTH_E2E_KUEUE:-0.19} in
  0.19 | v0.19) kueue_dir=kube kueue=kueue ;;
  0.16 | v0.16) kueue_dir=kueue-0.16 kueue=kueue-0.16 ;;
  *) echo "build.sh: HEARTH_E2E_KUEUE must be 0.16 or 0.19, not '$HEARTH_E2E_KUEUE'" >&2; exit 2 ;;
esac
want=(kube-apiserver kube-controller-manager etcd kubectl "$kueue" helm promtool actionlint)

crds="$cache_root/$key/$kueue-crds"
webhooks="$cache_root/$key/$kueue-webhooks.yaml"
have_all() {
  for b in "${want[@]}"; do [ -x "$bin/$b" ] || return 1; done
  [ -d "$crds" ] && [ -f "$webhooks" ]
}
if have_all; then echo "$bin"; exit 0; fi

command -v go >/dev/null || { echo "build.sh: Go is required (see README: Development)" >&2; exit 1; }
mkdir -p "$bin"
# One build at a time (`just up` and a test run may both start one on a cold cache); the
# second waits and then finds everything built.
exec 9>"$cache_root/$key/.lock"
flock 9
if have_all; then echo "$bin"; exit 0; fi
export CGO_ENABLED=0 GOFLAGS=-mod=mod
k8s_version=$(awk '$1=="k8s.io/kubernetes"{print $2; exit}' "$here/kube/go.mod")
minor=$(echo "$k8s_version" | cut -d. -f2)
# Without these, /version reports v0.0.0-master and clients may misjudge the server.
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version \
  -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
  -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version \
  -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"

# The modules the pins put into package $2 built in module dir $1 with tags $3, as "path
# version" lines (a replaced module under its own path with the replacement's version, as
# `go version -m` shows it). Read-only: looking must not rewrite a go.sum (that would
# change the cache key).
linked() {
  (cd "$here/$1" && GOFLAGS=-mod=readonly go list -deps -tags "$3" \
    -f '{{with .Module}}{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}{{end}}' "$2" 2>/dev/null | sort -u)
}

# Hard-links into $bin a binary named $out from another cache directory whose build info
# (`go version -m`) names the same package, Go toolchain, -ldflags, -tags, CGO_ENABLED=0
# and the same modules at the same versions as the pins link into that package now: what
# `go build` would produce here. A cold build of the Kubernetes binaries takes tens of minutes on
# two cores; a new tool or pin must not cost that for binaries it does not change.
reuse() { # dir out pkg ldflags tags
  local dir=$1 out=$2 pkg=$3 flags=$4 tags=$5 candidate info modules expect line
  expect=$(printf '\tpath\t%s\n\tbuild\t-ldflags="%s"\n\tbuild\tCGO_ENABLED=0' "$pkg" "$flags")
  [ -n "$tags" ] && expect+=$(printf '\n\tbuild\t-tags=%s' "$tags")
  for candidate in "$cache_root"/*/bin/"$out"; do
    [ -x "$candidate" ] && [ "$candidate" != "$bin/$out" ] || continue
    info=$(go version -m "$candidate" 2>/dev/null) || continue
    [ "$(head -1 <<<"$info")" = "$candidate: $(go env GOVERSION)" ] || continue
    while IFS= read -r line; do grep -qxF -- "$line" <<<"$info" || continue 2; done <<<"$expect"
    # A binary built with tags has a -tags line; one built without must have none.
    [ -z "$tags" ] && grep -q $'^\tbuild\t-tags=' <<<"$info" && continue
    modules=$(awk -F'\t' '
      $2 == "mod" || $2 == "dep" { if (p != "") print p " " v; p = $3; v = $4; next }
      $2 == "=>" { v = $4 }
      END { if (p != "") print p " " v }' <<<"$info")
    [ -n "$modules" ] || continue
    [ "$(sort -u <<<"$modules")" = "$(linked "$dir" "$pkg" "$tags" | grep -v '^hearth.dev/')" ] || continue
    ln -f "$candidate" "$bin/$out.tmp" 2>/dev/null || cp "$candidate" "$bin/$out.tmp"
    mv "$bin/$out.tmp" "$bin/$out"
    echo "reused $out from ${candidate%/bin/*} (same build info)" >&2
    return 0
  done
  return 1
}

build() { # dir out pkg [ldflags] [tags]
  local dir=$1 out=$2 pkg=$3 flags=${4:-"-s -w"} tags=${5:-} t0=$SECONDS
  [ -x "$bin/$out" ] && return 0
  reuse "$dir" "$out" "$pkg" "$flags" "$tags" && return 0
  echo "building $out ($pkg)..." >&2
  (cd "$here/$dir" && go build -tags "$tags" -ldflags "$flags" -o "$bin/$out.tmp" "$pkg")
  mv "$bin/$out.tmp" "$bin/$out"
  echo "built $out in $((SECONDS - t0))s" >&2
}
# Two chains at once: the Kubernetes module's binaries, and the other modules' (whose own
# module downloads and single-threaded links then overlap the Kubernetes compile: on a new
# machine the downloads alone took minutes). Within a chain the builds share compiled
# packages through Go's build cache, so they stay one after the other.
kube_chain() {
  build kube kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$ldflags"
  # Garbage collection, Deployments → ReplicaSets → Pods, Jobs and namespace deletion for
  # planes that ask for it (PlaneOptions::controller_manager); no kubelet runs the Pods.
  build kube kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$ldflags"
  build kube etcd go.etcd.io/etcd/server/v3
  build kube kubectl k8s.io/kubernetes/cmd/kubectl "$ldflags"
  # Both report a placeholder version (v0.0.0-main, v3.21) unless stamped.
  kueue_version=$(awk '$1=="require" && $2=="sigs.k8s.io/kueue"{print $3; exit} $1=="sigs.k8s.io/kueue"{print $2; exit}' "$here/$kueue_dir/go.mod")
  build "$kueue_dir" "$kueue" sigs.k8s.io/kueue/cmd/kueue "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$kueue_version"
}
kube_chain &
kube_pid=$!
helm_version=$(awk '$1=="require" && $2=="helm.sh/helm/v3"{print $3; exit} $1=="helm.sh/helm/v3"{print $2; exit}' "$here/helm/go.mod")
build helm helm helm.sh/helm/v3/cmd/helm "-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version"
# promtool only checks and unit-tests rule files: `remove_all_sd` leaves out every
# service-discovery plugin (the cloud SDKs), most of Prometheus's build.
prometheus_version=$(awk '$1=="require" && $2=="github.com/prometheus/prometheus"{print $3; exit} $1=="github.com/prometheus/prometheus"{print $2; exit}' "$here/prometheus/go.mod")
# Module v0.316.0 is Prometheus 3.16.0.
promtool_version=$(echo "$prometheus_version" | sed -E 's/^v0\.([0-9])([0-9]+)\.([0-9]+).*/\1.\2.\3/')
build prometheus promtool github.com/prometheus/prometheus/cmd/promtool \
  "-s -w -X github.com/prometheus/common/version.Version=$promtool_version" remove_all_sd
actionlint_version=$(awk '$1=="require" && $2=="github.com/rhysd/actionlint"{print $3; exit} $1=="github.com/rhysd/actionlint"{print $2; exit}' "$here/actionlint/go.mod")
build actionlint actionlint github.com/rhysd/actionlint/cmd/actionlint \
  "-s -w -X github.com/rhysd/actionlint.version=$actionlint_version"
wait "$kube_pid"
# Kueue's CRDs and webhook configurations come from the same pinned module.
components=$(cd "$here/$kueue_dir" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)/config/components
if [ ! -d "$crds" ]; then
  rm -rf "$crds.tmp"
  mkdir -p "$crds.tmp" && cp "$components"/crd/bases/*.yaml "$crds.tmp"/ && chmod -R u+w "$crds.tmp" && mv "$crds.tmp" "$crds"
fi
if [ ! -f "$webhooks" ]; then
  cp "$components/webhook/manifests.yaml" "$webhooks.tmp" && chmod u+w "$webhooks.tmp" && mv "$webhooks.tmp" "$webhooks"
fi
echo "$bin"
