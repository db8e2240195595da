#!/usr/bin/env bash
# Installs what pinscope needs to build and test on Debian/Ubuntu (apt).
# Idempotent: skips apt when everything is already there. The CUDA toolkit
# (headers only; CUPTI headers) is expected under /usr/local/cuda or
# $CUDA_HOME: pinscope never links the CUDA runtime.
set -euo pipefail

pkgs=(cmake make g++ pkg-config
      libprotobuf-dev protobuf-compiler
      libgtest-dev libgmock-dev
      nlohmann-json3-dev
      libunwind-dev libdw-dev libelf-dev
      python3 python3-torch python3-numpy python3-protobuf python3-pip
      clang-14 libclang-rt-14-dev
      libjemalloc2 libtcmalloc-minimal4 valgrind
      util-linux zlib1g-dev
      libzstd-dev zstd  # libzstd.a (trace compression, linked in); zstd -dc for trace_dump.py
      python3-venv dpkg-dev patchelf)  # tools.wheel: a venv; dpkg-shlibdeps (.deb); RUNPATH of carried libs

# chromium-headless-shell (Debian bookworm's, from the chromium source):
# the HTML report's browser test opens the page and takes a screenshot (with
# the DejaVu fonts, so the text it draws is the same on every machine).
pkgs+=(chromium-headless-shell fonts-dejavu-core)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "tools/deps.sh: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Perfetto's own trace schema (perfetto_trace_pb2.py) validates
# `pinscope export --perfetto` in the tests; --no-deps keeps Debian's
# protobuf in place (the checker reads the schema without importing it).
if ! /usr/bin/python3 -c 'import importlib.util, sys; sys.exit(0 if importlib.util.find_spec("perfetto") else 1)' 2>/dev/null; then
  echo "tools/deps.sh: installing perfetto==0.59.1 (pip, for the export tests)"
  /usr/bin/python3 -m pip install -q --break-system-packages --no-deps --root-user-action=ignore perfetto==0.59.1
fi

cuda_inc="${CUDA_HOME:-/usr/local/cuda}/include"
if [ ! -f "$cuda_inc/cuda_runtime_api.h" ]; then
  echo "tools/deps.sh: CUDA headers not found in $cuda_inc (install the CUDA toolkit or set CUDA_HOME)" >&2
  exit 1
fi
