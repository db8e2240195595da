#!/usr/bin/env python3
"""A Lightning job as a user writes one: a LightningModule (a small convnet
on synthetic 3x96x96 images with a CPU augmentation per sample) and a
LightningDataModule whose train_dataloader() builds the DataLoader, fitted by
Lightning's Trainer on one GPU. Lightning wraps DataLoader.__init__ while
train_dataloader() runs and moves each batch with its own
batch_to_device (non_blocking); pinscope has never been tuned on it (a
held-out job, tools/gpu_pipeline.sh heldoutC). The loop's rate comes from
pinscope's Python hook (PINSCOPE_THROUGHPUT).

    python3 lightning_job.py [--batch 128] [--workers 2] [--steps 200]
        [--pin-memory 0|1] [--aug-ms 0.5]
"""
import argparse
import json
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

try:
    import lightning.pytorch as pl
except ImportError:  # the older package name
    import pytorch_lightning as pl


class Images(Dataset):
    """Synthetic images; each sample costs `aug_ms` of CPU (a stand-in for
    decoding and augmentation) and is flipped at random."""

    def __init__(self, n, aug_ms):
        self.n = n
        self.aug_ms = aug_ms

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.rand(3, 96, 96, generator=g)
        if self.aug_ms > 0:
            end = time.perf_counter() + self.aug_ms / 1000.0
            while time.perf_counter() < end:
                x = x.flip(2) if torch.rand(1, generator=g).item() < 0.5 else x
        return x, i % 10


class Data(pl.LightningDataModule):
    def __init__(self, args):
        super().__init__()
        self.args = args

    def train_dataloader(self):
        a = self.args
        return DataLoader(Images(a.batch * (a.steps + 10), a.aug_ms), batch_size=a.batch,
                          shuffle=True, num_workers=a.workers, pin_memory=bool(a.pin_memory),
                          persistent_workers=a.workers > 0)


class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))

    def training_step(self, batch, _):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--pin-memory", type=int, default=1)
    ap.add_argument("--aug-ms", type=float, default=0.5)
    args = ap.parse_args()
    torch.manual_seed(0)
    trainer = pl.Trainer(accelerator="gpu", devices=1, max_steps=args.steps, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0)
    t0 = time.perf_counter()
    trainer.fit(Net(), datamodule=Data(args))
    took = time.perf_counter() - t0
    print(json.dumps({"job": "lightning", "batch": args.batch, "workers": args.workers,
                      "steps": args.steps, "samples_per_s": round(args.batch * args.steps / took, 1)}),
          flush=True)


if __name__ == "__main__":
    main()
