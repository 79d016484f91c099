"""The spdl loader as code a user pastes: an SPDL pipeline bound to `loader`, iterated once per epoch.

    lines = spdl_lines(setting)      # the builder for engine.advice.code.SNIPPETS["spdl"] (lines, no header)
    text = spdl_snippet(setting)     # the same, self-contained: `import torch` first; `dataset` must be in scope

`setting` is a dict of RunConfig fields (loader, workers, batch_size, prefetch_depth, pin_memory, device,
worker_timeout_s, collate, seed, ...). The pipeline is the lab's (engine/loaders/spdl.py): samples fetched on
`workers` threads in input order, aggregated into batch_size, collated (and pinned for a CUDA copy), prefetch_depth
batches in the sink, the first failure fatal. Two differences, each said in the snippet: the order of samples is
the user's RandomSampler's, not the lab's seeded plan, and the source is continuous (one pipeline for all epochs,
running into the next epoch as persistent workers do) where the lab builds one pipeline per epoch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["spdl_lines", "spdl_snippet"]


def _collate_import(setting: dict[str, Any]) -> str:
    module, _, name = str(setting.get("collate") or "").partition(":")
    if module and name.isidentifier():
        return f"from {module} import {name} as collate_fn"
    return "from torch.utils.data import default_collate as collate_fn"


def _pins(setting: dict[str, Any]) -> bool:
    """Pinning only helps a copy to a GPU: the lab pins on CUDA only (auto: when a GPU is there)."""
    return bool(setting.get("pin_memory")) and str(setting.get("device", "auto")) != "cpu"


def spdl_lines(setting: dict[str, Any]) -> list[str]:
    """The lines that bind `loader` (assuming `torch` and `dataset`), for the SNIPPETS registry."""
    w, bs, depth = int(setting["workers"]), int(setting["batch_size"]), int(setting.get("prefetch_depth", 2))
    timeout = float(setting.get("worker_timeout_s", 120.0))
    lines = [
        "from concurrent.futures import ThreadPoolExecutor",
        "",
        "from spdl.pipeline import PipelineBuilder",
        "from torch.utils.data import RandomSampler",
        _collate_import(setting),
        "",
        "# one intra-op thread per stage thread, as the lab's: they must not oversubscribe the cores",
        f"pool = ThreadPoolExecutor({w}, initializer=torch.set_num_threads, initargs=(1,))",
    ]
    collate = "collate_fn"
    if _pins(setting):
        pinned = "x.pin_memory(), y.pin_memory()"
        if not str(setting.get("device", "auto")).startswith("cuda"):  # auto: pin when a GPU is there
            pinned = f"({pinned}) if torch.cuda.is_available() else (x, y)"
        lines += ["", "", "def collate_pinned(samples):", "    x, y = collate_fn(samples)", f"    return {pinned}", ""]
        collate = "collate_pinned"
    return lines + [
        "",
        "# NOTE: the same batches and samples per epoch as the lab's loader, in another order: the lab draws its own",
        "# seeded permutation per epoch so that every loader it compares sees the same batches. The source is",
        "# continuous: one pipeline serves every epoch (`for x, y in loader` ends at each epoch's end), where the lab",
        "# builds one per epoch.",
        "loader = (",
        "    PipelineBuilder()",
        "    .add_source(RandomSampler(dataset), continuous=True)",
        f'    .pipe(dataset.__getitem__, concurrency={w}, executor=pool, output_order="input")',
        f"    .aggregate({bs})  # the last batch of an epoch is short, as DataLoader's with drop_last=False",
        f"    .pipe({collate}, executor=pool)",
        f"    .add_sink({depth})  # batches kept ready (the lab's prefetch_depth)",
        "    # NOTE: max_failures=0: SPDL's default drops a sample whose fetch fails (and logs it); this raises",
        "    # spdl.pipeline.PipelineFailure instead, with the sample's own error as a stage error's __cause__",
        "    .build(num_threads=1, max_failures=0)",
        ")",
        f"# the lab also fails an epoch when no batch comes within worker_timeout_s ({timeout:g} s): to do the same,",
        f"# iterate loader.get_iterator(timeout={timeout:g}) instead of loader",
    ]


def spdl_snippet(setting: dict[str, Any]) -> str:
    """spdl_lines, self-contained: the snippet a user pastes below their `dataset`."""
    return "\n".join(["import torch", "", *spdl_lines(setting)]) + "\n"
