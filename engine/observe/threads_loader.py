"""The lab's threads loader for a script's map-style dataset: what a trial of `engine tune -- python train.py` runs
where a candidate's loader is "threads" (engine/observe/_trial.py), and, as its source, the code the answer pastes
into the script (engine/advice/_script_change.py): the class below needs only IMPORTS, which the answer adds where
the script lacks them.

    loader = ThreadsLoader(dataset, batch_size=32, shuffle=True, num_workers=8, prefetch_factor=2)
"""

from __future__ import annotations

import warnings

import torch
import torchdata.nodes as tn
from torch.utils.data import DataLoader

__all__ = ["IMPORTS", "ThreadsLoader"]

# what the pasted class needs
IMPORTS = (
    "import warnings",
    "import torch",
    "import torchdata.nodes as tn",
    "from torch.utils.data import DataLoader",
)


class ThreadsLoader:
    """A DataLoader's batches made by threads of this process (torchdata.nodes.ParallelMapper, method="thread"):
    for items that wait (reads, sleeps, decoders that release the GIL), threads overlap the waits without a process
    per worker. DataLoader's arguments; a map-style dataset only; the order is the sampler's. Those about worker
    processes do not apply to threads: a warning names timeout or worker_init_fn where one was given."""

    # DataLoader's arguments for worker processes that would change what a script gets, and their defaults: threads
    # of this process do not use them (a worker_init_fn that seeds or opens a file per worker is not called here).
    # The others (persistent_workers, multiprocessing_context, in_order) change nothing a script sees.
    # NOTE: in the class, not the module: the answer pastes the class alone (and IMPORTS) into the user's script
    PROCESS_ONLY = {"timeout": 0, "worker_init_fn": None}

    def __init__(
        self,
        dataset,
        batch_size=1,
        shuffle=False,
        sampler=None,
        batch_sampler=None,
        num_workers=0,
        collate_fn=None,
        pin_memory=False,
        drop_last=False,
        *_,
        prefetch_factor=2,
        generator=None,
        **rest,
    ):
        unused = [k for k, default in self.PROCESS_ONLY.items() if rest.get(k, default) != default]
        if unused:
            warnings.warn(
                f"ThreadsLoader makes batches on threads of this process: {' and '.join(unused)} (for worker "
                "processes) is not used here; set per-worker state in the dataset itself",
                stacklevel=2,
            )
        # NOTE: a loader without workers, never iterated: its batch sampler and collate_fn are DataLoader's own
        self.plain = DataLoader(
            dataset,
            batch_size,
            shuffle,
            sampler,
            batch_sampler,
            0,
            collate_fn,
            drop_last=drop_last,
            generator=generator,
        )
        self.dataset, self.batch_size = dataset, self.plain.batch_size
        self.num_workers, self.prefetch_factor, self.pin_memory = max(1, num_workers), prefetch_factor or 2, pin_memory

    def __len__(self):
        return len(self.plain)

    def __iter__(self):
        dataset, collate = self.dataset, self.plain.collate_fn
        # NOTE: as DataLoader's iterator does before its sampler's first index: it draws its workers' base seed from
        # the generator (the global one where none was given), so a seeded shuffle gives the order it gave there
        torch.empty((), dtype=torch.int64).random_(generator=self.plain.generator)

        def fetch(indices):
            return collate([dataset[i] for i in indices])

        node = tn.SamplerWrapper(self.plain.batch_sampler)
        node = tn.ParallelMapper(
            node,
            map_fn=fetch,
            num_workers=self.num_workers,
            method="thread",
            in_order=True,
            max_concurrent=self.num_workers,
        )
        if self.pin_memory:
            node = tn.PinMemory(node)
        return iter(tn.Loader(tn.Prefetcher(node, prefetch_factor=self.prefetch_factor)))
