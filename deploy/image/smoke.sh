#!/usr/bin/env bash
# Smoke-test the image built by deploy/image/build.sh, without a container engine.
#
# Unpacks the OCI image with umoci and runs `carico` inside its root filesystem: as the image's
# user (UID 10001), with the root filesystem mounted read-only (as the manifests run it), /proc
# mounted so the agent can read it, and a tmpfs on /tmp. Checks:
#   - the image config (user, entry point);
#   - `carico --help`, `carico --version`, and `carico COMMAND --help` for every command — a command
#     not built yet in this source tree is reported as such, not as a failure;
#   - the native dependencies import (numpy, grpc, OR-Tools, cryptography, ...);
#   - `carico certs --secret yaml` issues certificates;
#   - if built, `carico agent --standalone` runs for a few seconds, prints JSON reports and stops
#     on SIGTERM;
#   - if built, `carico aggregator` serves mTLS with certificates from `carico certs`: a client
#     with the agent's certificate completes the handshake; if the agent is built too, it
#     exchanges its model with the aggregator over mTLS; the aggregator stops on SIGTERM.
# Usage: deploy/image/smoke.sh (make image-test). Needs root and a built image.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${CARICO_IMAGE_DIR:-$REPO/.cache/image}
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$REPO/pyproject.toml" | head -n1)
IMAGE=$OUT/oci:$VERSION
BUNDLE=$OUT/smoke
AGENT_SECONDS=${AGENT_SECONDS:-5}

die() { echo "image smoke test: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "must run as root (umoci unpack, chroot, mounts)"
[ -f "$OUT/oci/index.json" ] || die "no image at $OUT/oci: run make image first"
command -v umoci >/dev/null || die "umoci missing: run make image first (it installs it)"

if [ -e "$BUNDLE" ]; then
    if awk -v d="$BUNDLE/" 'index($2 "/", d) == 1 { f = 1 } END { exit !f }' /proc/mounts; then
        die "$BUNDLE has mounts below it; unmount them first"
    fi
    rm -rf "$BUNDLE"
fi
umoci unpack --image "$IMAGE" "$BUNDLE" >/dev/null
ROOTFS=$BUNDLE/rootfs

# The image config, as umoci translated it into the runtime bundle.
python3 - "$BUNDLE/config.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
user, args = config["process"]["user"], config["process"]["args"]
print(f"config: user {user['uid']}:{user['gid']}, args {args}")
assert (user["uid"], user["gid"]) == (10001, 10001), "the image must run as 10001:10001"
assert args[0] == "/opt/carico/bin/carico", "the entry point must be carico"
PY

# Everything below runs in a private mount namespace: the mounts vanish with it.
exec unshare --mount --propagation private /bin/bash -euo pipefail -s -- "$ROOTFS" "$AGENT_SECONDS" <<'INNER'
ROOTFS=$1; AGENT_SECONDS=$2
mount --bind "$ROOTFS" "$ROOTFS"
mount -o remount,bind,ro "$ROOTFS"
mount -t proc proc "$ROOTFS/proc"
mount -t tmpfs -o size=16m,mode=1777 tmpfs "$ROOTFS/tmp"
mount -t tmpfs -o size=1m tmpfs "$ROOTFS/dev"
for dev in null zero random urandom; do
    touch "$ROOTFS/dev/$dev"; mount --bind "/dev/$dev" "$ROOTFS/dev/$dev"
done
in_image() {
    chroot --userspec=10001:10001 "$ROOTFS" /usr/bin/env -i HOME=/nonexistent LANG=C.UTF-8 \
        PATH=/opt/carico/bin:/usr/sbin:/usr/bin:/sbin:/bin PYTHONDONTWRITEBYTECODE=1 "$@"
}
failed=0
check() {  # check NAME COMMAND...: run, show the first lines, count failures
    local name=$1; shift
    local out rc=0
    out=$("$@" 2>&1) || rc=$?
    if [ $rc -eq 0 ]; then
        echo "ok       $name"
    else
        echo "FAILED   $name (exit $rc)"; echo "$out" | sed 's/^/         /' | head -n 20
        failed=$((failed + 1))
    fi
}

echo "--- carico --help (as $(in_image id -u):$(in_image id -g), read-only root)"
in_image carico --help
check "carico --version: $(in_image carico --version 2>&1)" in_image carico --version
check "root filesystem is read-only" in_image /bin/sh -c '! touch /opt/carico/probe 2>/dev/null'
check "native dependencies import" in_image python3 -c \
    'import numpy, grpc, psutil, cryptography, msgspec, aiohttp, yaml, kubernetes, prometheus_client, matplotlib; from ortools.sat.python import cp_model; cp_model.CpModel()'

echo "--- carico COMMAND --help for every command"
commands=$(in_image python3 -c 'from carico_app.cli import COMMANDS; print(" ".join(COMMANDS))')
built=""
for cmd in $commands; do
    rc=0; out=$(in_image carico "$cmd" --help 2>&1) || rc=$?
    if [ $rc -eq 0 ]; then
        echo "ok       carico $cmd --help"; built="$built $cmd"
    elif [ $rc -eq 2 ] && echo "$out" | grep -q "not available yet"; then
        echo "not built carico $cmd ($(echo "$out" | tail -n1))"
    else
        echo "FAILED   carico $cmd --help (exit $rc)"; echo "$out" | tail -n 5; failed=$((failed + 1))
    fi
done

echo "--- carico certs"
rc=0; secrets=$(in_image carico certs --secret yaml --namespace smoke 2>&1) || rc=$?
if [ $rc -eq 0 ] && [ "$(echo "$secrets" | grep -c '^kind: Secret')" -eq 3 ]; then
    echo "ok       carico certs --secret yaml: 3 Secrets"
else
    echo "FAILED   carico certs --secret yaml (exit $rc)"; echo "$secrets" | tail -n 5
    failed=$((failed + 1))
fi

case " $built " in
*" agent "*)
    echo "--- carico agent --standalone for ${AGENT_SECONDS} s"
    rc=0
    # SIGTERM after AGENT_SECONDS, as the kubelet stops a pod; SIGKILL 5 s later if it hangs.
    out=$(in_image timeout --preserve-status -k 5 -s TERM "$AGENT_SECONDS" \
        carico agent --standalone 2>"$(dirname "$ROOTFS")/agent.err") || rc=$?
    reports=$(echo "$out" | python3 -c '
import json, sys
n = 0
for line in sys.stdin:
    if line.strip():
        json.loads(line); n += 1
print(n)' 2>/dev/null || echo 0)
    echo "$out" | tail -n 2 | cut -c1-300
    # 0: stopped cleanly on SIGTERM; 143: ended by it. 137: had to be killed.
    if [ "$reports" -ge 1 ] && { [ $rc -eq 0 ] || [ $rc -eq 143 ]; }; then
        echo "ok       carico agent --standalone: $reports JSON reports in ${AGENT_SECONDS} s, exit $rc on SIGTERM"
    else
        echo "FAILED   carico agent --standalone: $reports reports, exit $rc (137: did not stop on SIGTERM)"
        tail -n 20 "$(dirname "$ROOTFS")/agent.err"; failed=$((failed + 1))
    fi
    ;;
*) echo "--- carico agent: not built in this source tree, standalone run skipped" ;;
esac

case " $built " in
*" aggregator "*)
    echo "--- carico aggregator with mTLS material from carico certs"
    # Certificates on the tmpfs /tmp; 127.0.0.1 added to the server certificate for loopback.
    in_image carico certs --out /tmp/pki --extra-san aggregator=127.0.0.1 2>/dev/null
    log=$ROOTFS/tmp/aggregator.log
    agg_seconds=8
    case " $built " in *" agent "*) agg_seconds=20 ;; esac  # time for the agent's exchanges too
    in_image timeout --preserve-status -k 5 -s TERM "$agg_seconds" carico aggregator \
        --listen 127.0.0.1:0 --ops-listen 127.0.0.1:0 --log-level info --log-format json \
        --tls-cert /tmp/pki/aggregator.crt --tls-key /tmp/pki/aggregator.key \
        --tls-client-ca /tmp/pki/ca.crt 2>"$log" &
    pid=$!
    port=""; ops_port=""
    for _ in $(seq 50); do  # up to 5 s for the "serving" line with the free ports it chose
        read -r port ops_port < <(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    try:
        entry = json.loads(line)
        print(entry["grpc_port"], entry["ops_port"]); break
    except (ValueError, KeyError):
        pass' "$log" 2>/dev/null || true) || true
        [ -n "$port" ] && break
        sleep 0.1
    done
    if [ -z "$port" ]; then
        echo "FAILED   carico aggregator did not start"; tail -n 20 "$log"; failed=$((failed + 1))
    else
        # A client with the agent's certificate: the mTLS handshake must succeed, so the empty
        # model is refused by the service (INVALID_ARGUMENT), not by TLS (UNAVAILABLE).
        rc=0; reply=$(in_image python3 -c '
import sys, grpc
from carico.tls import grpc_channel_credentials
from protos.carico.v1 import aggregator_pb2, aggregator_pb2_grpc
creds = grpc_channel_credentials("/tmp/pki/ca.crt", "/tmp/pki/agent.crt", "/tmp/pki/agent.key")
with grpc.secure_channel("127.0.0.1:" + sys.argv[1], creds) as channel:
    try:
        aggregator_pb2_grpc.AggregatorStub(channel).Exchange(aggregator_pb2.LocalModel(), timeout=10)
        print("OK")
    except grpc.RpcError as exc:
        print(exc.code().name)
' "$port" 2>&1) || rc=$?
        if [ $rc -eq 0 ] && { [ "$reply" = INVALID_ARGUMENT ] || [ "$reply" = OK ]; }; then
            echo "ok       carico aggregator on 127.0.0.1:$port: mTLS Exchange answered $reply"
        else
            echo "FAILED   mTLS Exchange with carico aggregator: $reply"; failed=$((failed + 1))
        fi
        case " $built " in *" agent "*)
            # The real agent exchanges its model over mTLS; the aggregator counts what it accepted.
            rc=0
            in_image carico agent --aggregator "127.0.0.1:$port" --tls-ca /tmp/pki/ca.crt \
                --tls-cert /tmp/pki/agent.crt --tls-key /tmp/pki/agent.key --no-kube \
                --node-name smoke-node --metrics-port 0 --exchange-interval 1 --duration 6 \
                2>"$ROOTFS/tmp/agent-exchange.err" || rc=$?
            accepted=$(in_image python3 -c '
import sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode()
print(sum(float(line.split()[-1]) for line in text.splitlines()
          if line.startswith("carico_aggregator_exchanges_total{") and "accepted" in line))
' "$ops_port" 2>&1 || true)
            if [ $rc -eq 0 ] && python3 -c 'import sys; sys.exit(float(sys.argv[1]) < 1)' "$accepted" 2>/dev/null; then
                echo "ok       carico agent -> aggregator over mTLS: ${accepted%.0} exchanges accepted in 6 s"
            else
                echo "FAILED   agent -> aggregator: agent exit $rc, accepted: $accepted"
                tail -n 20 "$ROOTFS/tmp/agent-exchange.err"; failed=$((failed + 1))
            fi
            ;;
        esac
    fi
    rc=0; wait "$pid" || rc=$?
    if [ $rc -eq 0 ] || [ $rc -eq 143 ]; then
        echo "ok       carico aggregator stopped on SIGTERM (exit $rc)"
    else
        echo "FAILED   carico aggregator exit $rc on SIGTERM"; tail -n 20 "$log"; failed=$((failed + 1))
    fi
    ;;
esac

if [ $failed -ne 0 ]; then echo "image smoke test: $failed check(s) failed"; exit 1; fi
echo "image smoke test: all checks passed (commands built:$built)"
INNER
