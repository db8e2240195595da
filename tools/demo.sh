#!/usr/bin/env bash
# README's main job. Builds pinscope (tools/deps.sh installs what it needs),
# then:
#  - on a machine with an NVIDIA GPU and PyTorch: runs the bundled DataLoader
#    job (the seed benchmark, 4 workers) under `pinscope run` and prints the
#    report;
#  - elsewhere: prints the report of a trace recorded on an H200 that ships
#    in examples/: pytorch/examples' ImageNet training (ResNet-18, 4 workers).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
build="${BUILD_DIR:-build}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target pinscope_cli pinscope
ps="$build/bin/pinscope"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 &&
   python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "GPU found: running the seed DataLoader benchmark under pinscope"
  exec "$ps" run -- python3 tools/bench/seedbench.py --samples 2560 --configs 4f
fi
echo "No GPU here: the report of a trace recorded on an NVIDIA H200 (examples/h200-imagenet-resnet18:"
echo "pytorch/examples imagenet/main.py -a resnet18 --dummy -j 4 -b 256)"
echo
"$ps" report examples/h200-imagenet-resnet18
