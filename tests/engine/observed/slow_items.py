"""A plain PyTorch script whose items wait about 3 ms each (I/O-like), as users write it: nothing of LoaderLab in it.

    python slow_items.py [--epochs N] [--workers N] [--iterable] [--val] [--lambda-collate] [--remade]

--iterable: an IterableDataset that splits itself over the workers (get_worker_info); --val: a validation loader
beside the training one, iterated after each training epoch; --lambda-collate: a collate_fn that is a lambda, which
a spawned worker cannot unpickle; --remade: the training loader made anew each epoch (at one line).
LOADERLAB_TRIAL is read as a script would read it: no checkpoint under a trial. $SLOW_ITEMS_WAIT_MS sets the wait.
$SLOW_ITEMS_MARK (a folder): each run leaves a file there, trial-PID under a trial, own-PID otherwise.
"""

import argparse
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

N, WAIT_S = 96, float(os.environ.get("SLOW_ITEMS_WAIT_MS", "3")) / 1000


class Slow(Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        time.sleep(WAIT_S)
        return torch.full((8,), float(i)), i % 2


class SlowStream(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        start, step = (info.id, info.num_workers) if info else (0, 1)
        for i in range(start, N, step):
            time.sleep(WAIT_S)
            yield torch.full((8,), float(i)), i % 2


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--iterable", action="store_true")
    p.add_argument("--val", action="store_true")
    p.add_argument("--lambda-collate", action="store_true")
    p.add_argument("--remade", action="store_true")
    args = p.parse_args()
    if os.environ.get("SLOW_ITEMS_MARK"):
        kind = "trial" if os.environ.get("LOADERLAB_TRIAL") else "own"
        open(os.path.join(os.environ["SLOW_ITEMS_MARK"], f"{kind}-{os.getpid()}"), "w").close()
    extra = {"collate_fn": lambda batch: torch.utils.data.default_collate(batch)} if args.lambda_collate else {}

    def make_train():
        return DataLoader(SlowStream() if args.iterable else Slow(), batch_size=8, num_workers=args.workers, **extra)

    train = make_train()
    val = DataLoader(Slow(), batch_size=32) if args.val else None
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(args.epochs):
        if args.remade and epoch:
            train = make_train()
        seen = 0
        for x, y in train:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += len(x)
        if val is not None:
            with torch.no_grad():
                sum(model(x).sum().item() for x, _ in val)
        print(f"epoch {epoch} samples {seen}", flush=True)
    if not os.environ.get("LOADERLAB_TRIAL"):
        print("checkpoint saved", flush=True)


if __name__ == "__main__":
    main()
