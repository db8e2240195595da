#!/usr/bin/env bash
# Builds pinscope here (Debian 12, glibc 2.36) into .gpu/prefix for the GPU
# machine (Ubuntu 24.04, glibc 2.39), which has no network and lacks
# libunwind and libdw: the libraries it lacks are copied next to ours and
# found through RPATH ($ORIGIN/../lib). Debian's .debs of the build
# dependencies go to .gpu/debs so tools/gpu_validate.sh can also build the
# shim from source there. .gpu/ is ignored by git and carried by the device
# tool (carry: [".gpu"]).
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu/prefix
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPINSCOPE_BUILD_TESTS=OFF \
  -DCMAKE_INSTALL_PREFIX="$PWD/.gpu/prefix" -DCMAKE_INSTALL_LIBDIR=lib \
  -DCMAKE_INSTALL_RPATH='$ORIGIN/../lib;$ORIGIN' >/dev/null
cmake --build build-gpu -j"$(nproc)"
cmake --install build-gpu >/dev/null
for exe in .gpu/prefix/bin/pinscope .gpu/prefix/lib/libpinscope.so; do
  ldd "$exe" | awk '/=> \// {print $3}' | grep -E 'lib(protobuf|dw|elf|unwind)[.-]' || true
done | sort -u | while read -r lib; do cp -L "$lib" .gpu/prefix/lib/; done
# libunwind is dlopen'ed by the shim (shim/stacks/stacks.cc), so ldd does not list it.
cp -L "$(ldconfig -p | awk '/libunwind.so.8 .*x86-64/ {print $NF; exit}')" .gpu/prefix/lib/
mkdir -p .gpu/debs
(cd .gpu/debs && [ -n "$(ls *.deb 2>/dev/null)" ] ||
  apt-get download libunwind-dev libunwind8 nlohmann-json3-dev libdw-dev libdw1 libelf-dev libelf1 >/dev/null 2>&1 || true)
cp -r tests/gpu tools/bench .gpu/ 2>/dev/null || true
du -sh .gpu
ls .gpu/prefix/bin .gpu/prefix/lib
