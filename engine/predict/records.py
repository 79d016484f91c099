"""The probe and a prediction's fields as typed dicts: what travels between the probe (engine/predict/probe.py),
the model (model.py), the forecast (forecast.py) and the advice that reads them. Their stored forms (the probe's
JSON file beside the store, the `prediction` event, the runs table's columns) are these dicts as they are.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

__all__ = ["ComputeAt", "Handoff", "PredictionFields", "Probe"]


class ComputeAt(TypedDict):
    """The step per batch at one intra-op thread count."""

    wall_s: float  # its wall seconds
    cpu_s: float  # its process CPU seconds


class Handoff(TypedDict, total=False):
    """A worker process's hand-off of a batch, from the probe's passes (engine/predict/_probe_handoff.py); empty
    where no worker could start."""

    handoff_s: float  # a worker's batch past its load
    receive_s: float  # the training process's serial side of it, per batch
    worker_start_s: float  # the workers' start


class Probe(TypedDict):
    """What a batch, a step and the GIL cost on one machine, apart from any loader setting. The required keys are
    those the model cannot do without (a script's first trial gives only these: engine/advice/_script_predict.py);
    the rest a full probe measures, and the model reads each with a default where it is missing."""

    device: str  # the device type the step ran on: 'cpu' or 'cuda'
    cores: float  # the usable CPUs when it was taken
    batch_size: int  # the batch size it loaded and stepped at (other sizes are scaled per sample)
    n_samples: int  # the dataset's samples: an epoch's length
    load_wall_s: float  # a batch's load on one thread, wall seconds (CPU + latency)
    load_cpu_s: float  # the CPU part of that load
    default_threads: int  # torch's default intra-op threads, the second count the step was measured at
    compute: dict[str, ComputeAt]  # the step per batch, keyed by the thread count as a string ('1', default)
    gil_share: NotRequired[float | None]  # the share of the load that holds the GIL (None: one core, not measured)
    batches: NotRequired[int]  # the batches of an epoch at batch_size
    load_median_wall_s: NotRequired[float]  # the median window's wall per batch (the windows load_cpu_s is from)
    load_fastest_wall_s: NotRequired[float]  # the fastest window's wall per batch
    load_windows: NotRequired[int]  # how many windows the load was timed over
    core_sharing: NotRequired[float]  # how much slower two GIL-free threads ran than one (1: the cores were free)
    pools: NotRequired[list[dict[str, Any]]]  # hidden BLAS/OpenMP pools that worked beside the load
    pools_loaded: NotRequired[list[dict[str, Any]]]  # hidden pools loaded, working or not
    pool_spin_s: NotRequired[float]  # CPU seconds a pool's threads spin after a batch's work
    pool_collapse: NotRequired[float | None]  # two worker processes' load at once, over what sharing the cores gives
    # (>= 1; None: not measured, the pools of two fit the cores or none worked)
    spread: NotRequired[float]  # the relative half-width of the windows about their median: a range's width
    latency_batches: NotRequired[int]  # the batches the load's waits were averaged over
    quick: NotRequired[bool]  # a quick probe (fewer windows, a wider range) that fit a time budget
    handoff_s: NotRequired[float]  # a worker process's hand-off of a batch (0 where not measured)
    receive_s: NotRequired[float]  # the training process's serial side of that hand-off
    worker_start_s: NotRequired[float]  # a worker process's start
    step_gil_share: NotRequired[float | None]  # the share of a step that holds the GIL
    step_beside_python: NotRequired[float | None]  # the step's wall beside a Python loop over its wall alone (>= 1)
    spin_after_step_s: NotRequired[float]  # CPU seconds OpenMP spins after a step
    steps_replayed: NotRequired[float]  # the batches the step was replayed over (a quick probe: part of one)
    machine: NotRequired[str]  # the host's fingerprint (engine/measure/host.py): whose runs it learns from
    taken_at: NotRequired[float]  # when it was taken (epoch seconds): a prediction's probe_age_s


class PredictionFields(TypedDict, total=False):
    """A run's prediction as the `prediction` event and the runs table carry it (engine/predict/forecast.py);
    empty where the model does not cover the run."""

    predicted_epoch_s: float  # the predicted steady epoch
    predicted_from: str  # 'prior' (a cached probe) or 'own' (the run's own probe)
    predicted_limit: str  # what limits it (a verdict name)
    predicted_lo_s: float  # the low end of its range
    predicted_hi_s: float  # the high end
    predicted_terms: dict[str, float]  # the per-epoch seconds of each limit
    probe_age_s: float | None  # how old the probe was (None: it did not say when it was taken)
