"""Two blocks of the run page: how much of the time the GPU waited and on what (NVML beside it), and where the
run's start-up went. Both read the run's row; a figure the run did not measure shows "–", never 0.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from engine import api

__all__ = ["FIGURES", "column", "fmt", "gpu_idle", "startup"]

_GPU = {
    "gpu_idle_share": ("GPU idle", "{:.0%}"),
    "gpu_idle_data_share": ("waiting on data", "{:.0%}"),
    "gpu_idle_copy_share": ("waiting on copies", "{:.0%}"),
    "gpu_idle_other_share": ("other host time", "{:.0%}"),
    "mean_gpu_util": ("GPU utilisation (NVML)", "{:.0f} %"),
    "peak_gpu_mem_mib": ("peak GPU memory", "{:,.0f} MiB"),
}
_STARTUP = {
    "startup_s": ("start-up to first batch", "{:.2f} s"),
    **{k: (label, "{:.2f} s") for k, label in api.STARTUP_PHASES.items()},
    "calibration_s": ("bound passes", "{:.2f} s"),
}
FIGURES = {**_GPU, **_STARTUP}  # label and format of each, for the comparison table too


def fmt(key: str, value: Any) -> str:
    return "–" if value is None or value != value else FIGURES[key][1].format(value)


def _with_mib(run: dict[str, Any]) -> dict[str, Any]:
    """The run with its peak GPU memory in MiB, as shown."""
    mem = run.get("peak_gpu_mem_bytes")
    return {**run, "peak_gpu_mem_mib": mem / 2**20 if mem is not None and mem == mem else None}


def column(run: dict[str, Any]) -> list[str]:
    """The run's FIGURES as shown, in order: its column in the comparison table."""
    run = _with_mib(run)
    return [fmt(k, run.get(k)) for k in FIGURES]


def gpu_idle(run: dict[str, Any]) -> None:
    """The GPU block, for a run that measured anything on a GPU; nothing for a CPU run."""
    run = _with_mib(run)
    if all(fmt(k, run.get(k)) == "–" for k in _GPU):
        return
    st.markdown(
        "**GPU**: the share of the steady epochs' wall time its compute stream sat idle between steps, "
        "split by what the host was doing meanwhile (the three parts add up to the idle share, as far as the "
        "CUDA events can tell), with NVML's utilisation and device memory beside it"
    )
    for col, key in zip(st.columns(len(_GPU)), _GPU):
        col.metric(_GPU[key][0], fmt(key, run.get(key)))
    idle, copy = run.get("gpu_idle_s"), run.get("copy_wait_s")
    if idle is not None and idle == idle:
        st.caption(
            f"Per steady epoch: GPU idle {idle:.3f} s"
            + (
                f", of which the compute stream waited {copy:.3f} s for side-stream copies"
                if copy is not None and copy == copy
                else ""
            )
        )


def startup(run: dict[str, Any]) -> None:
    """One line: launch to first batch by phase, and the bound's passes after the epochs."""
    if fmt("startup_s", run.get("startup_s")) == "–" and fmt("calibration_s", run.get("calibration_s")) == "–":
        return
    phases = " · ".join(f"{FIGURES[k][0]} {fmt(k, run.get(k))}" for k in api.STARTUP_PHASES)
    st.markdown(
        f"Start-up: **{fmt('startup_s', run.get('startup_s'))}** from launch to the first batch ({phases}); "
        f"after the epochs, the bound's passes took {fmt('calibration_s', run.get('calibration_s'))}"
    )
