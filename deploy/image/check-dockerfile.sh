#!/usr/bin/env bash
# Build the Dockerfile itself with buildah, without a Docker daemon and without a registry: the
# base image debian:bookworm-slim is stood in for by a local debootstrap minbase image (passed as
# the BASE build argument). Proves that the Dockerfile's instructions work, not only that they lint.
#
# Usage: deploy/image/check-dockerfile.sh (make image-dockerfile). Needs root and network access
# to the Debian archive and PyPI, like `docker build`. Output: the image in buildah's local storage
# as localhost/carico:VERSION, also written as an OCI layout to .cache/image/dockerfile-oci.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${CARICO_IMAGE_DIR:-$REPO/.cache/image}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$REPO/pyproject.toml" | head -n1)
BASE_REF=localhost/carico-base:bookworm-minbase

die() { echo "dockerfile check: $*" >&2; exit 1; }
step() { echo "==> $*"; }
[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap, buildah with chroot isolation)"

missing=()
for tool in debootstrap buildah; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
    command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and no apt-get to install them"
    step "installing ${missing[*]} with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends debootstrap buildah \
        >/dev/null; } || die "apt-get install debootstrap buildah failed"
fi

start=$(date +%s)
# Images of an earlier run would only pile up in buildah's storage.
buildah rmi --force "localhost/carico:$VERSION" "$BASE_REF" >/dev/null 2>&1 || true
base=$OUT/base
if [ -e "$base" ]; then
    awk -v d="$base/" 'index($2 "/", d) == 1 { f = 1 } END { exit !f }' /proc/mounts \
        && die "$base has mounts below it; unmount them first"
    rm -rf "$base"
fi
step "stand-in for debian:bookworm-slim: debootstrap --variant=minbase bookworm"
mkdir -p "$OUT/debs"
unshare --mount --propagation private debootstrap --variant=minbase --cache-dir="$OUT/debs" \
    bookworm "$base" "$MIRROR" >"$base.log" 2>&1 || die "debootstrap failed; see $base.log"
rm -rf "$base"/usr/share/doc/* "$base"/usr/share/man/* "$base"/var/lib/apt/lists/* "$base"/debootstrap
find "$base/dev" -mindepth 1 -delete

ctr=$(buildah from scratch)
mnt=$(buildah mount "$ctr")
cp -a "$base/." "$mnt/"
buildah umount "$ctr" >/dev/null
buildah commit --quiet --rm "$ctr" "$BASE_REF" >/dev/null

step "buildah bud --build-arg BASE=$BASE_REF ."
# pip inside the build trusts this host's CA bundle (the network here may re-sign TLS): the bundle
# and a pip.conf naming it are mounted read-only for the RUN steps only, away from the paths that
# apt's ca-certificates writes. buildah leaves their two empty mount points (/etc/pip.conf,
# /etc/pip-host-ca.crt) in this check image; `make image` or a real `docker build` has neither.
host_ca=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
[ -r "$host_ca" ] || die "no CA bundle at $host_ca for pip in the build (set PIP_CERT)"
printf '[global]\ncert = /etc/pip-host-ca.crt\n' >"$OUT/pip-build.conf"
mounts=(--volume "$OUT/pip-build.conf:/etc/pip.conf:ro" --volume "$host_ca:/etc/pip-host-ca.crt:ro")
buildah bud --pull=never --isolation=chroot --layers=false "${mounts[@]}" \
    --build-arg "BASE=$BASE_REF" --tag "localhost/carico:$VERSION" --file "$REPO/Dockerfile" "$REPO" \
    || die "building the Dockerfile failed"

rm -rf "$OUT/dockerfile-oci"
buildah push --quiet "localhost/carico:$VERSION" "oci:$OUT/dockerfile-oci:$VERSION"
user=$(buildah inspect --format '{{.OCIv1.Config.User}}' "localhost/carico:$VERSION")
entry=$(buildah inspect --format '{{.OCIv1.Config.Entrypoint}}' "localhost/carico:$VERSION")
size=$(du -sb "$OUT/dockerfile-oci/blobs" | awk '{printf "%.1f MB", $1 / 1e6}')
echo "dockerfile image: localhost/carico:$VERSION (user $user, entrypoint $entry)"
echo "OCI layout:       $OUT/dockerfile-oci ($size compressed)"
echo "check time:       $(( $(date +%s) - start )) s"
