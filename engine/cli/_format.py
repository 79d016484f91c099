"""How the commands print: one-line text, tables safe for a terminal, a run's summary, query results as a table,
CSV or JSON, and the prediction table. Nothing here reads the store or parses a flag."""

from __future__ import annotations

import sys
from typing import Any, Callable, Iterator, TextIO

import pandas as pd

from engine.advice.advisor import describe
from engine.advice.code import snippet
from engine.config import RunConfig
from engine.errors import printable
from engine.measure import efficiency_text

__all__ = ["WRITERS", "line", "predicted_table", "print_code", "setting", "shown", "summary", "warn"]


def line(text: object) -> str:
    """Text for one line of the terminal: whitespace runs (newlines too) collapsed, control characters escaped."""
    return printable(" ".join(str(text).split()))


def warn(warnings: list[str]) -> None:
    for warning in warnings:
        print(f"warning: {printable(warning)}", file=sys.stderr)


def _given(value: Any) -> bool:
    return value is not None and value == value  # NaN from the store is "not measured"


def shown(df: pd.DataFrame) -> pd.DataFrame:
    """A frame for the terminal: control characters in its text (tags, notes, names, query results) escaped, so that
    a tag holding an ANSI escape prints as text instead of recolouring or rewriting the user's terminal."""
    out = df.rename(columns=lambda c: printable(str(c)))
    for i in range(out.shape[1]):
        col = out.iloc[:, i]
        if col.dtype == object or pd.api.types.is_string_dtype(col):
            out.isetitem(i, col.map(lambda v: printable(v) if isinstance(v, str) else v))
    return out


# ---------------------------------------------------------------------------- a run


def summary(run_id: str, run: dict[str, Any]) -> list[str]:
    """A stored run in a few lines: its figures on the first, then the verdict's help, notes and costs."""
    parts = [f"run {run_id}: {run['status']}"]
    if run.get("epoch_s") is not None:
        parts.append(f"epoch {run['epoch_s']:.3f} s (median, warm-up excluded)")
    if run.get("samples_per_s") is not None:
        parts.append(f"{run['samples_per_s']:.0f} samples/s")
    if run.get("efficiency") is not None:  # above 1 no fraction and no verdict (engine/measure/verdicts.py)
        parts.append(
            f"bound {run['bound_s']:.3f} s, efficiency {efficiency_text(run['efficiency'])}"
            + (f", {run['verdict']}" if run.get("verdict") and run["efficiency"] <= 1 else "")
        )
    if _given(run.get("overlap")):  # concurrent modes: how much of A + B's compute the concurrency hid
        parts.append(f"overlap {run['overlap']:.0%}")
    out = [" · ".join(parts)]
    for key, what in (("verdict_help", run.get("verdict")), ("bound_note", "note"), ("bound_error", "no lower bound")):
        if run.get(key):
            out.append(f"  {what}: {line(run[key])}")
    return out + [f"  {cost}" for cost in _costs(run)]


def _costs(run: dict[str, Any]) -> list[str]:
    """What the GPU waited on (GPU runs only) and how long the start-up took: lines under the summary."""
    out = []
    if _given(run.get("gpu_idle_share")):
        parts = [
            (f"gpu_idle_{key}_share", what)
            for key, what in (("data", "data"), ("copy", "copies"), ("other", "the host"))
        ]
        split = ", ".join(f"{what} {run[k]:.0%}" for k, what in parts if _given(run.get(k)))
        out.append(
            f"GPU idle {run['gpu_idle_share']:.0%} of the steady epochs" + (f", waiting on {split}" if split else "")
        )
    if _given(run.get("startup_s")):
        out.append(
            f"start-up {run['startup_s']:.1f} s to the first batch (interpreter and imports "
            f"{run['startup_imports_s']:.1f} s)"
        )
    return out


# ---------------------------------------------------------------------------- query results


def _write_table(batches: Iterator[pd.DataFrame], out: TextIO) -> None:
    frames = list(batches)
    out.write(
        shown(frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)).to_string(index=False) + "\n"
    )


def _write_csv(batches: Iterator[pd.DataFrame], out: TextIO) -> None:
    for i, df in enumerate(batches):  # NOTE: a batch at a time: no result is ever held whole, nor written at once
        df.to_csv(out, index=False, header=i == 0)


def _write_json(batches: Iterator[pd.DataFrame], out: TextIO) -> None:
    """One JSON array of records, as DataFrame.to_json writes it, written a batch at a time."""
    sep = "["
    for df in batches:
        if len(df):
            out.write(sep + df.to_json(orient="records")[1:-1])
            sep = ","
    out.write("[]\n" if sep == "[" else "]\n")


WRITERS: dict[str, Callable[[Iterator[pd.DataFrame], TextIO], None]] = {
    "table": _write_table,
    "csv": _write_csv,
    "json": _write_json,
}


# ---------------------------------------------------------------------------- settings and predictions


def print_code(setting: dict[str, Any] | RunConfig | None, title: str) -> None:
    """The answer as code, printed last: what the user pastes."""
    if setting is not None:
        print(f"\n# --- the code: paste it where your loader is built ---\n{snippet(setting, title)}", end="")


def setting(row: Any) -> str:
    """'processes, 2 workers, depth 2, batch 64, 1 thread': the knobs a prediction depends on."""
    threads = int(row["threads"])
    return f"{describe(row)}, " + (f"{threads} thread{'s' * (threads != 1)}" if threads else "default threads")


def _differs(first: Any, other: Any) -> str:
    """'depth 8' or 'threads, 1 worker': what `other` sets unlike `first`, in the setting's words."""
    names = {
        "loader": "",
        "workers": "workers ",
        "prefetch_depth": "depth ",
        "threads": "threads ",
        "batch_size": "batch ",
    }
    return ", ".join(f"{names[k]}{other[k]}" for k in names if other[k] != first[k]) or setting(other)


def predicted_table(table: pd.DataFrame) -> str:
    """One line per prediction: settings the model predicts alike share a line (it cannot tell them apart), and
    a `~` marks a range that overlaps the fastest's (this machine's noise cannot rank the two)."""
    alike: dict[int, list[int]] = {}
    for i, same_as in zip(table.index, table["same_as"]):
        alike.setdefault(i if pd.isna(same_as) else int(same_as), []).append(i)
    out = table.loc[sorted(alike)].copy()
    out.insert(0, "setting", [setting(r) for _, r in out.iterrows()])
    out["alike (the model cannot tell apart)"] = [
        "; ".join(_differs(table.loc[i], table.loc[j]) for j in alike[i][1:]) for i in out.index
    ]
    out["range (s)"] = [
        f"{'' if a else '~'}{lo:.3f}-{hi:.3f}"
        for lo, hi, a in zip(out["predicted_lo_s"], out["predicted_hi_s"], out["apart"])
    ]
    out = out[
        ["setting", "predicted_epoch_s", "range (s)", "samples_per_s", "limit", "alike (the model cannot tell apart)"]
    ].rename(columns={"predicted_epoch_s": "predicted epoch (s)", "samples_per_s": "samples/s"})
    text = shown(out).to_string(
        index=False, formatters={"predicted epoch (s)": "{:.3f}".format, "samples/s": "{:.0f}".format}
    )
    notes = []
    if len(out) < len(table):
        notes.append(
            "alike: settings predicted the same as the row's, shown once: the model cannot tell them apart "
            "(run them to know)"
        )
    if not out["range (s)"].iloc[1:].str.startswith("~").eq(False).all():
        notes.append("~: the range overlaps the fastest's: this machine's noise cannot rank the two")
    return text + ("\n\n" + "\n".join(notes) if notes else "")  # a blank line: the table ends there
