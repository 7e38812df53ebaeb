#!/usr/bin/env bash
# Installs Debian's Chromium and chromedriver when missing (the dashboard's browser test drives
# them). Needs root or sudo; fails with a clear message otherwise.
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "make browser: /usr/bin/chromium and /usr/bin/chromedriver are missing and there is no" \
         "apt-get to install them; install Chromium and its driver by hand" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null; then SUDO="sudo"; else
        echo "make browser: installing chromium needs root (or sudo):" \
             "apt-get install -y chromium chromium-driver" >&2
        exit 1
    fi
fi
echo "make browser: installing chromium and chromium-driver with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -q chromium chromium-driver >/dev/null \
    || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q chromium chromium-driver >/dev/null; }
