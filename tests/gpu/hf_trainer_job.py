#!/usr/bin/env python3
"""A Hugging Face Trainer job as a user writes one: a small BERT (random
weights, no download) fine-tuned for sequence classification on synthetic
token ids, with the Trainer's own DataLoader (dataloader_num_workers,
pin_memory as the Trainer sets it). Run under pinscope by
tools/gpu_pipeline.sh; the loop's rate comes from pinscope's Python hook
(PINSCOPE_THROUGHPUT) and the Trainer's own train_samples_per_second.

    python3 hf_trainer_job.py [--batch 64] [--workers 4] [--steps 60]
        [--eval-steps N] [--tiny]

--eval-steps N evaluates every N steps on a held-out set of 10 batches (the
Trainer's own evaluation loop, another DataLoader on the training thread);
--tiny is a 2-layer, 64-wide BERT for a run on the CPU.
"""
import argparse
import inspect
import json
import os

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class Tokens(Dataset):
    def __init__(self, n, seq, vocab):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i]),
                "labels": self.labels[i]}


def make_model(tiny=False):
    """The job's small BERT with random weights (tools/bench/turns.py builds
    it too): (config, model)."""
    width, layers = (64, 2) if tiny else (256, 4)
    config = BertConfig(vocab_size=30522, hidden_size=width, num_hidden_layers=layers,
                        num_attention_heads=4, intermediate_size=4 * width,
                        max_position_embeddings=512, num_labels=2)
    return config, BertForSequenceClassification(config)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--eval-steps", type=int, default=0)
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args()
    config, model = make_model(args.tiny)
    out = os.environ.get("HF_OUT", "/tmp/hf-out")
    evaluation = {}
    if args.eval_steps:
        # transformers 4.46 renamed evaluation_strategy to eval_strategy.
        fields = inspect.signature(TrainingArguments.__init__).parameters
        name = "eval_strategy" if "eval_strategy" in fields else "evaluation_strategy"
        evaluation = {name: "steps", "eval_steps": args.eval_steps,
                      "per_device_eval_batch_size": args.batch}
    targs = TrainingArguments(output_dir=out, per_device_train_batch_size=args.batch,
                              max_steps=args.steps, dataloader_num_workers=args.workers,
                              logging_strategy="no", save_strategy="no", report_to=[],
                              disable_tqdm=True, seed=0, **evaluation)
    trainer = Trainer(model=model, args=targs,
                      train_dataset=Tokens(args.batch * (args.steps + 2), args.seq, config.vocab_size),
                      eval_dataset=Tokens(args.batch * 10, args.seq, config.vocab_size)
                      if args.eval_steps else None)
    result = trainer.train()
    print(json.dumps({"job": "hf_trainer", "batch": args.batch, "workers": args.workers,
                      "train_samples_per_second": result.metrics.get("train_samples_per_second")}),
          flush=True)


if __name__ == "__main__":
    main()
