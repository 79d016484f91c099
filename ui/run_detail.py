"""One run in detail (?run=<id>) and 2–4 runs side by side (?compare=a,b). A bad id is an st.error.

Detail: figures with bound / efficiency / verdict, config, per-epoch chart, where each epoch's time
goes, a step timeline for one chosen epoch, and the run's tags and notes (editable).
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd
import streamlit as st

from engine import api
from ui import cache, run_costs, tunes
from ui.observed import observed, why_no_verdict
from ui.cache import cached
from ui.text import plain, when
from ui.trace import trace_download
from ui.words import MISSING, plural

__all__ = ["check_ids", "compare", "detail", "verdict_text"]

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_HIDDEN = {"config_json", "summary_json", "host_json", "config", "summary"}


def check_ids(raw: str, *, lo: int = 1, hi: int = 1) -> list[dict[str, Any]] | None:
    """The stored runs for a comma list of ids, or None after an st.error naming what is wrong."""
    ids = [i.strip() for i in raw.split(",") if i.strip()]
    if not lo <= len(ids) <= hi:
        st.error(f"Give {lo}–{hi} run ids separated by commas (got {len(ids)}); pick runs in the table below.")
        return None
    runs = []
    for run_id in ids:
        if not _ID.match(run_id):
            st.error(
                f"{plain(repr(run_id[:80]))} is not a run id (ids look like 20250101-120000-a1b2c3); "
                "pick a run in the table below."
            )
            return None
        run = cached(api.get_run, run_id)
        if run is None:
            st.error(
                f"There is no run {plain(repr(run_id))} in this store; it may have been purged. "
                "Pick one in the table below."
            )
            return None
        runs.append(run)
    return runs


_FIGURES = {
    "epoch_s": ("epoch time", "{:.3f} s"),
    "samples_per_s": ("samples/s", "{:,.0f}"),
    "ttfb_s": ("first batch", "{:.3f} s"),
    "bound_s": ("lower bound", "{:.3f} s"),
    "efficiency": ("efficiency", "{:.0%}"),
    "verdict": ("verdict", "{}"),
    "data_wait_share": ("data wait", "{:.0%}"),
    "h2d_share": ("copy", "{:.0%}"),
    "compute_share": ("compute", "{:.0%}"),
    "other_share": ("other", "{:.0%}"),
    "data_wait_p50_s": ("wait p50", "{:.4f} s"),
    "data_wait_p90_s": ("wait p90", "{:.4f} s"),
    "data_wait_p99_s": ("wait p99", "{:.4f} s"),
    "peak_rss_mib": ("peak memory (PSS)", "{:.0f} MiB"),
    "mean_cpu_pct": ("mean CPU", "{:.0f} %"),
}


def _fmt(key: str, value: Any) -> str:
    if key == "efficiency" and value is not None:
        return api.efficiency_text(value)  # above 1: no fraction, and no verdict (_figures)
    return "–" if value is None or value != value else _FIGURES[key][1].format(value)


def _sampled(run: dict[str, Any], key: str) -> str:
    """A figure; memory and CPU of a run that sampled neither say so, not a bare dash."""
    if key in ("peak_rss_mib", "mean_cpu_pct") and run.get(key) is None and run.get("sample_hz") == 0:
        return "not sampled (sample_hz 0)"
    return _fmt(key, run.get(key))


def _cores(run: dict[str, Any]) -> str:
    cores, threads, extra = run.get("usable_cores"), run.get("runnable_threads"), run.get("extra_threads")
    if cores is None or cores != cores or threads is None or threads != threads:
        return ""
    pools = f", {int(extra)} of them in pools the lab did not set (BLAS, OpenMP)" if extra and extra == extra else ""
    return f": {cores:g} here, {int(threads)} runnable threads in this run{pools}"


def verdict_text(run: dict[str, Any]) -> tuple[str, str]:
    """(the stored verdict, what it says), or ("none", why there is none): the page says the store's verdict, and
    where there is none it says why, never a bare dash."""
    eff, verdict, help_ = run.get("efficiency"), run.get("verdict"), run.get("verdict_help") or ""
    above_one = eff is not None and eff == eff and eff > 1
    if verdict and not above_one:
        return str(verdict), help_
    if above_one:
        return "none", "the lower bound came out above the measured epoch (a busy machine during its passes)"
    if run.get("source") == "observed":
        return "none", why_no_verdict(run).removeprefix("none yet: ")
    if help_:  # a cancelled run's kept epochs, between the clear cases: the sentence says why
        return "none", help_
    if run.get("bound_error"):
        return "none", "its lower bound could not be measured (below)"
    if run.get("status") != api.RunStatus.DONE:
        status = str(run.get("status"))
        said = {"failed": "it failed", "running": "it is still running"}.get(status, f"it was {status}")
        return "none", f"{said} before its lower bound was measured"
    if run["config"].get("bound") is False:
        return "none", "the lower bound was off for this run (Measure lower bound, in the Launch form's Measure group)"
    return "none", "no lower bound is stored for this run"


def _figures(run: dict[str, Any]) -> None:
    cols = st.columns(5)
    for col, key in zip(cols, list(_FIGURES)[:5]):
        col.metric(_FIGURES[key][0], _fmt(key, run.get(key)))
    verdict, why = verdict_text(run)
    st.markdown(
        f"Verdict: **{plain(verdict)}**"
        + (f": {plain(why)}" if why else "")
        + " (efficiency = lower bound ÷ measured epoch; the bound is the most of the loader pass, the compute "
        "pass, and their CPU-seconds over the usable cores" + _cores(run) + ")"
    )
    measured = cached(api.run_advice, run["run_id"]) if run.get("run_id") else None  # a setting named, not a verdict
    if measured and measured.suggestion:
        st.markdown(f"Next: {plain(measured.suggestion)}")
    if measured and measured.spread:
        st.warning(plain(measured.spread), icon=":material/stacked_line_chart:")
    overlap = run.get("overlap")
    if overlap is not None and overlap == overlap:
        st.markdown(
            f"Overlap: **{overlap:.0%}** of the time the two models' compute would take one after another "
            "was hidden by running them at once (0% = none, 100% = all of it). In this mode A + B's compute "
            "is no lower bound, so the efficiency above is against the slower model alone."
        )
    if run.get("bound_note"):
        st.warning(plain(run["bound_note"]))
    if run.get("bound_error"):
        st.warning(f"No lower bound for this run (its epochs stand): {plain(run['bound_error'])}")
    rss = run.get("peak_rss_bytes")
    run = {**run, "peak_rss_mib": rss / 2**20 if rss else None}
    st.caption(
        "Where the steady-state time goes, per-step data wait, and the process tree (workers included; memory "
        "is PSS, so pages workers share copy-on-write count once): "
        + " · ".join(f"{_FIGURES[k][0]} {_sampled(run, k)}" for k in list(_FIGURES)[6:])
    )
    run_costs.gpu_idle(run)
    run_costs.startup(run)


def _setting(value: Any) -> str:
    """A config value as text; an unset one (None: the default applies) as MISSING, never "None"."""
    return MISSING if value is None else str(value)


def _traceback(run: dict[str, Any]) -> None:
    """A failed run's full traceback, from its RunLog (the error above is its last line), folded away."""
    text = api.end_traceback(run["run_dir"]) if run.get("run_dir") else None
    if text:
        with st.expander("Traceback", expanded=False):
            st.code(text, language=None)


def _cancelled(run: dict[str, Any], epochs: pd.DataFrame) -> None:
    """Say a cancelled run as cancelled (not as a failure), with its kept epochs. Its verdict is the stored one
    (the store judges its kept epochs at ingest: engine/analysis/kept.py)."""
    kept = int(epochs["epoch"].nunique()) if not epochs.empty else 0
    st.info(
        f"Cancelled after {plural(kept, 'finished epoch')}: "
        + ("they are kept, and the figures below come from them." if kept else "nothing was measured."),
        icon=":material/cancel:",
    )


def detail(run: dict[str, Any]) -> None:
    run_id = run["run_id"]
    st.subheader(f"Run {plain(run_id)}")
    parts = [
        run.get("status"),
        f"created {when(run.get('created_at'))}",
        f"host {run['host']}" if run.get("host") else None,
        run.get("cpu_model"),
        run.get("gpu_name"),
    ]
    st.caption(plain(" · ".join(str(p) for p in parts if p)))
    epochs = cached(api.get_epochs, run_id)
    if run.get("status") == api.RunStatus.CANCELLED:
        _cancelled(run, epochs)
    elif run.get("error"):
        st.error(f"The run failed: {plain(run['error'])}")
        _traceback(run)
    _figures(run)
    tunes.trial_of(run)  # a trial of a script's tune: which one, and the link to it in Explore
    observed(run)  # a run of the user's own loop: what was observed, what the lab would try next
    c1, c2 = st.columns(2)
    c1.plotly_chart(api.epoch_chart(epochs), key="runs.epoch_chart")
    c2.plotly_chart(api.epoch_breakdown_chart(epochs), key="runs.breakdown")
    if not epochs.empty:
        choices = sorted(int(e) for e in epochs["epoch"].unique())
        if st.session_state.get("runs.epoch_pick") not in choices:
            wanted = str(st.session_state.get("runs.epoch") or "")
            st.session_state["runs.epoch_pick"] = (
                int(wanted) if wanted.isdigit() and int(wanted) in choices else choices[-1]
            )
        epoch = st.selectbox("Epoch for the step timeline", choices, key="runs.epoch_pick")
        st.session_state["runs.epoch"] = str(epoch)
        st.plotly_chart(api.step_timeline_chart(cached(api.get_steps, run_id, epoch), epoch), key="runs.timeline")
    trace_download(run)  # the --trace file, when the run recorded one
    with st.expander("Config and host", expanded=False):
        config = pd.DataFrame({"field": list(run["config"]), "value": [_setting(v) for v in run["config"].values()]})
        st.dataframe(config, hide_index=True, key="runs.config", placeholder=MISSING)
        st.json({k: v for k, v in run.items() if k not in _HIDDEN and k not in run["config"]}, expanded=False)
    _edit(run)
    _code(run)


def _code(run: dict[str, Any]) -> None:
    """The page ends with the code to paste: this run's loader, built from the user's dataset (copy button)."""
    if run.get("status") != api.RunStatus.DONE or run["config"].get("loader") not in api.SNIPPETS:
        return  # a failed run's setting is no answer to paste
    st.markdown("**The code: this run's loader, built from your `dataset`**")
    st.code(api.snippet(run["config"], api.run_title(run)), language="python")


def _edit(run: dict[str, Any]) -> None:
    run_id = run["run_id"]
    with st.form(f"runs.edit.{run_id}"):
        tags = st.text_input("Tags (comma-separated)", value=run.get("tags") or "", key=f"runs.tags.{run_id}")
        notes = st.text_area("Notes", value=run.get("notes") or "", key=f"runs.notes.{run_id}")
        if st.form_submit_button("Save tags and notes"):
            api.set_tags(run_id, tags)
            api.set_notes(run_id, notes)
            cache.clear()
            st.success("Saved.")
    deleted = bool(run.get("deleted"))
    label = "Restore this run" if deleted else "Delete this run"
    if st.button(label, key="runs.delete_one", help="deleted runs are hidden from lists and charts until purged"):
        (api.restore if deleted else api.soft_delete)([run_id])
        cache.clear()
        st.rerun()
    if deleted:
        st.warning("This run is deleted: it is hidden from lists and charts, and goes for good at the next purge.")


def compare(runs: list[dict[str, Any]]) -> None:
    ids = [r["run_id"] for r in runs]
    st.subheader("Compare " + plain(", ".join(ids)))
    keys = list(dict.fromkeys(k for r in runs for k in r["config"]))
    table = pd.DataFrame({r["run_id"]: [_setting(r["config"].get(k)) for k in keys] for r in runs}, index=keys)
    differ = table.nunique(axis=1) > 1
    figures = pd.DataFrame(
        {r["run_id"]: [_fmt(k, r.get(k)) for k in _FIGURES] + run_costs.column(r) for r in runs},
        index=[label for label, _ in (*_FIGURES.values(), *run_costs.FIGURES.values())],
    )
    c1, c2 = st.columns(2)
    c1.markdown(f"**Config fields that differ** ({int(differ.sum())} of {len(keys)})")
    diff = table[differ]
    if diff.empty:
        c1.info("The configs are identical: these are repeats of one config.")
    else:
        base = diff.iloc[:, 0]
        styled = diff.style.apply(
            lambda col: ["background-color: #fde68a; font-weight: 600" if v != b else "" for v, b in zip(col, base)],
            axis=0,
        )
        c1.dataframe(styled, key="runs.diff", placeholder=MISSING)
    c2.markdown("**Results**")
    c2.dataframe(figures, key="runs.figures", placeholder=MISSING)
    epochs = pd.concat([cached(api.get_epochs, i) for i in ids], ignore_index=True)
    st.plotly_chart(api.compare_chart(epochs), key="runs.compare_chart")
