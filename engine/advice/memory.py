"""Memory: the cap a user gives (--max-memory 8G), each setting's peak against it, and an estimate before running.

    cap = parse_size("8G")                                # bytes; bad input is a ConfigError on max_memory
    foot = footprint(cfg)                                 # {"base_bytes", "worker_bytes"}, measured in a child
    estimate(setting, foot) > cap                         # tune skips a setting that cannot fit
    peak_line(best_peak, your_peak, cap)                  # what the answer says

The peak is a run's stored peak_rss_bytes: the PSS of its whole process tree (engine/measure/sampler.py), so
memory a forked worker shares with its parent counts once. The estimate (engine/advice/_footprint_child.py) builds
the dataset and model and loads a few batches in one process (base_bytes: the tree of a loader without worker
processes), then starts one DataLoader worker and reads its USS after a few batches (worker_bytes: what each
further worker process adds; its shared pages are the parent's). Threads share one process, so they add nothing.

NOTE: the estimate only keeps settings that cannot fit from running; the answer is judged on measured peaks.
"""

from __future__ import annotations

import json
import logging
import math
import re
import subprocess
import sys
from typing import Any

import pandas as pd

from engine.config import RunConfig
from engine.errors import ConfigError, printable
from engine.paths import ROOT
from engine.run.warm import run_env

__all__ = [
    "FOOTPRINT_TIMEOUT_S",
    "answer_lines",
    "drop_over_cap",
    "estimate",
    "fits",
    "fmt_bytes",
    "footprint",
    "parse_size",
    "peak_line",
    "within_cap",
    "worker_processes",
]

log = logging.getLogger(__name__)

FOOTPRINT_TIMEOUT_S = 120.0
_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_size(text: str | int | float | None, field: str = "max_memory") -> int | None:
    """'8G', '512M', '1.5g', '8GiB' or a bare number of bytes -> bytes; None or '' -> None (no cap)."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([kmgt]?)(?:i?b)?\s*", str(text).lower())
        if not m:
            raise ConfigError(field, f"'{printable(str(text)[:40])}' is not a size; write e.g. 8G, 512M or 1.5G")
        value = float(m.group(1)) * _UNITS[m.group(2)]
    if not math.isfinite(value) or value < 2**20:
        raise ConfigError(field, f"must be at least 1M, got '{printable(str(text)[:40])}'")
    return int(value)


def fmt_bytes(n: float | None) -> str:
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "not measured"
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def fits(peak: float | None, cap: int | None) -> bool:
    """A measured peak within the cap; an unmeasured peak fits (nothing says otherwise), as does any without a cap."""
    return cap is None or peak is None or (isinstance(peak, float) and math.isnan(peak)) or peak <= cap


def estimate(setting: RunConfig, foot: dict[str, Any]) -> float:
    """The peak PSS a setting's process tree is expected to reach: the base, and one worker's own memory per worker
    process (threads live in the one process)."""
    return float(foot["base_bytes"]) + worker_processes(setting) * float(foot["worker_bytes"])


def worker_processes(setting: RunConfig) -> int:
    """The loader's worker processes, each with its own copy of the dataset (threads live in the one process)."""
    return setting.workers if setting.loader == "processes" else 0


def peak_line(peak: float | None, yours: float | None, cap: int | None, whose: str = "your setup") -> str:
    """'peak memory (PSS, whole process tree): 1.20 GiB, 6.80 GiB under the 8.00 GiB cap; your setup 0.90 GiB'."""
    out = f"peak memory (PSS, whole process tree): {fmt_bytes(peak)}"
    if cap is not None and peak is not None and not math.isnan(peak):
        out += (
            f", {fmt_bytes(cap - peak)} under the {fmt_bytes(cap)} cap"
            if peak <= cap
            else f", {fmt_bytes(peak - cap)} over the {fmt_bytes(cap)} cap"
        )
    if yours is not None and not math.isnan(yours):
        out += f"; {whose} {fmt_bytes(yours)}"
    return out


def footprint(cfg: RunConfig, timeout_s: float = FOOTPRINT_TIMEOUT_S) -> dict[str, Any] | None:
    """The pipeline's memory footprint ({"base_bytes", "worker_bytes"}), measured in a child process so that
    nothing of the caller's counts; None (with a warning) when it fails or takes over timeout_s."""
    try:
        out = subprocess.run(
            [sys.executable, "-m", "engine.advice._footprint_child"],
            input=cfg.to_json(),
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=run_env(),
            timeout=timeout_s,
            check=False,
        )
        return json.loads(out.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        log.warning("the memory estimate took over %.0f s; settings are judged on their measured peaks only", timeout_s)
    except (IndexError, ValueError):
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        log.warning("the memory estimate failed (%s); settings are judged on their measured peaks only", last)
    return None


def within_cap(
    configs: list[RunConfig], base: RunConfig, cap: int, timeout_s: float = FOOTPRINT_TIMEOUT_S
) -> tuple[list[RunConfig], list[RunConfig], dict[str, Any] | None]:
    """(the configs the estimate says fit, those it says cannot, the footprint). Candidate 0 (the user's setup or
    sync: the reference) is always kept; without an estimate every config is kept and judged on its measured peak."""
    foot = footprint(base, timeout_s)
    if foot is None:
        return configs, [], None
    kept = [c for i, c in enumerate(configs) if i == 0 or estimate(c, foot) <= cap]
    return kept, [c for c in configs[1:] if estimate(c, foot) > cap], foot


def _worst(rows: list[dict[str, Any]], idx: int | None) -> float | None:
    peaks = [r["peak_bytes"] for r in rows if r["candidate"] == idx and r.get("peak_bytes") is not None]
    return float(max(peaks)) if peaks else None


def answer_lines(
    rows: list[dict[str, Any]], best: int | None, cap: int | None, skipped: int, foot: dict[str, Any] | None, whose: str
) -> list[str]:
    """What a tune's answer says of memory: the best's peak against candidate 0's and the cap, what the cap left
    out. rows: tune's runs, each with its candidate and peak_bytes."""
    if best is None:
        return []
    lines = [peak_line(_worst(rows, best), _worst(rows, 0) if best != 0 else None, cap, whose)]
    over = {r["candidate"] for r in rows if not fits(r.get("peak_bytes"), cap)}
    if over:
        lines.append(f"  {len(over)} measured setting(s) peaked above the cap and are not the answer")
    if skipped and foot:
        lines.append(
            f"  {skipped} setting(s) not run: the estimate ({fmt_bytes(foot['base_bytes'])}, and "
            f"{fmt_bytes(foot['worker_bytes'])} per worker process) puts them above the cap"
        )
    return lines


def drop_over_cap(runs: pd.DataFrame, keys: list[str], cap: int | None) -> pd.DataFrame:
    """The runs of the configs (rows grouped by `keys`) none of whose runs peaked above the cap."""
    if cap is None or "peak_rss_bytes" not in runs or runs.empty:
        return runs
    over = runs["peak_rss_bytes"].fillna(0) > cap
    bad = runs[over][keys].drop_duplicates()
    if bad.empty:
        return runs
    hit = runs[keys].merge(bad.assign(_over=True), on=keys, how="left")["_over"].fillna(False).to_numpy(dtype=bool)
    return runs[~hit]
