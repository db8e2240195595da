#!/usr/bin/env python3
"""Assembles pinscope's wheel from a CMake install tree (tools/build_wheel.sh
runs it; issue 18).

    make_wheel.py STAGE OUTDIR --version V [--carry /usr/lib/.../libunwind.so.8]

STAGE is `cmake --install BUILD --prefix STAGE`: bin/pinscope,
lib/libpinscope.so, share/pinscope/python, share/doc/pinscope. The wheel
carries that tree as it is, in its .data folders (scripts/ -> the
environment's bin/, data/ -> its root), so `pip install` reproduces the
install layout: ENV/bin/pinscope finds ENV/lib/libpinscope.so and
ENV/share/pinscope/python the way an install's does (cli/run_setup.cc), and
the docs the messages name are in ENV/share/doc/pinscope. No Python code.

Every ELF file is checked with readelf: it may need only glibc's libraries
and the C++ runtime (PINSCOPE_STATIC_DEPS links protobuf and zlib in); the
newest GLIBC_ symbol version any of them needs gives the manylinux tag.

--carry LIB puts a library the shim dlopens next to libpinscope.so
(libunwind.so.8: shim/stacks/stacks.cc looks there first), with the
libraries it needs beyond glibc (Debian's needs liblzma.so.5, found with
ldconfig -p), and sets the carried files' RUNPATH to $ORIGIN (patchelf), so
they load each other from the environment's lib/ and nothing from the
system.
"""
import argparse
import base64
import hashlib
import os
import re
import subprocess
import sys
import zipfile

ALLOWED = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
           "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "libstdc++.so.6", "libgcc_s.so.1"}


def die(msg):
    print("make_wheel.py: " + msg, file=sys.stderr)
    sys.exit(1)


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def elf_facts(path):
    """(NEEDED names, newest GLIBC_ version as (major, minor), machine)."""
    dyn = subprocess.run(["readelf", "-dW", path], capture_output=True, text=True)
    if dyn.returncode != 0:
        die("readelf -d %s: %s" % (path, dyn.stderr.strip()))
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn.stdout)
    ver = subprocess.run(["readelf", "-VW", path], capture_output=True, text=True).stdout
    glibc = max([tuple(int(x) for x in m) for m in re.findall(r"GLIBC_(\d+)\.(\d+)", ver)] or [(2, 17)])
    head = subprocess.run(["readelf", "-hW", path], capture_output=True, text=True).stdout
    machine = "x86_64" if "X86-64" in head else "aarch64" if "AArch64" in head else "unknown"
    return needed, glibc, machine


def system_library(soname):
    p = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True)
    for line in p.stdout.splitlines():
        parts = line.strip().split(" => ")
        if len(parts) == 2 and parts[0].split(" ")[0] == soname and "x86-64" in parts[0]:
            return parts[1]
    die("%s: not found with ldconfig -p (a library to carry needs it)" % soname)


def carried(libs):
    """[(soname, path)]: libs and what they need beyond ALLOWED, transitively."""
    out, todo = [], [(os.path.basename(l), l) for l in libs]
    while todo:
        name, path = todo.pop(0)
        if any(n == name for n, _ in out):
            continue
        if not os.path.isfile(path):
            die("--carry %s: not a file" % path)
        out.append((name, path))
        for n in elf_facts(path)[0]:
            if n not in ALLOWED:
                todo.append((n, system_library(n)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("stage")
    ap.add_argument("outdir")
    ap.add_argument("--version", required=True)
    ap.add_argument("--carry", action="append", default=[], help="a library to put next to libpinscope.so")
    args = ap.parse_args()
    if not re.fullmatch(r"\d+(\.\d+)*([a-z0-9.+-]*)", args.version):
        die("--version %r is not a version like 0.1.0" % args.version)
    stage = os.path.abspath(args.stage)
    exe = os.path.join(stage, "bin", "pinscope")
    libdirs = [d for d in ("lib", "lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu")
               if os.path.isfile(os.path.join(stage, d, "libpinscope.so"))]
    if not os.path.isfile(exe):
        die("%s: no bin/pinscope (is it a `cmake --install` tree?)" % stage)
    if not libdirs:
        die("%s: no lib/libpinscope.so" % stage)
    for need in ("share/pinscope/python/pinscope_hook.py", "share/doc/pinscope/cli.md"):
        if not os.path.isfile(os.path.join(stage, need)):
            die("%s: no %s" % (stage, need))

    # (path in the wheel, file on disk, executable)
    files = [("scripts/pinscope", exe, True),
             ("data/lib/libpinscope.so", os.path.join(stage, libdirs[0], "libpinscope.so"), True)]
    patched = []
    if args.carry:
        import shutil
        import tempfile
        if not shutil.which("patchelf"):
            die("--carry needs patchelf (apt install patchelf) to set the carried libraries' RUNPATH")
        tmp = tempfile.mkdtemp(prefix="make_wheel.")
        for name, path in carried(args.carry):
            copy = os.path.join(tmp, name)
            shutil.copyfile(path, copy)
            subprocess.run(["patchelf", "--set-rpath", "$ORIGIN", copy], check=True)
            files.append(("data/lib/" + name, copy, True))
            patched.append(name)
    for top in ("share/pinscope", "share/doc/pinscope"):
        for root, dirs, names in os.walk(os.path.join(stage, top)):
            dirs.sort()
            for n in sorted(names):
                if n.endswith(".pyc"):
                    continue
                full = os.path.join(root, n)
                files.append(("data/" + os.path.relpath(full, stage), full, False))

    glibc, machine = (2, 17), None
    for _, full, _ in files:
        if not is_elf(full):
            continue
        needed, g, m = elf_facts(full)
        bad = [n for n in needed if n not in ALLOWED and n not in patched]
        if bad:
            die("%s needs %s, which a wheel cannot assume: configure with -DPINSCOPE_STATIC_DEPS=ON "
                "(libprotobuf.a, libz.a)" % (os.path.relpath(full, stage), ", ".join(bad)))
        glibc = max(glibc, g)
        if machine and m != machine:
            die("%s is %s, the rest %s" % (full, m, machine))
        machine = m
    tag = "py3-none-manylinux_%d_%d_%s" % (glibc[0], glibc[1], machine)
    name = "pinscope-%s" % args.version
    data = name + ".data"
    info = name + ".dist-info"
    metadata = (
        "Metadata-Version: 2.1\nName: pinscope\nVersion: %s\n"
        "Summary: finds why a PyTorch job's GPU waits for data (LD_PRELOAD profiler of host<->device copies)\n"
        "License: see the source tree\nRequires-Python: >=3.8\n" % args.version)
    wheel = "Wheel-Version: 1.0\nGenerator: pinscope tools/make_wheel.py\nRoot-Is-Purelib: false\nTag: %s\n" % tag

    os.makedirs(args.outdir, exist_ok=True)
    out = os.path.join(args.outdir, "pinscope-%s-%s.whl" % (args.version, tag))
    record = []

    def add(z, arcname, payload, mode):
        zi = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
        zi.external_attr = (0o100000 | mode) << 16
        zi.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(zi, payload)
        digest = base64.urlsafe_b64encode(hashlib.sha256(payload).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (arcname, digest, len(payload)))

    with zipfile.ZipFile(out, "w") as z:
        for arc, full, x in files:
            with open(full, "rb") as f:
                add(z, data + "/" + arc, f.read(), 0o755 if x else 0o644)
        add(z, info + "/METADATA", metadata.encode(), 0o644)
        add(z, info + "/WHEEL", wheel.encode(), 0o644)
        record.append(info + "/RECORD,,")
        zi = zipfile.ZipInfo(info + "/RECORD", date_time=(2020, 1, 1, 0, 0, 0))
        zi.external_attr = (0o100644) << 16
        z.writestr(zi, "\n".join(record) + "\n")
    print(out)


if __name__ == "__main__":
    main()
