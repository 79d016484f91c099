"""The run page's profiler trace: a download button when the run recorded one (`--trace`), with how to open it.

The file is always `<the run's stored run_dir>/trace.json.gz`: the browser gives only a run id (checked
and looked up in the store by ui.run_detail), never a path or a file name, and a trace that resolves
outside the run's folder (a symlink) is not offered.

    trace_download(run)     # nothing when the run has no trace
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from engine import api
from ui.text import plain

__all__ = ["trace_download", "trace_file"]

_MAX_BYTES = 512 * 2**20  # a bigger file stays on the server: st.download_button holds it in memory


def trace_file(run: dict[str, Any]) -> Path | None:
    """The run's trace, only if it is a regular file inside the run's own folder."""
    run_dir = run.get("run_dir")
    if not run_dir:
        return None
    folder = Path(run_dir).resolve()
    path = folder / api.TRACE_FILE
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    return real if real.parent == folder and real.is_file() else None


def trace_download(run: dict[str, Any]) -> None:
    path = trace_file(run)
    if path is None:
        if (run.get("config") or {}).get("trace"):
            st.caption(
                "This run asked for a profiler trace, but its folder holds none (it failed before the "
                "traced epoch, or the folder was purged)."
            )
        return
    size = path.stat().st_size
    if size > _MAX_BYTES:
        st.caption(
            f"Profiler trace: {size / 2**20:.0f} MiB, too big to download here; it is on the server at {plain(path)}."
        )
        return
    st.download_button(
        f"Download the profiler trace ({size / 2**20:.1f} MiB)",
        path.read_bytes(),
        file_name=f"{run['run_id']}-{api.TRACE_FILE}",
        mime="application/gzip",
        key="runs.trace_download",
    )
    st.caption(
        "One extra epoch after the measured ones, profiled by torch.profiler (its figures are not stored). "
        "Open it at https://ui.perfetto.dev (drop the .json.gz file in), chrome://tracing, or TensorBoard's "
        "trace viewer."
    )
