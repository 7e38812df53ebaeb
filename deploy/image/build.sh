#!/usr/bin/env bash
# Build the Carico container image without a container engine or a registry.
#
# The same two stages as the Dockerfile at the repository root, done with Debian tools:
#   builder: a debootstrap'd Debian bookworm (minbase) with python3-venv; pip builds the wheels of
#            Carico and every dependency from PyPI and installs them into the venv /opt/carico;
#   runtime: a second minbase rootfs with python3 only, stripped of docs and caches, plus the venv
#            copied from the builder and an unprivileged user (UID/GID 10001).
# umoci writes the result as an OCI image layout (two layers: the OS, then /opt/carico).
# Keep this in step with the Dockerfile: it is the recipe for machines without Docker.
#
# Usage: deploy/image/build.sh            (make image)
# Env:   CARICO_IMAGE_DIR   output and caches (default: .cache/image in the repository)
#        DEBIAN_MIRROR      Debian archive (default http://deb.debian.org/debian)
# Needs root (debootstrap, chroot, mount namespaces) on a Debian-like system; installs debootstrap
# and umoci with apt-get when they are missing.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${CARICO_IMAGE_DIR:-$REPO/.cache/image}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
APP_UID=10001
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$REPO/pyproject.toml" | head -n1)
LAYOUT=$OUT/oci
TAG=$VERSION
PATH_IN_IMAGE=/opt/carico/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

die() { echo "image build: $*" >&2; exit 1; }
step() { echo "==> $*"; }

[ "$(id -u)" -eq 0 ] || die "must run as root: debootstrap, chroot and mount namespaces need it.
  Where a container engine exists, build the Dockerfile instead: docker build -t carico ."
[ "$(uname -s)" = Linux ] || die "needs Linux (debootstrap and chroot)"
[ -n "$VERSION" ] || die "cannot read the version from pyproject.toml"

# --- tools -------------------------------------------------------------------------------------
missing=()
for tool in debootstrap umoci unshare chroot python3; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
    command -v apt-get >/dev/null 2>&1 \
        || die "missing ${missing[*]} and no apt-get to install them: this build needs a Debian-like host"
    step "installing the build tools with apt-get (missing: ${missing[*]})"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || die "apt-get update failed: is the Debian archive reachable?"
    apt-get install -y -qq --no-install-recommends debootstrap umoci util-linux coreutils \
        python3 >/dev/null || die "apt-get install debootstrap umoci python3 failed"
fi
unshare --mount true 2>/dev/null \
    || die "cannot create a mount namespace (unshare --mount): the build needs CAP_SYS_ADMIN"

# --- helpers -----------------------------------------------------------------------------------
# Refuse to delete a tree that still has something mounted below it (a leaked /proc, say).
fresh_dir() {
    local dir=$1
    if [ -e "$dir" ]; then
        if awk -v d="$dir/" 'index($2 "/", d) == 1 { found = 1 } END { exit !found }' /proc/mounts; then
            die "$dir has mounts below it; unmount them first (see /proc/mounts)"
        fi
        rm -rf "$dir"
    fi
    mkdir -p "$dir"
}

# debootstrap inside a private mount namespace, so its /proc and /sys mounts cannot outlive it.
bootstrap() {
    local target=$1 include=$2
    fresh_dir "$target"
    unshare --mount --propagation private \
        debootstrap --variant=minbase --include="$include" --cache-dir="$OUT/debs" \
        "$SUITE" "$target" "$MIRROR" >"$target.log" 2>&1 \
        || die "debootstrap of $target failed; see $target.log"
}

# Run a shell script inside a rootfs: private mount namespace, /proc and /dev mounted, clean env;
# with CACHE_BIND set, that host directory appears as /pipcache. Extra arguments are VAR=value
# pairs added to the environment.
in_root() {
    local root=$1 script=$2
    shift 2
    # shellcheck disable=SC2016  # the inner script expands its own arguments
    CACHE_BIND=${CACHE_BIND:-} unshare --mount --propagation private /bin/sh -euc '
        root=$1; script=$2; shift 2
        mount -t proc proc "$root/proc"
        mount --rbind /dev "$root/dev"
        if [ -n "$CACHE_BIND" ]; then mkdir -p "$root/pipcache"; mount --bind "$CACHE_BIND" "$root/pipcache"; fi
        exec chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin \
            "$@" /bin/sh -euc "$script"
    ' in_root "$root" "$script" "$@"
}

start=$(date +%s)
mkdir -p "$OUT/debs" "$OUT/pip"

# --- builder stage -----------------------------------------------------------------------------
step "builder: debootstrap $SUITE (minbase + python3-venv)"
bootstrap "$OUT/builder" python3,python3-venv

step "builder: pip wheel (Carico and its dependencies) and install into /opt/carico"
mkdir -p "$OUT/builder/src" "$OUT/builder/wheels" "$OUT/builder/root/.cache/pip"
tar -C "$REPO" --exclude=__pycache__ --exclude='*.pyc' \
    -cf - pyproject.toml README.md carico carico_app agent aggregator scheduler_ext repack protos \
    | tar -C "$OUT/builder/src" -xf -
# The builder fetches from PyPI like `docker build` would; it trusts the host's CA bundle (the
# network here may re-sign TLS) and reuses a pip cache kept outside the rootfs.
host_ca=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
[ -r "$host_ca" ] || die "no CA bundle at $host_ca for pip in the builder (set PIP_CERT)"
mkdir -p "$OUT/builder/etc/ssl/certs"
cp "$host_ca" "$OUT/builder/etc/ssl/certs/host-ca.crt"
cp /etc/resolv.conf "$OUT/builder/etc/resolv.conf"
pip_env=(PIP_CERT=/etc/ssl/certs/host-ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1
         PIP_DEFAULT_TIMEOUT=120 PIP_CACHE_DIR=/pipcache)
for var in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST http_proxy https_proxy no_proxy \
           HTTP_PROXY HTTPS_PROXY NO_PROXY; do
    [ -n "${!var:-}" ] && pip_env+=("$var=${!var}")
done
CACHE_BIND=$OUT/pip in_root "$OUT/builder" '
        python3 -m venv /opt/carico
        /opt/carico/bin/pip wheel --quiet --wheel-dir /wheels /src
        /opt/carico/bin/pip install --quiet --no-index --find-links /wheels carico
        # The runtime needs neither pip nor setuptools.
        /opt/carico/bin/python -m pip uninstall --quiet --yes pip setuptools
        # The dependencies ship their test suites (~70 MB); nothing imports them at run time.
        find /opt/carico/lib -path "*/site-packages/*" -type d \( -name tests -o -name test \) \
            -prune -exec rm -rf {} +
        /opt/carico/bin/carico --version
    ' "${pip_env[@]}" \
    || die "building the wheels or installing them in the builder failed (is PyPI reachable?)"

# --- runtime stage -----------------------------------------------------------------------------
step "runtime: debootstrap $SUITE (minbase + python3)"
bootstrap "$OUT/runtime" python3
rt=$OUT/runtime
# Nothing at run time reads docs, man pages, translations or package caches.
rm -rf "$rt"/usr/share/doc/* "$rt"/usr/share/man/* "$rt"/usr/share/info/* \
    "$rt"/usr/share/locale/* "$rt"/usr/share/lintian "$rt"/var/cache/apt/* \
    "$rt"/var/lib/apt/lists/* "$rt"/var/cache/debconf/*-old "$rt"/var/log/* "$rt"/tmp/* \
    "$rt"/debootstrap
# A container runtime provides /dev, /proc, /sys and /etc/resolv.conf, /etc/hostname.
find "$rt/dev" -mindepth 1 -delete
: >"$rt/etc/resolv.conf"; : >"$rt/etc/hostname"
echo "carico:x:$APP_UID:$APP_UID:Carico:/nonexistent:/usr/sbin/nologin" >>"$rt/etc/passwd"
echo "carico:x:$APP_UID:" >>"$rt/etc/group"
echo "carico:!:19000::::::" >>"$rt/etc/shadow"

# --- image -------------------------------------------------------------------------------------
step "image: OCI layout $LAYOUT:$TAG (layer 1: Debian + python3, layer 2: /opt/carico)"
fresh_dir "$LAYOUT"
rmdir "$LAYOUT"
umoci init --layout "$LAYOUT"
umoci new --image "$LAYOUT:$TAG"
umoci insert --image "$LAYOUT:$TAG" --history.created_by "debootstrap --variant=minbase $SUITE + python3" "$rt" /
umoci insert --image "$LAYOUT:$TAG" --history.created_by "pip install carico $VERSION into /opt/carico" \
    "$OUT/builder/opt/carico" /opt/carico
umoci config --image "$LAYOUT:$TAG" \
    --os linux --architecture amd64 \
    --config.user "$APP_UID:$APP_UID" \
    --config.entrypoint /opt/carico/bin/carico --config.cmd --help \
    --config.workingdir / \
    --config.env "PATH=$PATH_IN_IMAGE" --config.env PYTHONDONTWRITEBYTECODE=1 \
    --config.env PYTHONUNBUFFERED=1 --config.env LANG=C.UTF-8 \
    --config.label org.opencontainers.image.title=carico \
    --config.label "org.opencontainers.image.version=$VERSION" \
    --config.label org.opencontainers.image.licenses=Apache-2.0 \
    --history.created_by "umoci config: user $APP_UID, entrypoint carico"
umoci gc --layout "$LAYOUT"

# --- report ------------------------------------------------------------------------------------
layers=$(python3 - "$LAYOUT" "$TAG" <<'PY'
import json, pathlib, sys
layout, tag = pathlib.Path(sys.argv[1]), sys.argv[2]
index = json.loads((layout / "index.json").read_text())
desc = next(m for m in index["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag)
blob = lambda d: layout / "blobs" / d["digest"].replace(":", "/")
manifest = json.loads(blob(desc).read_text())
sizes = [layer["size"] for layer in manifest["layers"]]
print(" + ".join(f"{s / 1e6:.1f}" for s in sizes), f"= {sum(sizes) / 1e6:.1f} MB")
PY
)
unpacked=$(du -sb "$rt" "$OUT/builder/opt/carico" | awk '{s += $1} END {printf "%.1f MB", s / 1e6}')
venv=$(du -sb "$OUT/builder/opt/carico" | awk '{printf "%.1f MB", $1 / 1e6}')
elapsed=$(( $(date +%s) - start ))
{
    echo "image:      oci:$LAYOUT:$TAG"
    echo "layers:     $layers (gzip-compressed)"
    echo "unpacked:   $unpacked (of which /opt/carico $venv)"
    echo "build time: ${elapsed} s"
} | tee "$OUT/summary.txt"
echo "smoke test: make image-test · export: skopeo copy oci:$LAYOUT:$TAG docker-archive:carico.tar:carico:$TAG"
