#!/usr/bin/env bash
# Builds pinscope's wheel (issue 18) and, with --deb, its Debian package, from
# one CMake build: the targets an install needs (bin/pinscope,
# libpinscope.so), `cmake --install` into a staging tree, then
# tools/make_wheel.py packs that tree (and cpack -G DEB the same install).
#
#   tools/build_wheel.sh [--build DIR] [--out DIR] [--deb] [--no-libunwind]
#   pip install OUT/pinscope-*.whl      # then: pinscope run -- python train.py
#
# DIR (default build) is configured if it is not yet; PINSCOPE_STATIC_DEPS
# (AUTO: ON where libprotobuf.a and libz.a are) makes bin/pinscope need
# nothing but glibc, which make_wheel.py checks. OUT defaults to DIR/wheel.
# The wheel carries this machine's libunwind.so.8 (and the liblzma.so.5 it
# needs) next to libpinscope.so, RUNPATH $ORIGIN (patchelf), for native call
# stacks where the machine has no libunwind; --no-libunwind leaves it out.
# The .deb depends on the system's libunwind8 instead (Recommends).
#
# Why not scikit-build-core: it would run this same CMake build from pip,
# in an isolated environment that pip fills from PyPI (scikit-build-core,
# cmake, ninja): no build without network, and a second full build of the
# analyzer in CI. The install tree is what the wheel carries either way.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build; out=""; deb=0; unwind=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=${2:?--build needs a folder}; shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --deb) deb=1; shift ;;
    --no-libunwind) unwind=0; shift ;;
    -h|--help) sed -n 2,17p "$0"; exit 0 ;;
    *) echo "build_wheel.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
out=${out:-$build/wheel}
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPINSCOPE_BUILD_TESTS=OFF
fi
cmake --build "$build" -j"${JOBS:-$(nproc)}" --target pinscope pinscope_cli
stage="$build/wheel-stage"
rm -rf "$stage"
cmake --install "$build" --prefix "$stage" --strip >/dev/null  # no debug info: 3 MB, not 21
version=$("$stage/bin/pinscope" --version | awk '{print $NF}')
mkdir -p "$out"
rm -f "$out"/pinscope-*.whl
carry=()
if [ "$unwind" = 1 ]; then
  lib=$(ldconfig -p | awk '$1 == "libunwind.so.8" && /x86-64/ && !n++ {print $NF}')
  [ -n "$lib" ] || { echo "build_wheel.sh: no libunwind.so.8 here to carry (apt install libunwind8, or --no-libunwind)" >&2; exit 2; }
  carry=(--carry "$lib")
fi
python3 tools/make_wheel.py "$stage" "$out" --version "$version" "${carry[@]}"
if [ "$deb" = 1 ]; then
  (cd "$build" && cpack -G DEB -B "$(realpath "$out")" >/dev/null) && rm -rf "$out/_CPack_Packages" && ls "$out"/*.deb
fi
