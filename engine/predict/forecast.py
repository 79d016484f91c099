"""A run's predicted epoch (engine/predict/model.py), made in the run's process and written to its RunLog as a
`prediction` event: predicted_epoch_s, predicted_from, predicted_limit, and its range predicted_lo_s and
predicted_hi_s (the store's `runs` columns).

    prior   a probe of the same pipeline on this host is already in `<store dir>/calibrations/`: the run is
            predicted before its first epoch, from figures it could not have influenced (a held-out prediction)
    own     no probe yet: after the run's calibration, the probe is measured here, saved for later runs, and the
            run predicted from it (not held out: bench/predict.py must not count it as a prediction)

Only for modes the model covers (engine.predict.model.MODES) and runs with a bound. A probe that fails leaves the run
as it was, with no prediction; the run's own figures stand.

The CLI's `predict` and lab.predict share the rest: the cached probe or a new one (`cached_or_new`) and the
ranked rows of a list of settings (`rows`), adjusted by the residuals of the pipeline's earlier runs where the
caller read them from the store (engine/predict/learned.py): `prior+runs`. A run itself never opens the store, so
its own stored prediction stays `prior` or `own`.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import torch

from engine import devices
from engine.measure import fingerprint, usable_cpus
from engine.modes import step_builder
from engine.predict import model as predict
from engine.predict.probe import probe
from engine.predict.records import PredictionFields, Probe

if TYPE_CHECKING:  # annotations only: the run side does not import the config (engine/registry.py says why)
    from engine.config import RunConfig

__all__ = ["FAIL_ENV", "SETTING_FIELDS", "cached_or_new", "covered", "own", "prior", "rows"]

log = logging.getLogger(__name__)

FAIL_ENV = "LOADERLAB_FAIL_PROBE"  # test hook: the own probe raises, the run must stay `done` with no prediction
# what a row of the ranked table names: the knobs the tune search space turns
SETTING_FIELDS = ("loader", "workers", "prefetch_depth", "threads", "batch_size")


def covered(cfg: RunConfig) -> bool:
    """Whether the run gets a prediction: a bound is asked for and the model covers its mode."""
    return bool(cfg.bound) and cfg.mode in predict.MODES


def prior(cfg: RunConfig, device: torch.device, calibrations: Path) -> PredictionFields | None:
    """The `prediction` event's fields from a probe already cached for this pipeline on this host, else None."""
    path = predict.probe_path(calibrations, cfg, fingerprint()["machine"], device.type)
    found = predict.load_probe(path)
    if found is None:
        return None
    try:
        return _fields(cfg, found, "prior")
    except (KeyError, TypeError, ValueError, ZeroDivisionError):  # a probe of an older layout: measure a new one
        log.warning("the cached probe %s could not be read; the run measures its own", path, exc_info=True)
        return None


def _measure(cfg: RunConfig, device: torch.device, default_threads: int, budget_s: float | None = None) -> Probe:
    if os.environ.get(FAIL_ENV):
        raise RuntimeError(f"injected probe failure ({FAIL_ENV} is set)")
    before = torch.get_num_threads()
    torch.set_num_threads(default_threads)
    try:
        return probe(cfg, device, step_builder(cfg, 0, device), budget_s)
    finally:
        torch.set_num_threads(before)


def own(cfg: RunConfig, device: torch.device, calibrations: Path, default_threads: int) -> PredictionFields:
    """Measure the probe after the run (at torch's default threads, whatever the run's: the probe's two thread
    counts are 1 and that default), save it for the pipeline's later runs, and predict the run from it."""
    measured = _measure(cfg, device, default_threads)
    predict.save_probe(predict.probe_path(calibrations, cfg, fingerprint()["machine"], device.type), measured)
    return _fields(cfg, measured, "own")


def _fields(cfg: RunConfig, measured: Probe, source: str) -> PredictionFields:
    """On the cores this run may use now (affinity, quota), which a probe taken under others may not have had."""
    p = predict.predict(cfg, measured, usable_cpus())
    if p is None:
        return {}
    taken = measured.get("taken_at")
    return {
        "predicted_epoch_s": p.epoch_s,
        "predicted_from": source,
        "predicted_limit": p.limit,
        "predicted_lo_s": p.lo,
        "predicted_hi_s": p.hi,
        "predicted_terms": p.terms,
        "probe_age_s": time.time() - taken if taken else None,
    }


def cached_or_new(
    cfg: RunConfig, calibrations: Path, say: Callable[[str], None] | None = None, budget_s: float | None = None
) -> tuple[Probe, bool]:
    """The pipeline's probe on this host and whether it was cached; else measured now (`say` is told first, as it
    takes a few seconds) and saved beside the store, where the pipeline's runs find it. Never touches the store.
    A folder that cannot take the file leaves the probe unsaved (a warning), not the prediction undone.
    budget_s: seconds the probe may take (None: the full probe, which also replaces a cached quick one)."""
    device = devices.resolve(cfg.device)
    path = predict.probe_path(calibrations, cfg, fingerprint()["machine"], device.type)
    found = predict.load_probe(path)
    if found is not None and (budget_s is not None or not found.get("quick")):
        return found, True
    if say:
        say(f"probing {cfg.workload} + {cfg.model} on {device} (a few seconds)…")
    measured = _measure(cfg, device, torch.get_num_threads(), budget_s)
    if calibrations.parent.is_dir():  # beside an existing store folder; never a new tree of folders
        try:
            predict.save_probe(path, measured)
        except OSError as e:
            log.warning("the probe could not be saved to %s: %s", path, e)
    return measured, False


def rows(
    configs: list[RunConfig], measured: Probe, found: dict[str, list[float]] | None = None
) -> list[dict[str, Any]]:
    """The configs the model covers, fastest predicted first: each one's SETTING_FIELDS, predicted_epoch_s, its
    range (predicted_lo_s, predicted_hi_s), samples_per_s, limit, predicted_from ('prior', or 'prior+runs' with
    `found`, the residuals of earlier runs), `same_as` (the index of an earlier row the model predicts exactly
    alike: the model cannot tell the two apart) and `apart` (whether its range clears the fastest row's: else the
    machine's noise cannot rank the two)."""
    out: list[dict[str, Any]] = []
    ranked = predict.rank(configs, measured, usable_cpus(), found)
    for i, (cfg, p) in enumerate(ranked):
        same = next((j for j, (_, q) in enumerate(ranked[:i]) if _alike(p, q)), None)
        out.append(
            {
                **{k: getattr(cfg, k) for k in SETTING_FIELDS},
                "predicted_epoch_s": p.epoch_s,
                "predicted_lo_s": p.lo,
                "predicted_hi_s": p.hi,
                "samples_per_s": measured["n_samples"] / p.epoch_s if p.epoch_s > 0 else None,
                "limit": p.limit,
                "predicted_from": p.source,
                "same_as": same,
                "apart": i == 0 or predict.apart(p, ranked[0][1]),
            }
        )
    return out


def _alike(a: predict.Prediction, b: predict.Prediction) -> bool:
    """The same prediction to the last digit it is shown with, from the same terms: the model sees no difference."""
    return (
        a.limit == b.limit
        and abs(a.epoch_s - b.epoch_s) <= 1e-9 * max(a.epoch_s, b.epoch_s)
        and a.terms.keys() == b.terms.keys()
        and all(abs(a.terms[k] - b.terms[k]) <= 1e-9 * max(1.0, a.terms[k]) for k in a.terms)
    )
