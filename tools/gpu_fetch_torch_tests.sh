#!/usr/bin/env bash
# Here (Debian, with network): fetches PyTorch's own test files for the
# PyTorch-tests GPU check (tools/gpu_torch_tests.sh, issue 17) from Debian's
# pytorch source package, and puts test/test_dataloader.py, test_cuda.py,
# test_torch.py and the test/ modules they import (transitively; the
# installed torch provides torch.testing._internal) into each DEST folder
# (default .gpu/ext/torch-tests, ignored by git and carried to the GPU
# machine with carry [".gpu"]). Never committed: they are PyTorch's files.
#
#   tools/gpu_fetch_torch_tests.sh [--version PREFIX] [DEST...]
#
# The newest version that the mirror's Sources indexes (experimental, sid,
# trixie, bookworm and their backports) list and whose orig tarball the
# mirror serves is taken, closest to the GPU machine's torch; --version 1.13
# (or TORCH_TESTS_VERSION) takes the newest of that prefix instead (the CPU
# torch here is Debian 12's 1.13). The tarball's SHA-256 is checked against
# the index. DEST/SOURCE records what was fetched.
#
# torch.testing._internal needs expecttest, and test_cuda.py imports psutil;
# a torch wheel brings neither. Their wheels (pure Python, and psutil's
# abi3 one for any CPython 3) are unpacked into DEST/pylib, which the check
# puts last on PYTHONPATH: a module the test Python has wins. The same
# tarball's torch/testing/_internal/*.py go to DEST/torch26/testing/_internal
# (not importable as such: the shim reads names the installed torch lacks).
set -euo pipefail
cd "$(dirname "$0")/.."
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
want=${TORCH_TESTS_VERSION:-}
dests=()
while [ $# -gt 0 ]; do
  case "$1" in
    --version) [ $# -ge 2 ] || { echo "gpu_fetch_torch_tests.sh: --version needs a value (e.g. 2.6)" >&2; exit 2; }
               want=$2; shift 2 ;;
    --version=*) want=${1#--version=}; shift ;;
    -h|--help) sed -n 2,24p "$0"; exit 0 ;;
    -*) echo "gpu_fetch_torch_tests.sh: unknown option $1" >&2; exit 2 ;;
    *) dests+=("$1"); shift ;;
  esac
done
[ ${#dests[@]} -gt 0 ] || dests=(.gpu/ext/torch-tests)
for t in curl xz tar sha256sum python3; do
  command -v "$t" >/dev/null || { echo "gpu_fetch_torch_tests.sh: needs $t" >&2; exit 2; }
done

tmp=$(mktemp -d /tmp/torch-tests.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# version sha256 size directory file, one line per orig tarball of pytorch.
for suite in experimental sid trixie-backports trixie bookworm-backports bookworm; do
  curl -fsS --max-time 120 "$mirror/dists/$suite/main/source/Sources.xz" 2>/dev/null | xz -dc 2>/dev/null |
    awk '/^Package: /{p=($2=="pytorch")} p&&/^Version: /{v=$2} p&&/^Directory: /{d=$2}
         p&&/^Checksums-Sha256:/{s=1; next} s&&/^ /{if ($3 ~ /orig\.tar/) {sha=$1; sz=$2; f=$3}; next} {s=0}
         /^$/{if (p && f != "") print v, sha, sz, d, f; p=0; f=""}' >> "$tmp/index" || true
done
[ -s "$tmp/index" ] || { echo "gpu_fetch_torch_tests.sh: no pytorch source in $mirror's Sources indexes" >&2; exit 1; }
sort -u "$tmp/index" | sort -k1,1 -V -r > "$tmp/candidates"
if [ -n "$want" ]; then
  awk -v w="$want" 'index($1, w) == 1' "$tmp/candidates" > "$tmp/c2"
  [ -s "$tmp/c2" ] || { echo "gpu_fetch_torch_tests.sh: no pytorch source version $want*; the indexes list: $(cut -d' ' -f1 "$tmp/candidates" | tr '\n' ' ')" >&2; exit 1; }
  mv "$tmp/c2" "$tmp/candidates"
fi

got=""
while read -r version sha size dir file; do
  url="$mirror/$dir/${file//+/%2B}"
  echo "trying pytorch $version: $url ($((size / 1048576)) MiB)"
  if curl -fsS --max-time 600 -o "$tmp/$file" "$url"; then
    echo "$sha  $tmp/$file" | sha256sum -c --quiet - ||
      { echo "gpu_fetch_torch_tests.sh: $file: SHA-256 differs from the index" >&2; exit 1; }
    got="$version $sha $file"; break
  fi
  echo "  not on the mirror (the index is newer than the pool); next"
done < "$tmp/candidates"
[ -n "$got" ] || { echo "gpu_fetch_torch_tests.sh: the mirror serves none of: $(cut -d' ' -f1 "$tmp/candidates" | tr '\n' ' ')" >&2; exit 1; }
read -r version sha file <<< "$got"

mkdir "$tmp/src"
tar -xf "$tmp/$file" -C "$tmp/src" --wildcards '*/test/*.py' --no-wildcards-match-slash 2>/dev/null ||
  tar -xf "$tmp/$file" -C "$tmp/src" --wildcards '*/test/*.py'
# torch/testing/_internal/*.py of the same version: where the check's
# version-skew shim (tools/torch_tests_compat.py) takes what the GPU
# machine's newer torch.testing._internal no longer defines.
tar -xf "$tmp/$file" -C "$tmp/src" --wildcards '*/torch/testing/_internal/*.py' --no-wildcards-match-slash 2>/dev/null ||
  tar -xf "$tmp/$file" -C "$tmp/src" --wildcards '*/torch/testing/_internal/*.py'
internal=$(find "$tmp/src" -maxdepth 4 -type d -path '*/torch/testing/_internal' | head -1)
testdir=$(find "$tmp/src" -maxdepth 2 -type d -name test | head -1)
[ -n "$testdir" ] && [ -f "$testdir/test_dataloader.py" ] ||
  { echo "gpu_fetch_torch_tests.sh: $file has no test/test_dataloader.py" >&2; exit 1; }

# The three files and the test/*.py modules they import, transitively.
files=$(python3 - "$testdir" <<'PY'
import ast, os, sys
top = sys.argv[1]
todo = ["test_dataloader.py", "test_cuda.py", "test_torch.py"]
seen = []
while todo:
    f = todo.pop()
    if f in seen or not os.path.isfile(os.path.join(top, f)):
        continue
    seen.append(f)
    tree = ast.parse(open(os.path.join(top, f), encoding="utf-8").read(), f)
    for n in ast.walk(tree):
        names = []
        if isinstance(n, ast.Import):
            names = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
            names = [n.module]
        for m in names:
            cand = m.split(".")[0] + ".py"
            if os.path.isfile(os.path.join(top, cand)):
                todo.append(cand)
print("\n".join(sorted(seen)))
PY
)
for need in test_dataloader.py test_cuda.py test_torch.py; do
  grep -qx "$need" <<< "$files" || { echo "gpu_fetch_torch_tests.sh: $file has no test/$need" >&2; exit 1; }
done
mkdir "$tmp/whl" "$tmp/pylib"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 -d "$tmp/whl" expecttest==0.3.0 psutil==7.2.2 ||
  { echo "gpu_fetch_torch_tests.sh: pip download of expecttest and psutil failed" >&2; exit 1; }
for w in "$tmp"/whl/*.whl; do python3 -m zipfile -e "$w" "$tmp/pylib"; done
for d in "${dests[@]}"; do
  mkdir -p "$d"
  rm -rf "$d"/*.py "$d/pylib" "$d/torch26"
  cp -r "$tmp/pylib" "$d/pylib"
  if [ -n "$internal" ]; then
    mkdir -p "$d/torch26/testing/_internal"
    cp "$internal"/*.py "$d/torch26/testing/_internal/"
  fi
  for f in $files; do cp "$testdir/$f" "$d/"; done
  printf 'pytorch %s (Debian source %s, sha256 %s)\nfiles: %s\n' "$version" "$file" "$sha" "$(echo $files)" > "$d/SOURCE"
  echo "$d: $(echo $files) from pytorch $version"
done
