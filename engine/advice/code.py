"""Every answer as code: the Python a user pastes to build the loader a setting describes, bound to `loader`.

    python -m engine code RUN_ID                                   # the setting a stored run used
    python -m engine code --setting loader=processes,workers=2,threads=1
    text = snippet(cfg)        # cfg: a RunConfig, or a dict of its fields (a stored run's config)

The snippet assumes the user's map-style `dataset` (`dataset[i] -> (x, y)`) is in scope, and sets what the run set:
the training process's intra-op threads (torch.set_num_threads), the workers' threads and thread pools, and the
loader's own knobs. Where it cannot match the lab's loader exactly, a comment in it says how.

SNIPPETS maps a loader name to its builder, a plain function `builder(setting: dict) -> list[str]`: `setting` has
every RunConfig field (setting.get(...) for fields added later, e.g. transform_threads), and the lines it returns
import what they use, assume `torch` and `dataset`, and bind `loader` (an iterable re-iterated once per epoch).
snippet() adds the header and the training process's threads. A new loader registers its builder here.

NOTE: the order of samples differs from the lab's in every snippet: the lab draws one seeded permutation per
(seed, epoch) so that every loader sees the same batches (engine/loaders/_base.py); a user's loader shuffles with
torch's global generator. The batches and the set of samples per epoch are the same (tests/engine/test_code.py).
"""

from __future__ import annotations

from typing import Any, Callable

from engine.advice._code_spdl import spdl_lines
from engine.config import RunConfig
from engine.errors import ConfigError, printable
from engine.paths import Db
from engine.store import get_run

__all__ = ["SNIPPETS", "code_of_run", "collate_lines", "parse_setting", "pin_expr", "run_title", "snippet"]

Builder = Callable[[dict[str, Any]], list[str]]
ORDER_NOTE = (
    "# NOTE: the same batches and samples per epoch as the lab's loader, in another order: the lab draws\n"
    "# its own seeded permutation per epoch so that every loader it compares sees the same batches"
)


def pin_expr(setting: dict[str, Any]) -> str:
    """pin_memory's value: pinning only helps a copy to a GPU, so it is off on a CPU run; auto decides at run time."""
    device = str(setting.get("device", "auto"))
    if not setting.get("pin_memory") or device == "cpu":
        return "False"
    return "True" if device.startswith("cuda") else "torch.cuda.is_available()"


def collate_lines(setting: dict[str, Any]) -> list[str]:
    """Bind `collate_fn`: the run's own collate ('module:callable') or torch's default_collate."""
    spec = str(setting.get("collate") or "")
    module, _, name = spec.partition(":")
    if module and name.isidentifier():
        return [f"from {module} import {name} as collate_fn"]
    return ["from torch.utils.data import default_collate as collate_fn"]


def _worker_init(setting: dict[str, Any]) -> list[str]:
    """The workers' start: one intra-op thread each (as the lab's workers), and their BLAS pools capped."""
    pools = int(setting.get("transform_threads", 0) or 0)
    lines = [
        "",
        "def worker_init_fn(worker_id):",
        "    # NOTE: module level, so spawn and forkserver can pickle it (not in a notebook cell with those)",
        "    torch.set_num_threads(1)  # one intra-op thread per worker: workers must not oversubscribe the cores",
    ]
    if pools > 0:
        lines += [
            "    from threadpoolctl import threadpool_limits",
            f"    threadpool_limits(limits={pools}, user_api='blas')  # the transform's BLAS pools, as the run "
            "capped them",
        ]
    return lines + [""]


def _processes(s: dict[str, Any]) -> list[str]:
    ctx = f'"{s["start_method"]}"'
    return [
        "from torch.utils.data import DataLoader",
        *collate_lines(s),
        *_worker_init(s),
        ORDER_NOTE,
        "loader = DataLoader(",
        f"    dataset, batch_size={s['batch_size']}, shuffle=True, num_workers={s['workers']}, "
        f"pin_memory={pin_expr(s)},",
        f"    prefetch_factor={s['prefetch_depth']}, persistent_workers={bool(s['persistent_workers'])}, "
        f"multiprocessing_context={ctx},",
        f"    worker_init_fn=worker_init_fn, timeout={float(s['worker_timeout_s']):g}, collate_fn=collate_fn,",
        ")",
    ]


def _graph_tail(s: dict[str, Any]) -> list[str]:
    """Pinning where the run pinned, prefetch_depth batches kept ready, and a Loader to iterate once per epoch."""
    pin = pin_expr(s)
    lines = []
    if pin != "False":
        lines.append(f"node = tn.PinMemory(node) if {pin} else node" if pin != "True" else "node = tn.PinMemory(node)")
    return lines + [f"node = tn.Prefetcher(node, prefetch_factor={s['prefetch_depth']})", "loader = tn.Loader(node)"]


def _keys(s: dict[str, Any]) -> list[str]:
    return [
        "import torchdata.nodes as tn",
        "from torch.utils.data import BatchSampler, RandomSampler",
        *collate_lines(s),
        "",
        "def fetch(indices):",
        "    return collate_fn([dataset[i] for i in indices])",
        "",
        ORDER_NOTE,
        f"node = tn.SamplerWrapper(BatchSampler(RandomSampler(dataset), batch_size={s['batch_size']}, "
        "drop_last=False))",
    ]


def _threads(s: dict[str, Any]) -> list[str]:
    w = s["workers"]
    return [
        *_keys(s),
        "# NOTE: the lab waits at most worker_timeout_s for a batch; torchdata's Prefetcher waits for ever",
        f'node = tn.ParallelMapper(node, map_fn=fetch, num_workers={w}, method="thread", in_order=True, '
        f"max_concurrent={w})",
        *_graph_tail(s),
    ]


def _prefetch(s: dict[str, Any]) -> list[str]:
    lines = [*_keys(s), "node = tn.Mapper(node, fetch)  # one background thread (the Prefetcher's) makes every batch"]
    if str(s.get("device", "auto")) != "cpu":
        lines.append(
            "# NOTE: on CUDA the lab also copies each batch on a side stream while the step runs; here the "
            "copy is yours: x.to(device, non_blocking=True)"
        )
    return lines + _graph_tail(s)


def _sync(s: dict[str, Any]) -> list[str]:
    return [
        "from torch.utils.data import DataLoader",
        *collate_lines(s),
        ORDER_NOTE,
        "# num_workers=0: the training loop fetches and collates each batch itself, as the lab's sync loader does",
        f"loader = DataLoader(dataset, batch_size={s['batch_size']}, shuffle=True, num_workers=0, "
        f"pin_memory={pin_expr(s)}, collate_fn=collate_fn)",
    ]


SNIPPETS: dict[str, Builder] = {
    "sync": _sync,
    "prefetch": _prefetch,
    "threads": _threads,
    "processes": _processes,
    "spdl": spdl_lines,
}


def _threads_lines(s: dict[str, Any]) -> list[str]:
    """The training process's intra-op threads (and pools, for loaders that transform in this process)."""
    t = int(s.get("threads") or 0)
    lines = [
        f"torch.set_num_threads({t})  # the training process's intra-op threads, as the run set them"
        if t
        else "# intra-op threads: torch's default (the run set none)"
    ]
    pools = int(s.get("transform_threads", 0) or 0)
    if pools > 0 and s["loader"] != "processes":
        lines += [
            "from threadpoolctl import threadpool_limits",
            f"threadpool_limits(limits={pools}, user_api='blas')  # the transform's BLAS pools; the lab limits "
            "them around the transform only, this call for the whole process",
        ]
    return lines


def snippet(setting: dict[str, Any] | RunConfig, title: str = "") -> str:
    """The self-contained Python that builds `setting`'s loader as `loader`, given `dataset` (module docstring).

    `title` is the first comment line (e.g. which run or answer it reproduces). An unknown loader is a KeyError
    naming the loaders that have code."""
    s = setting.to_dict() if isinstance(setting, RunConfig) else dict(setting)
    loader = str(s.get("loader", ""))
    if loader not in SNIPPETS:
        raise KeyError(f"no code for loader '{loader}'; loaders with code: {', '.join(SNIPPETS)}")
    s = {**RunConfig().to_dict(), **s}  # a partial setting (an answer's knobs) takes the defaults for the rest
    head = [
        f"# {title}" if title else "# LoaderLab: the loader of this setting",
        "# `dataset` is your map-style dataset: dataset[i] -> (x, y)",
        "import torch",
        "",
    ]
    return "\n".join(head + _threads_lines(s) + [""] + SNIPPETS[loader](s)) + "\n"


def parse_setting(text: str) -> RunConfig:
    """'loader=processes,workers=4,threads=1' -> the RunConfig of those fields (the rest: defaults), checked."""
    pairs: dict[str, str] = {}
    for item in str(text).split(","):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                "setting",
                f"'{printable(item.strip()[:80])}' is not FIELD=VALUE; write e.g. "
                "--setting loader=processes,workers=4,threads=1",
            )
        pairs[key.strip()] = value.strip()
    try:
        return RunConfig.from_dict(pairs)
    except ConfigError as e:
        raise ConfigError("setting", f"{e.field}: {e.message}") from None


def run_title(run: dict[str, Any]) -> str:
    """'LoaderLab run <id>: processes, 2 workers, ...: epoch 0.512 s, peak memory 812 MiB (PSS)'."""
    c = run.get("config") or {}
    parts = [f"LoaderLab run {run['run_id']}: {c.get('loader')}"]
    if c.get("workers"):
        parts.append(f"{c['workers']} worker{'' if c['workers'] == 1 else 's'}")
    epoch, peak = run.get("epoch_s"), run.get("peak_rss_bytes")
    if epoch is not None and epoch == epoch:
        parts.append(f"epoch {epoch:.3f} s")
    if peak is not None and peak == peak:
        parts.append(f"peak memory {peak / 2**20:.0f} MiB (PSS, process tree)")
    return ", ".join(parts)


def code_of_run(run_id: str, db: Db = None) -> str:
    """The snippet for the setting a stored run used; a run that is not stored is a ConfigError on run_id."""
    run = get_run(run_id, db=db)
    if run is None:
        raise ConfigError(
            "run_id", f"no run '{printable(run_id[:80])}' in this store; list them with python -m engine runs"
        )
    if run["config"].get("loader") not in SNIPPETS:
        raise ConfigError("run_id", f"run {run_id} used loader '{run['config'].get('loader')}', which has no code")
    return snippet(run["config"], run_title(run))
