"""A stored run as the user's setup: `--baseline-run RUN_ID`, most often a run of their own loop (source 'observed').

    python -m engine observe -- python train.py            # stores obs-...-0, your training loader as it is
    python -m engine tune --workload mypkg.data:build --model mypkg.nets:net --baseline-run obs-...-0
    python -m engine predict --workload mypkg.data:build --model mypkg.nets:net --baseline-run obs-...-0

The run's loader settings become the baseline, exactly what `--baseline loader=processes,workers=2,...` would say
(engine/advice/baseline.py), so tune re-runs them as candidate 0 and confirms the best against them with
interleaved runs (a 95 % interval). The lab runs the workload and model the user names: an observed loop's own
dataset and model are code in their script, which the lab cannot run, so they must be named as plugins.
"""

from __future__ import annotations

from typing import Any

from engine.advice.baseline import BASELINE_KEYS, describe_baseline, parse
from engine.errors import ConfigError, printable
from engine.paths import Db
from engine.store import get_run

__all__ = ["baseline_of_run", "next_steps", "observed_line", "predict_fields", "resolve_baseline"]


def _run(run_id: str, db: Db) -> dict[str, Any]:
    run = get_run(run_id, db=db)
    if run is None:
        raise ConfigError(
            "baseline_run", f"no run '{printable(run_id[:80])}' in the store; list them with python -m engine runs"
        )
    if not run.get("loader"):
        raise ConfigError(
            "baseline_run",
            f"run '{printable(run_id[:80])}' has no loader settings (it did not "
            "observe a DataLoader); give --baseline loader=...,workers=... instead",
        )
    return run


def baseline_of_run(run_id: str, db: Db = None) -> dict[str, Any]:
    """The run's loader settings as baseline.parse returns them (only those the run stored)."""
    run = _run(run_id, db)
    return parse({k: run[k] for k in BASELINE_KEYS if run.get(k) is not None})


def resolve_baseline(baseline: str | None, baseline_run: str | None, db: Db = None) -> str | dict[str, Any] | None:
    """What advise and tune take as `baseline`: --baseline as given, or --baseline-run's settings; not both."""
    if baseline and baseline_run:
        raise ConfigError("baseline_run", "give --baseline or --baseline-run, not both")
    return baseline_of_run(baseline_run, db) if baseline_run else baseline


def predict_fields(run_id: str, db: Db = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(RunConfig fields to predict the run's setting with, the run): its loader settings, its intra-op threads
    and its samples per epoch, so the prediction is of the epoch that was observed."""
    run = _run(run_id, db)
    fields = baseline_of_run(run_id, db)
    fields.update({k: int(run[k]) for k in ("threads", "n_samples") if run.get(k)})
    return fields, run


def observed_line(run: dict[str, Any], predicted_epoch_s: float) -> str:
    """The observed epoch beside the predicted one, and how far apart they are."""
    if run.get("epoch_s") is None:
        return f"observed ({run['run_id']}): no finished steady epoch to compare with"
    ratio = predicted_epoch_s / run["epoch_s"]
    setting = describe_baseline({k: run[k] for k in BASELINE_KEYS if run.get(k) is not None})
    return (
        f"observed ({run['run_id']}, {setting}): epoch {run['epoch_s']:.3f} s · predicted / observed "
        f"{ratio:.2f}: the prediction is of the workload and model named here; the closer to 1, the more its "
        "ranking of other settings is to be trusted for your loop"
    )


def next_steps(run: dict[str, Any]) -> str:
    """The commands that take an observed run to an answer: predict ranks every setting beside what was observed,
    tune measures the best against it with a 95 % interval (the dataset and model named as plugins)."""
    flags = "--workload YOUR_MODULE:dataset --model YOUR_MODULE:model"
    return (
        f"python -m engine predict {flags} --baseline-run {run['run_id']}\n"
        f"python -m engine tune {flags} --baseline-run {run['run_id']} --budget 10m"
    )
