"""A plain PyTorch training script, as users write it: nothing of LoaderLab in it.

    python train_script.py [--epochs N] [--workers N] [--fail-at-epoch K] [--exit-code C]

A training loader and a validation loader; the validation pass runs between two training steps, in the middle of
each training epoch. --fail-at-epoch raises in the middle of that epoch; --exit-code ends with sys.exit(C).
"""

import argparse
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    """n samples of 8 features; the label says whether their sum is positive."""

    def __init__(self, n: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 8, generator=g)
        self.y = (self.x.sum(1) > 0).long()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--fail-at-epoch", type=int, default=-1)
    p.add_argument("--exit-code", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(0)
    train = DataLoader(
        Squares(256, 0),
        batch_size=32,
        shuffle=True,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
        prefetch_factor=3 if args.workers else None,
    )
    val = DataLoader(Squares(64, 1), batch_size=16)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        for step, (x, y) in enumerate(train):
            if epoch == args.fail_at_epoch and step == 3:
                raise RuntimeError(f"diverged at epoch {epoch}")
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step == 4:  # a validation pass between two training steps
                with torch.no_grad():
                    correct = sum((model(vx).argmax(1) == vy).sum().item() for vx, vy in val)
        print(f"epoch {epoch} loss {loss.item():.3f} val {correct}/64", flush=True)
    sys.exit(args.exit_code)


if __name__ == "__main__":
    main()
