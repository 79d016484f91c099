"""Preflight for the user's own pipeline: try one small batch in the launching process, before anything is stored.

A bad plugin then fails at once with a one-line ConfigError naming the field (CLI exit 2), instead of
as a `failed` run minutes later: a missing module or callable, a factory that raises or returns the
wrong type, items that are not tensors, a collate or loss that breaks, labels out of range for the
logits, and a model that lacks what its mode needs (split: stages; fused: vmap).

    extra_meta = preflight(cfg)          # {"code_hash": "..."} for a plugin run, {} for built-ins
"""

from __future__ import annotations

import copy
import importlib
import json
import logging
import pickle
import sys
from pathlib import Path
from typing import Any

import torch

from engine.config import RunConfig
from engine.errors import ConfigError, printable
from engine.loaders import epoch_batches
from engine.models import _base, build_model, loss_fn, split_stages
from engine.modes.fused import FusedStep
from engine._plugin_hash import installed as _installed
from engine.plugins import code_hash, is_spec, resolve, specs_of
from engine.workloads import build_dataset
from engine.workloads.plugin import BadItem

__all__ = ["preflight"]

log = logging.getLogger(__name__)

# Fields that change how batches are delivered or measured, not what a batch or the model is.
_DELIVERY = ("loader", "workers", "prefetch_depth", "start_method", "persistent_workers", "pin_memory",
             "worker_timeout_s", "epochs", "warmup_epochs", "device", "threads", "tag", "bound", "sample_hz",
             "trace")
_PASSED: set[str] = set()  # configs (and code hashes) whose preflight passed in this process
_MAX_ITEMS = 8  # a preflight batch: enough to exercise collate and the model, cheap for any dataset


def preflight(cfg: RunConfig, cwd: str | None = None) -> dict[str, Any]:
    """Check cfg's plugins on one small batch on the CPU; returns the run's extra meta (its code_hash)."""
    specs = specs_of(cfg)
    if not specs:
        return {}
    if cwd:  # the submitter's folder (job worker, Ray): where its module is importable, before any other's
        if cwd in sys.path:
            sys.path.remove(cwd)
        sys.path.insert(0, cwd)
    _forget(specs)
    digest = _hash(cfg, specs)
    pickled = cfg.loader == "processes" and cfg.start_method != "fork"  # the one delivery setting checked
    key = json.dumps([digest, pickled, {k: v for k, v in cfg.to_dict().items() if k not in _DELIVERY}],
                     sort_keys=True)
    if key not in _PASSED:
        saved = _base._LOSS[0]
        try:
            _try_batch(cfg)
        finally:
            _base._LOSS[0] = saved  # NOTE: the launching process keeps its own loss; only runs set theirs
        _PASSED.add(key)
    return {"code_hash": digest}


def _forget(specs: list[str]) -> None:
    """Drop the user's own modules (not installed ones) from this process's import cache, so preflight and the
    code hash see the files as they are now, from the folder first on sys.path: a notebook or the job worker
    lives for hours while the user edits their code, and may check plugins from several folders.

    NOTE: only the launching process does this; a run's child imports the module once and keeps it."""
    tops = {spec.split(":")[0].split(".")[0] for spec in specs} - {"engine"}  # never the engine's own modules
    for name in [n for n in sys.modules if n.split(".")[0] in tops]:
        path = getattr(sys.modules[name], "__file__", None)
        if path and not _installed(Path(path)):
            del sys.modules[name]
    importlib.invalidate_caches()


def _hash(cfg: RunConfig, specs: list[str]) -> str:
    for field in ("workload", "model", "model_b", "collate", "loss"):
        value = getattr(cfg, field)
        if value and is_spec(value):
            resolve(value, field)  # imports it: a missing module or callable is reported on its own field
    return code_hash(specs)


def _try_batch(cfg: RunConfig) -> None:
    torch.manual_seed(cfg.seed)
    dataset = build_dataset(cfg)
    keys = epoch_batches(len(dataset), min(cfg.batch_size, _MAX_ITEMS), cfg.seed, 0)[0]
    items = [_item(dataset, k) for k in keys]
    _check_all_targets(cfg, dataset)
    if cfg.loader == "processes" and cfg.start_method != "fork":  # (part of preflight's cache key)
        _check_picklable(cfg, dataset)
    collate = resolve(cfg.collate, "collate") if cfg.collate else torch.utils.data.default_collate
    x, y = _collate(collate, items, "collate" if cfg.collate else "workload")
    models = [("model", cfg.model, cfg.width)]
    if cfg.mode.startswith("dual-"):
        models.append(("model_b", cfg.model_b or cfg.model, cfg.width_b or cfg.width))
    for field, arch, width in models:
        model = build_model(cfg, dataset.sample_shape, dataset.num_classes, arch=arch, width=width, field=field)
        logits = _forward(model, x, field, arch)
        _check_labels(cfg, logits, y)
        _step(model, x, y, "loss" if cfg.loss else field)
    _check_mode(cfg, build_model(cfg, dataset.sample_shape, dataset.num_classes), x, y)


def _item(dataset: Any, key: tuple[int, int]) -> Any:
    try:
        return dataset[key]
    except ConfigError:
        raise
    except BadItem as e:
        raise ConfigError("workload", str(e)) from None
    except Exception as e:  # noqa: BLE001 - the user's __getitem__ failing is bad input
        raise ConfigError("workload", f"item {key[1]} failed: {type(e).__name__}: {printable(str(e)[:300])}") from None


def _check_picklable(cfg: RunConfig, dataset: Any) -> None:
    """spawn/forkserver workers get the dataset (and collate) pickled; fork copies them instead."""
    for field, obj in (("workload", dataset), ("collate", resolve(cfg.collate, "collate") if cfg.collate else None)):
        try:
            pickle.dumps(obj)
        except Exception as e:  # noqa: BLE001 - pickling raises many kinds (PicklingError, TypeError, AttributeError)
            raise ConfigError(field, f"the processes loader with start_method {cfg.start_method} pickles it for its "
                                     f"workers, and that failed ({type(e).__name__}: {printable(str(e)[:200])}); "
                                     "make it picklable (no lambdas or open files) or use start_method fork") from None


def _collate(collate: Any, items: list, field: str) -> tuple[Any, Any]:
    try:
        batch = collate(items)
    except Exception as e:  # noqa: BLE001
        raise ConfigError(field, f"collating {len(items)} items failed: {type(e).__name__}: "
                                 f"{printable(str(e)[:300])}; items must share one shape, or name a collate") from None
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
        raise ConfigError(field, f"'{arch}' failed on a batch x of shape {tuple(x.shape)}: {type(e).__name__}: "
                                 f"{printable(str(e)[:300])}") from None
    if not isinstance(logits, torch.Tensor) or logits.dim() < 2 or logits.shape[0] != x.shape[0]:
        got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ConfigError(field, f"'{arch}' must map a batch [B, ...] to logits [B, classes], got {got}")
    return logits


def _check_labels(cfg: RunConfig, logits: Any, y: Any) -> None:
    """With cross-entropy, integer labels index the logits: each must be in [0, classes)."""
    if cfg.loss or y.is_floating_point():
        return
    classes = logits.shape[1]
    lo, hi = int(y.min()), int(y.max())
    if lo < 0 or hi >= classes:
        raise ConfigError("workload", f"labels {lo}..{hi} are out of range for the model's {classes} logits; "
                                      f"labels must be in [0, {classes}): set num_classes or fix the labels")


def _check_all_targets(cfg: RunConfig, dataset: Any) -> None:
    """A dataset that lists its labels (`targets` or `labels`, as ImageFolder does) has them all checked here,
    not only the preflight batch's: a bad label deep in the data would otherwise fail the run, not the launch."""
    targets = next((getattr(dataset.inner, a) for a in ("targets", "labels") if hasattr(dataset.inner, a)), None)
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
        raise ConfigError("workload", f"label {int(labels[i])} of item {i} (in the dataset's targets) is out of range "
                                      f"for the model's {dataset.num_classes} logits; labels must be in "
                                      f"[0, {dataset.num_classes}): set num_classes or fix the labels")


def _step(model: Any, x: Any, y: Any, what: str) -> None:
    """Forward, loss, backward on the batch; a failure names the loss if the user gave one, else the model."""
    try:
        loss = loss_fn(model(x), y)
        loss.backward()
    except Exception as e:  # noqa: BLE001
        raise ConfigError(what, f"the loss and backward on one batch failed: {type(e).__name__}: "
                                f"{printable(str(e)[:300])}") from None
    if loss.dim() != 0:
        raise ConfigError(what, f"the loss must be a scalar tensor, got shape {tuple(loss.shape)}")


def _check_mode(cfg: RunConfig, model: Any, x: Any, y: Any) -> None:
    """split: the blocks must cut into n_stages and reproduce forward; fused: copies must train under vmap."""
    if cfg.mode == "split":
        out = x
        for stage in split_stages(model, cfg.n_stages):
            out = stage(out)
        if tuple(out.shape) != tuple(model(x).shape):
            raise ConfigError("model", f"split runs the model's stages() in order, which gives {tuple(out.shape)} "
                                       f"instead of forward's {tuple(model(x).shape)}; return every block of forward")
    elif cfg.mode == "fused":
        try:
            FusedStep([model, copy.deepcopy(model)], cfg.optimizer, [cfg.lr, cfg.lr])(x, y)
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001
            raise ConfigError("model", f"fused trains copies of the model as one torch.func.vmap program, and "
                                       f"'{cfg.model}' cannot be vmapped ({type(e).__name__}: "
                                       f"{printable(str(e)[:200])}); avoid .item(), in-place buffer updates and "
                                       "data-dependent Python branches in forward, or pick another mode") from None
