#!/usr/bin/env bash
# Builds the real node of the e2e tier from the pinned modules under node/: runc, containerd
# (with its runc shim and ctr), the kubelet, the standard CNI plugins (bridge, host-local,
# loopback, portmap) and the program of the test images (node/workload: pause, bpi, mem, idle).
# Local Go toolchain and the Go module proxy only; runc also needs a C compiler and libseccomp
# (installed with apt-get when missing), because the kubelet asks for the RuntimeDefault seccomp
# profile on every pod sandbox and a runc without seccomp fails every pod.
#
#   node-build.sh              build into .cache/node-bin/<key>/ unless already built; print the dir
#   node-build.sh --print-dir  print that dir without building (the real-node fixture uses this)
#
# <key> hashes the module files, the workload's source, this script, `go version` and the
# libseccomp version, so an unchanged tree reuses the binaries at no cost.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
node=$here/node

if ! command -v go >/dev/null 2>&1; then
  echo "node-bin: the Go toolchain ('go' on PATH) is required to build the real node" \
       "(runc, containerd, kubelet, CNI plugins) from Go modules" >&2
  exit 2
fi

seccomp_version() { dpkg-query -W -f '${Version}' libseccomp-dev 2>/dev/null || true; }

key=$( { cat "$node"/*/go.mod "$node"/*/go.sum "$node"/workload/*.go "$here/node-build.sh" 2>/dev/null
         go version; seccomp_version; } | sha256sum | cut -c1-16)
out="$repo/.cache/node-bin/$key"
if [[ ${1-} == --print-dir ]]; then echo "$out"; exit 0; fi
if [[ -f $out/.complete ]]; then echo "$out"; exit 0; fi

need_go() {
  local need have
  need=$(awk '$1 == "go" {print $2; exit}' "$1")
  have=$(go env GOVERSION); have=${have#go}
  if [[ $(printf '%s\n%s\n' "$need" "$have" | sort -V | sed -n 1p) != "$need" ]]; then
    echo "node-bin: $1 needs go >= $need but the local toolchain is go$have" >&2
    exit 2
  fi
}
for mod in "$node"/*/go.mod; do need_go "$mod"; done

# runc links libseccomp statically (a static binary runs in any mount namespace).
if ! command -v cc >/dev/null 2>&1 || [[ -z $(seccomp_version) ]] \
    || ! pkg-config --exists libseccomp 2>/dev/null; then
  command -v apt-get >/dev/null 2>&1 \
    || { echo "node-bin: runc needs a C compiler, pkg-config and libseccomp-dev" >&2; exit 2; }
  echo "node-bin: installing gcc, pkg-config and libseccomp-dev with apt-get (runc's seccomp)" >&2
  export DEBIAN_FRONTEND=noninteractive
  { apt-get install -y -qq --no-install-recommends gcc libc6-dev pkg-config libseccomp-dev \
      || { apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc libc6-dev \
             pkg-config libseccomp-dev; }; } >/dev/null \
    || { echo "node-bin: apt-get install libseccomp-dev failed" >&2; exit 2; }
  # The key names the libseccomp version: recompute it now that it is installed.
  exec bash "$0" "$@"
fi

mod_version() { (cd "$1" && go list -m -f '{{.Version}}' "$2"); }

tmp="$out.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/cni"
start=$SECONDS
step() { echo "node-bin: $* ($((SECONDS - start)) s)" >&2; }
flags=(-buildvcs=false -trimpath)

step "runc"
runc_version=$(mod_version "$node/runc" github.com/opencontainers/runc)
# As runc's `make static`: cgo, seccomp, static PIE; no libpathrs (a Rust library Debian lacks).
(cd "$node/runc" && CGO_ENABLED=1 go build "${flags[@]}" -buildmode=pie \
  -tags "seccomp urfave_cli_no_docs netgo osusergo" \
  -ldflags "-s -w -X main.version=${runc_version#v} -linkmode external -extldflags -static-pie" \
  -o "$tmp/runc" github.com/opencontainers/runc)

step "containerd"
ctrd_version=$(mod_version "$node/containerd" github.com/containerd/containerd/v2)
ctrd_pkg=github.com/containerd/containerd/v2
(cd "$node/containerd" && CGO_ENABLED=0 go build "${flags[@]}" -tags "no_btrfs urfave_cli_no_docs" \
  -ldflags "-s -w -X $ctrd_pkg/version.Version=$ctrd_version -X $ctrd_pkg/version.Package=$ctrd_pkg" \
  -o "$tmp/" "$ctrd_pkg/cmd/containerd" "$ctrd_pkg/cmd/containerd-shim-runc-v2" "$ctrd_pkg/cmd/ctr")

step "CNI plugins"
cni_version=$(mod_version "$node/cni" github.com/containernetworking/plugins)
cni_pkg=github.com/containernetworking/plugins
(cd "$node/cni" && CGO_ENABLED=0 go build "${flags[@]}" \
  -ldflags "-s -w -X $cni_pkg/pkg/utils/buildversion.BuildVersion=$cni_version" -o "$tmp/cni/" \
  "$cni_pkg/plugins/main/bridge" "$cni_pkg/plugins/ipam/host-local" \
  "$cni_pkg/plugins/main/loopback" "$cni_pkg/plugins/meta/portmap")

step "workload"
(cd "$node/workload" && CGO_ENABLED=0 go build "${flags[@]}" -ldflags "-s -w" -o "$tmp/workload" .)

step "kubelet"
kube_version=$(mod_version "$node/kubelet" k8s.io/kubernetes)
[[ $kube_version =~ ^v([0-9]+)\.([0-9]+)\. ]] || { echo "node-bin: no k8s.io/kubernetes" >&2; exit 1; }
major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}
build_date=$(cd "$node/kubelet" && go list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)
# The version variables kube's own build sets (as gobuild/build.sh does for the control plane):
# without them the kubelet registers as v0.0.0-master.
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.buildDate=$build_date"
done
(cd "$node/kubelet" && CGO_ENABLED=0 go build "${flags[@]}" -ldflags "$ldflags" -o "$tmp/kubelet" \
  k8s.io/kubernetes/cmd/kubelet)

"$tmp/runc" --version | sed -n 1p >&2
"$tmp/containerd" --version >&2
"$tmp/kubelet" --version >&2
rm -rf "$out"
mv "$tmp" "$out"
touch "$out/.complete"
# Binaries of earlier pins are never used again by this tree (only finished builds are removed).
for old in "$repo"/.cache/node-bin/*; do
  name=${old##*/}
  [[ $name =~ ^[0-9a-f]{16}$ && $name != "$key" ]] && rm -rf "$old"
done
step "built"
echo "$out"
