#!/usr/bin/env bash
# On the GPU machine (Ubuntu 24.04, no network): builds pinscope from this
# working tree into /tmp/ps (bin/pinscope, lib/libpinscope.so,
# share/pinscope/python) with the Debian .debs that tools/gpu_fetch_debs.sh
# put in .gpu/debs (libunwind, libdw, libelf, nlohmann-json, libzstd-dev's
# libzstd.a and zstd.h, which both libpinscope.so and bin/pinscope link
# statically: what that machine lacks). libdw's pkg-config file asks for liblzma's, which the
# machine lacks: a stub .pc answers; the .pc files name /usr/include, so the
# unpacked headers are added by hand. About 30 s with -j16. Protobuf stays
# shared (PINSCOPE_STATIC_DEPS=OFF), as it always linked there; the wheel
# (tools/build_wheel.sh, built elsewhere) is the glibc-only build.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${PINSCOPE_PREFIX:-/tmp/ps}
deps=/tmp/psdeps
rm -rf "$deps"; mkdir -p "$deps/usr/lib/x86_64-linux-gnu/pkgconfig"
for d in .gpu/debs/*.deb; do dpkg -x "$d" "$deps"; done
cat > "$deps/usr/lib/x86_64-linux-gnu/pkgconfig/liblzma.pc" <<'PC'
Name: liblzma
Description: stub: the machine has liblzma.so but not its .pc
Version: 5.4.5
Libs:
Cflags:
PC
export PKG_CONFIG_PATH="$deps/usr/lib/x86_64-linux-gnu/pkgconfig:$deps/usr/share/pkgconfig:${PKG_CONFIG_PATH:-}"
export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
cmake -S . -B /tmp/psbuild -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPINSCOPE_BUILD_TESTS=OFF -DPINSCOPE_STATIC_DEPS=OFF \
  -DCMAKE_PREFIX_PATH="$deps/usr" -DCMAKE_CXX_FLAGS="-I$deps/usr/include" \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib \
  -DCMAKE_INSTALL_RPATH="\$ORIGIN/../lib;$deps/usr/lib/x86_64-linux-gnu" >/tmp/psbuild.log 2>&1 ||
  { tail -30 /tmp/psbuild.log; exit 1; }
cmake --build /tmp/psbuild -j"$(nproc)" >>/tmp/psbuild.log 2>&1 || { tail -40 /tmp/psbuild.log; exit 1; }
cmake --install /tmp/psbuild >>/tmp/psbuild.log 2>&1
cp -L "$deps"/usr/lib/x86_64-linux-gnu/libunwind.so.8 "$prefix/lib/" 2>/dev/null || true
echo "built $prefix: $(ls "$prefix/bin" "$prefix/lib" | tr '\n' ' ')"
