#!/usr/bin/env bash
# Here (Debian 12, with network): downloads the .debs that tools/gpu_build.sh
# unpacks on the GPU machine into .gpu/debs (ignored by git, carried by the
# device tool: carry [".gpu"]), and pytorch/examples' imagenet/main.py into
# .gpu/ext when the mirror of that repository is here (never committed).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu/debs .gpu/ext
(cd .gpu/debs && apt-get download libunwind-dev libunwind8 nlohmann-json3-dev libdw-dev libdw1 \
  libelf-dev libelf1 libzstd-dev zstd 2>/dev/null)
mirror=/work/.mirror/pytorch+examples/repo
if [ -d "$mirror" ]; then git -C "$mirror" show HEAD:imagenet/main.py > .gpu/ext/imagenet_main.py; fi
ls -la .gpu/debs .gpu/ext
