#!/usr/bin/env bash
# Carico's container image for the real node of the e2e tier: `make image` (deploy/image/build.sh,
# unchanged, so the tests run the image users get), skipped while the sources it packs are those
# of the last build. The key (a hash of those files and of build.sh) is kept beside the layout.
#
#   image.sh              build .cache/image/oci unless it is current; print the layout's path
#   image.sh --print-dir  print that path without building
#   image.sh --check      exit 0 when the layout is current, 1 when it must be (re)built
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
out=${CARICO_IMAGE_DIR:-$repo/.cache/image}
layout=$out/oci
if [[ ${1-} == --print-dir ]]; then echo "$layout"; exit 0; fi

# What build.sh copies into the image (its tar list), plus the script itself.
key=$(cd "$repo" && git ls-files -z -- pyproject.toml README.md carico carico_app agent aggregator \
        scheduler_ext repack protos deploy/image/build.sh \
      | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
if [[ -f $layout/index.json && -f $out/source-key && $(cat "$out/source-key") == "$key" ]]; then
  [[ ${1-} == --check ]] || echo "$layout"
  exit 0
fi
[[ ${1-} != --check ]] || exit 1
rm -f "$out/source-key"
start=$SECONDS
echo "image: building Carico's image (deploy/image/build.sh); log in $out/build.log" >&2
mkdir -p "$out"
bash "$repo/deploy/image/build.sh" >"$out/build.log" 2>&1 \
  || { tail -n 20 "$out/build.log" >&2; echo "image: deploy/image/build.sh failed" >&2; exit 1; }
echo "$key" >"$out/source-key"
echo "image: built in $((SECONDS - start)) s" >&2
echo "$layout"
