#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager and kube-scheduler for the e2e tier
# from the pinned modules beside this script (see pin.sh), with the local Go toolchain and
# the Go module proxy only; also kubectl (same kube module) and helm (helm/, its own module),
# which render and apply the deploy manifests.
#
#   build.sh              build into .cache/e2e-bin/<key>/ unless already built; print the dir
#   build.sh --print-dir  print that dir without building (the e2e fixture uses this)
#
# <key> hashes the module files, this script and `go version`, so a change of pins or of
# toolchain builds afresh while an unchanged tree reuses the binaries at no cost.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)

if ! command -v go >/dev/null 2>&1; then
  echo "e2e-bin: the Go toolchain ('go' on PATH) is required to build the e2e control plane" \
       "(etcd, kube-apiserver, kube-controller-manager, kube-scheduler) from Go modules;" \
       "install Go $(awk '$1 == "go" {print $2}' "$here/kube/go.mod") or newer." >&2
  exit 2
fi

# The modules' go directives are the minimum; GOTOOLCHAIN may forbid fetching a newer one.
need_go() {
  local need have
  need=$(awk '$1 == "go" {print $2; exit}' "$1")
  have=$(go env GOVERSION); have=${have#go}
  if [[ $(printf '%s\n%s\n' "$need" "$have" | sort -V | sed -n 1p) != "$need" ]]; then
    echo "e2e-bin: $1 needs go >= $need but the local toolchain is go$have" >&2
    exit 2
  fi
}

key=$( { cat "$here"/kube/go.mod "$here"/kube/go.sum "$here"/etcd/go.mod "$here"/etcd/go.sum \
            "$here"/helm/go.mod "$here"/helm/go.sum \
            "$here/build.sh"; go version; } | sha256sum | cut -c1-16)
out="$repo/.cache/e2e-bin/$key"
if [[ ${1-} == --print-dir ]]; then echo "$out"; exit 0; fi
if [[ -f $out/.complete ]]; then echo "$out"; exit 0; fi

need_go "$here/kube/go.mod"
need_go "$here/etcd/go.mod"
need_go "$here/helm/go.mod"

kube_version=$(sed -n 's/^\(require\)\{0,1\}[[:space:]]*k8s\.io\/kubernetes \(v[^ ]*\).*/\2/p' "$here/kube/go.mod" | sed -n 1p)
[[ $kube_version =~ ^v([0-9]+)\.([0-9]+)\. ]] || { echo "e2e-bin: no k8s.io/kubernetes in kube/go.mod" >&2; exit 1; }
major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}

tmp="$out.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
start=$SECONDS

# The release date, not the wall clock, so that rebuilds are reproducible.
build_date=$(cd "$here/kube" && go list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)
# The same version variables kube's own build (hack/lib/version.sh) sets, in both packages.
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.buildDate=$build_date"
done

echo "e2e-bin: building Kubernetes $kube_version and etcd into $out" >&2
# Static binaries without cgo, trimmed paths, stripped: as kube's release build does them.
# One `go build` for the three kube commands so shared packages compile once; -p follows
# GOFLAGS or defaults to the number of CPUs.
# -buildvcs=false: the main modules here are only wrappers; their checkout says nothing.
(cd "$here/kube" && CGO_ENABLED=0 go build -buildvcs=false -trimpath -ldflags "$ldflags" -o "$tmp/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubectl)
(cd "$here/etcd" && CGO_ENABLED=0 go build -buildvcs=false -trimpath -ldflags "-s -w" -o "$tmp/etcd" \
  go.etcd.io/etcd/server/v3)
# helm's version string comes from its own module version, as its Makefile sets it.
helm_version=$(cd "$here/helm" && go list -m -f '{{.Version}}' helm.sh/helm/v4)
(cd "$here/helm" && CGO_ENABLED=0 go build -buildvcs=false -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$helm_version" -o "$tmp/helm" \
  helm.sh/helm/v4/cmd/helm)

"$tmp/kube-apiserver" --version >&2
# sed, not head: head exiting early would SIGPIPE the writer and fail the build under pipefail.
"$tmp/etcd" --version | sed -n 1p >&2
"$tmp/helm" version --short >&2
rm -rf "$out"
mv "$tmp" "$out"
touch "$out/.complete"
# Binaries of earlier pins are ~300 MB each and never used again by this tree: drop them
# (only finished builds; another build's temporary directory is left alone).
for old in "$repo"/.cache/e2e-bin/*; do
  name=${old##*/}
  [[ $name =~ ^[0-9a-f]{16}$ && $name != "$key" ]] && rm -rf "$old"
done
echo "e2e-bin: built in $((SECONDS - start)) s" >&2
echo "$out"
