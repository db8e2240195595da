# PyTorch test script for tests/e2e/stacks (stacks_e2e_test runs it under
# LD_PRELOAD=libpinscope.so with the CPU PyTorch): a DataLoader with two
# forked workers. Each item and each batch is a tensor allocated (by
# c10::alloc_cpu, with the GIL released by PyTorch) at a known line; the
# batches reach the main process through shared memory.
import torch
from torch.utils.data import DataLoader, Dataset


class Items(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.full((2 << 20,), i, dtype=torch.uint8)  # @item


def collate(items):
    return torch.stack(items)  # @collate


def main():
    loader = DataLoader(Items(), batch_size=4, num_workers=2, collate_fn=collate)
    total = 0
    for batch in loader:  # @loop
        total += int(batch[:, 0].sum())
    if total != sum(range(8)):
        raise SystemExit(1)


main()  # @module
