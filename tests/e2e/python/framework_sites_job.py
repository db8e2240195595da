"""Three DataLoaders built the ways frameworks build them, for the Python
hook's construction sites (python_hook_test, TheSiteNamesTheJobsLine...):
the Hugging Face Trainer through accelerate, Lightning's train_dataloader()
under its __init__ wrapper, and a library's factory. The stand-ins live in
fake_frameworks/site-packages (on PYTHONPATH), named as the real packages,
since the hook knows a framework by the path of its files. Each loader is
iterated once (2 batches); prints "loaders 3"."""
import torch
from torch.utils.data import DataLoader, TensorDataset

import lightning.pytorch.trainer
import mylib.loaders
import transformers.trainer

DATA = TensorDataset(torch.arange(8, dtype=torch.float32))


class Module:
    def train_dataloader(self):
        return DataLoader(DATA, batch_size=4)  # USER LOADER


def main():
    batches = transformers.trainer.Trainer(DATA, 4).train()  # TRAINER
    batches += lightning.pytorch.trainer.Trainer().fit(Module())  # FIT
    batches += sum(1 for _ in mylib.loaders.make_loader(DATA, 4))  # FACTORY CALL
    assert batches == 6, batches
    print("loaders 3", flush=True)


if __name__ == "__main__":
    main()
