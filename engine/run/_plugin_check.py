"""Preflight for the user's own pipeline: try one small batch, in a child of the launcher, before anything is stored.

A bad plugin then fails at once with a one-line ConfigError naming the field (CLI exit 2), instead of
as a `failed` run minutes later: a missing module or callable, a factory that raises, exits or returns the
wrong type, items that are not tensors, a collate or loss that breaks, labels out of range for the
logits, a model with too few logits, and a model that lacks what its mode needs (split: stages; fused: vmap).

    python -m engine.run._plugin_check      # what engine/run/preflight.py starts: JSON lines in and out (see main)
    extra_meta = preflight(cfg)         # in this process: {"code_hash": "..."} for a plugin run, {} for built-ins

Before each call into the user's code it reports a phase (which plugin, doing what) to the launcher, which
kills this process when a phase outlasts the time limit and names that phase; a SystemExit from the user's
code is that plugin's ConfigError, never this process's exit.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import logging
import os
import pickle
import sys
from typing import Any, Callable, Iterator

import torch

from engine.config import RunConfig
from engine.errors import ConfigError, printable
from engine.loaders import epoch_batches
from engine.models import build_model, loss_fn, split_stages
from engine.modes.fused import FusedStep
from engine.plugins import code_hash, is_spec, resolve, specs_of
from engine.plugins.hashing import source_roots, stamp
from engine.workloads import BadStreamItem, build_dataset, is_stream
from engine.workloads.plugin import BadItem

__all__ = ["KINDS", "main", "preflight"]

log = logging.getLogger(__name__)

_MAX_ITEMS = 8  # a preflight batch: enough to exercise collate and the model, cheap for any dataset
# What a plugin is, by field, as the messages name it: "plugin 'mypkg:make_ds' (dataset factory)".
KINDS = {
    "workload": "dataset factory",
    "model": "model factory",
    "model_b": "model factory",
    "collate": "collate",
    "loss": "loss",
}
_REPORT: list[Callable[..., None]] = [lambda **_: None]  # main() sends each phase to the launcher


def preflight(cfg: RunConfig, cwd: str | None = None) -> dict[str, Any]:
    """Check cfg's plugins on one small batch on the CPU; returns the run's extra meta (its code_hash).

    NOTE: meant for a fresh process (main, started by engine/run/preflight.py): the user's modules are imported once
    and kept, and the loss they set stays set."""
    specs = specs_of(cfg)
    if not specs:
        return {}
    if cwd:  # the launcher's folder (the CLI's, the job's submitter's): its modules first, as `python -m` does
        if cwd in sys.path:
            sys.path.remove(cwd)
        sys.path.insert(0, cwd)
    digest = _hash(cfg, specs)
    _try_batch(cfg)
    return {"code_hash": digest}


@contextlib.contextmanager
def _doing(field: str, spec: str, what: str, kind: str | None = None) -> Iterator[None]:
    """Around one call into the user's code: report the phase (the launcher times it), and turn a SystemExit into
    this plugin's ConfigError. `what` completes "while preflight ...". A built-in (not a spec) is no plugin."""
    plugin = spec if spec and is_spec(spec) else ""
    _REPORT[0](phase=what, field=field, spec=plugin, kind=kind or KINDS[field])
    try:
        yield
    except SystemExit as e:
        who = f"plugin '{plugin}' ({kind or KINDS[field]})" if plugin else "the user's code"
        raise ConfigError(
            field,
            f"{who} called sys.exit({printable(repr(e.code))[:60]}) while preflight {what}; "
            "a plugin must return or raise an exception, never exit the process",
        ) from None


def _hash(cfg: RunConfig, specs: list[str]) -> str | None:
    for field in ("workload", "model", "model_b", "collate", "loss"):
        value = getattr(cfg, field)
        if value and is_spec(value):
            with _doing(field, value, f"imported module '{value.split(':')[0]}'", "module"):
                resolve(value, field)  # imports it: a missing module or callable is reported on its own field
    return code_hash(specs)


def _try_batch(cfg: RunConfig) -> None:
    torch.manual_seed(cfg.seed)
    with _doing("workload", cfg.workload, "built the dataset"):
        dataset = build_dataset(cfg)
    if is_stream(dataset):  # its first items, from a fresh iter(): the run's epochs start over
        with _doing("workload", cfg.workload, "read the stream's first items", "dataset"):
            items = _first_items(dataset, min(cfg.batch_size, _MAX_ITEMS))
    else:
        items = []
        for k in epoch_batches(len(dataset), min(cfg.batch_size, _MAX_ITEMS), cfg.seed, 0)[0]:
            with _doing("workload", cfg.workload, f"read item {k[1]}", "dataset"):
                items.append(_item(dataset, k))
        with _doing("workload", cfg.workload, "read the dataset's targets", "dataset"):
            _check_all_targets(cfg, dataset)
    if cfg.loader == "processes" and cfg.start_method != "fork":  # (part of preflight's cache key)
        with _doing("workload", cfg.workload, f"pickled the dataset for {cfg.start_method} workers", "dataset"):
            _check_picklable(cfg, dataset)
    collate = resolve(cfg.collate, "collate") if cfg.collate else torch.utils.data.default_collate
    with _doing(
        "collate" if cfg.collate else "workload",
        cfg.collate or cfg.workload,
        "collated a batch",
        "collate" if cfg.collate else "dataset",
    ):
        x, y = _collate(collate, items, "collate" if cfg.collate else "workload")
    models = [("model", cfg.model, cfg.width)]
    if cfg.mode.startswith("dual-"):
        models.append(("model_b", cfg.model_b or cfg.model, cfg.width_b or cfg.width))
    for field, arch, width in models:
        with _doing(field, arch, "built the model"):
            model = build_model(cfg, dataset.sample_shape, dataset.num_classes, arch=arch, width=width, field=field)
        with _doing(field, arch, "ran the model on a batch", "model"):
            logits = _forward(model, x, field, arch)
        _check_labels(
            cfg, logits, y, dataset.num_classes if getattr(dataset, "classes_known", True) else 0, field, arch
        )
        what = "loss" if cfg.loss else field
        with _doing(what, cfg.loss or arch, "ran the loss and backward", "loss" if cfg.loss else "model"):
            _step(model, x, y, what)
    with _doing("model", cfg.model, "built the model"):
        model = build_model(cfg, dataset.sample_shape, dataset.num_classes)
    with _doing("model", cfg.model, f"tried the model in mode {cfg.mode}", "model"):
        _check_mode(cfg, model, x, y)


def _item(dataset: Any, key: tuple[int, int]) -> Any:
    try:
        return dataset[key]
    except ConfigError:
        raise
    except BadItem as e:
        raise ConfigError("workload", str(e)) from None
    except Exception as e:  # noqa: BLE001 - the user's __getitem__ failing is bad input
        raise ConfigError("workload", f"item {key[1]} failed: {type(e).__name__}: {printable(str(e)[:300])}") from None


def _first_items(stream: Any, n: int) -> list[tuple[Any, Any]]:
    try:
        return [(x, y) for x, y, _ in itertools.islice(stream.part(0, 0, 1), n)]
    except BadStreamItem as e:
        raise ConfigError("workload", str(e)) from None
    except Exception as e:  # noqa: BLE001 - the user's stream failing is bad input
        raise ConfigError("workload", f"the stream failed: {type(e).__name__}: {printable(str(e)[:300])}") from None


def _check_picklable(cfg: RunConfig, dataset: Any) -> None:
    """spawn/forkserver workers get the dataset (and collate) pickled; fork copies them instead."""
    for field, obj in (("workload", dataset), ("collate", resolve(cfg.collate, "collate") if cfg.collate else None)):
        try:
            pickle.dumps(obj)
        except Exception as e:  # noqa: BLE001 - pickling raises many kinds (PicklingError, TypeError, AttributeError)
            raise ConfigError(
                field,
                f"the processes loader with start_method {cfg.start_method} pickles it for its "
                f"workers, and that failed ({type(e).__name__}: {printable(str(e)[:200])}); "
                "make it picklable (no lambdas or open files) or use start_method fork",
            ) from None


def _collate(collate: Any, items: list, field: str) -> tuple[Any, Any]:
    try:
        batch = collate(items)
    except Exception as e:  # noqa: BLE001
        raise ConfigError(
            field,
            f"collating {len(items)} items failed: {type(e).__name__}: "
            f"{printable(str(e)[:300])}; items must share one shape, or name a collate",
        ) from None
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2 and all(isinstance(t, torch.Tensor) for t in batch)):
        raise ConfigError(field, f"a batch must be an (x, y) pair of tensors, got {type(batch).__name__}")
    x, y = batch
    if not x.shape or not y.shape or x.shape[0] != y.shape[0]:
        raise ConfigError(field, f"x {tuple(x.shape)} and y {tuple(y.shape)} must share their first (batch) dimension")
    return x, (y if y.is_floating_point() else y.long())


def _forward(model: Any, x: Any, field: str, arch: str) -> Any:
    try:
        logits = model(x)
    except Exception as e:  # noqa: BLE001
        raise ConfigError(
            field,
            f"'{arch}' failed on a batch x of shape {tuple(x.shape)}: {type(e).__name__}: {printable(str(e)[:300])}",
        ) from None
    if not isinstance(logits, torch.Tensor) or logits.dim() < 2 or logits.shape[0] != x.shape[0]:
        got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ConfigError(field, f"'{arch}' must map a batch [B, ...] to logits [B, classes], got {got}")
    return logits


def _check_labels(cfg: RunConfig, logits: Any, y: Any, num_classes: int, field: str, arch: str) -> None:
    """With cross-entropy, integer labels index the logits: each must be in [0, classes). A num_classes the user set
    that the model ignores (other logits than asked) is refused, and so is a model with fewer logits than the
    dataset's declared classes, whatever the labels of this batch are. num_classes 0: nobody declared the classes,
    so the model's head decides (a fixed 2-logit head over a 2-class dataset runs)."""
    if cfg.loss or y.is_floating_point():
        return
    classes = logits.shape[1]
    if classes < num_classes or (cfg.num_classes and classes != cfg.num_classes):
        raise ConfigError(
            field,
            f"'{arch}' returned {classes} logits per sample, but it was built for "
            f"num_classes={num_classes} (labels 0..{num_classes - 1}); return logits of shape "
            "[B, num_classes], sizing the last layer by the num_classes argument it is given",
        )
    lo, hi = int(y.min()), int(y.max())
    if lo < 0 or hi >= classes:
        raise ConfigError(
            "workload",
            f"labels {lo}..{hi} are out of range for the model's {classes} logits; "
            f"labels must be in [0, {classes}): set num_classes or fix the labels",
        )


def _check_all_targets(cfg: RunConfig, dataset: Any) -> None:
    """A dataset that lists its labels (`targets` or `labels`, as ImageFolder does) has them all checked here,
    not only the preflight batch's: a bad label deep in the data would otherwise fail the run, not the launch."""
    # A plugin's dataset is wrapped (its own object is .inner); a built-in workload is its own dataset.
    inner = getattr(dataset, "inner", dataset)
    targets = next((getattr(inner, a) for a in ("targets", "labels") if hasattr(inner, a)), None)
    if cfg.loss or targets is None:
        return
    try:
        labels = torch.as_tensor(targets)
    except (TypeError, ValueError, RuntimeError):
        return  # not a flat list of numbers: the batch check above is all there is
    if labels.dim() != 1 or len(labels) != len(dataset) or labels.is_floating_point() or not len(labels):
        return
    bad = ((labels < 0) | (labels >= dataset.num_classes)).nonzero()
    if len(bad):
        i = int(bad[0])
        raise ConfigError(
            "workload",
            f"label {int(labels[i])} of item {i} (in the dataset's targets) is out of range "
            f"for the model's {dataset.num_classes} logits; labels must be in "
            f"[0, {dataset.num_classes}): set num_classes or fix the labels",
        )


def _step(model: Any, x: Any, y: Any, what: str) -> None:
    """Forward, loss, backward on the batch; a failure names the loss if the user gave one, else the model."""
    try:
        loss = loss_fn(model(x), y)
        loss.backward()
    except Exception as e:  # noqa: BLE001
        raise ConfigError(
            what, f"the loss and backward on one batch failed: {type(e).__name__}: {printable(str(e)[:300])}"
        ) from None
    if loss.dim() != 0:
        raise ConfigError(what, f"the loss must be a scalar tensor, got shape {tuple(loss.shape)}")


def _check_mode(cfg: RunConfig, model: Any, x: Any, y: Any) -> None:
    """split: the blocks must cut into n_stages and reproduce forward; fused: copies must train under vmap."""
    if cfg.mode == "split":
        out = x
        for stage in split_stages(model, cfg.n_stages):
            out = stage(out)
        if tuple(out.shape) != tuple(model(x).shape):
            raise ConfigError(
                "model",
                f"split runs the model's stages() in order, which gives {tuple(out.shape)} "
                f"instead of forward's {tuple(model(x).shape)}; return every block of forward",
            )
    elif cfg.mode == "fused":
        try:
            FusedStep([model, copy.deepcopy(model)], cfg.optimizer, [cfg.lr, cfg.lr])(x, y)
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001
            raise ConfigError(
                "model",
                f"fused trains copies of the model as one torch.func.vmap program, and "
                f"'{cfg.model}' cannot be vmapped ({type(e).__name__}: "
                f"{printable(str(e)[:200])}); avoid .item(), in-place buffer updates and "
                "data-dependent Python branches in forward, or pick another mode",
            ) from None


# ---------------------------------------------------------------------------- the child process


def main() -> None:
    """`python -m engine.run._plugin_check`: read {"configs": [RunConfig dicts], "cwd": folder} on stdin, check each.

    Writes JSON lines to the launcher: {"ready": true} once torch and the engine are imported, {"phase", "field",
    "spec", "kind"} before each call into the user's code, {"done": i, "meta", "roots", "stamp"} per config, and
    at the first bad plugin {"error": {"field", "message"}} (or {"crash": text} for anything else). Then it ends
    at once (os._exit): a thread the user's code started must not keep it alive.
    """
    proto = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # a print in the user's code must not land in the protocol

    def send(**msg: Any) -> None:
        proto.write(json.dumps(msg, default=str).encode() + b"\n")  # one write per message: whole lines

    code = 0
    try:
        request = json.loads(sys.stdin.read())
        send(ready=True)
        _REPORT[0] = send
        for i, data in enumerate(request["configs"]):
            cfg = RunConfig.from_dict(data)
            meta = preflight(cfg, request.get("cwd"))
            roots = source_roots(specs_of(cfg))
            send(done=i, meta=meta, roots=roots, stamp=stamp(roots))
    except ConfigError as e:
        send(error={"field": e.field, "message": e.message})
    except BaseException as e:  # noqa: BLE001 - anything else (a SystemExit outside a phase, a bug): reported
        log.debug("preflight child failed", exc_info=True)
        send(crash=f"{type(e).__name__}: {printable(str(e)[:300])}")
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(code)


if __name__ == "__main__":
    main()
