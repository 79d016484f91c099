"""A user's own training script, as one is written: nothing of LoaderLab in it. CUDA when there is one, else CPU.

    python examples/observe/train_cuda.py [--workers 0] [--epochs 3] [--n 1536]
    python -m engine observe -- python examples/observe/train_cuda.py
    python -m engine tune --budget 2m -- python examples/observe/train_cuda.py

A small CNN on JPEG-like images decoded and cropped per item (PIL, CPU work a worker can take), plus a validation
loader iterated after each epoch (`engine tune` tunes the training one: it delivers the most batches).
LOADERLAB_TRIAL is set under `engine tune`'s trials: the script skips its checkpoint then.
"""

import argparse
import io
import os
import time

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Jpegs(Dataset):
    """n JPEG blobs made once; each item is decoded, randomly cropped and turned into a tensor."""

    def __init__(self, n: int, px: int = 96, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.blobs = []
        for _ in range(n):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (px, px, 3), dtype=np.uint8)).save(buf, "JPEG", quality=85)
            self.blobs.append(buf.getvalue())

    def __len__(self):
        return len(self.blobs)

    def __getitem__(self, i):
        img = Image.open(io.BytesIO(self.blobs[i])).convert("RGB")
        x0, y0 = np.random.randint(0, 17, 2)
        img = img.crop((x0, y0, x0 + 80, y0 + 80)).rotate(float(np.random.uniform(-10, 10)))
        x = torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).permute(2, 0, 1)
        return x, i % 10


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--n", type=int, default=1536)
    args = p.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, 2, 1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, 2, 1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    train = DataLoader(Jpegs(args.n), batch_size=64, shuffle=True, num_workers=args.workers, pin_memory=dev == "cuda")
    val = DataLoader(Jpegs(256, seed=1), batch_size=128)
    for epoch in range(args.epochs):
        t0 = time.perf_counter()
        for x, y in train:
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            correct = sum((model(x.to(dev)).argmax(1).cpu() == y).sum().item() for x, y in val)
        if dev == "cuda":
            torch.cuda.synchronize()
        print(f"epoch {epoch} {time.perf_counter() - t0:.3f}s loss {loss.item():.3f} val {correct}/256", flush=True)
    if not os.environ.get("LOADERLAB_TRIAL"):
        torch.save(model.state_dict(), os.devnull)  # the checkpoint a trial skips


if __name__ == "__main__":
    main()
