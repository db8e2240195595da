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
      python3 python3-torch python3-numpy python3-protobuf
      util-linux)

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

cuda_inc="${CUDA_HOME:-/usr/local/cuda}/include"
if [ ! -f "$cuda_inc/cuda_runtime_api.h" ]; then
  echo "tools/deps.sh: CUDA headers not found in $cuda_inc (install the CUDA toolkit or set CUDA_HOME)" >&2
  exit 1
fi
