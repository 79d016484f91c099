"""The run page offers a --trace run's profiler trace for download, and nothing outside the run's folder."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from engine.config import RunConfig
from engine.measure.trace import TRACE_FILE


@pytest.fixture(scope="module")
def traced_store(tmp_path_factory):
    """One real traced run and one untraced run in a store of their own."""
    from engine.run.runner import launch  # noqa: PLC0415

    db = tmp_path_factory.mktemp("traced") / "loaderlab.duckdb"
    tiny = dict(workload="tensor", n_samples=64, image_size=8, width=8, epochs=2, batch_size=32, bound=False)
    runs = [launch(RunConfig.from_dict({**tiny, "trace": trace}), db=db) for trace in (True, False)]
    assert [r.status for r in runs] == ["done", "done"], [r.error for r in runs]
    return db, runs


def _buttons(at):
    return [b for b in at.get("download_button") if "profiler trace" in str(b.proto.label)]


def test_a_traced_run_offers_its_trace_and_says_how_to_open_it(traced_store, open_page, no_problems, monkeypatch):
    db, (traced, plain) = traced_store
    monkeypatch.setenv("LOADERLAB_DB", str(db))
    at = open_page("runs", run=traced.run_id)
    no_problems(at)
    assert len(_buttons(at)) == 1
    assert any("perfetto" in c.value.lower() for c in at.caption)
    with gzip.open(f"{traced.run_dir}/{TRACE_FILE}", "rt") as fh:
        assert json.load(fh)["traceEvents"]
    at = open_page("runs", run=plain.run_id, file="../../etc/passwd", trace="/etc/passwd")  # params name no file
    assert not at.exception and not _buttons(at)


def test_a_trace_that_points_outside_the_run_folder_is_not_offered(traced_store, open_page, monkeypatch, tmp_path):
    db, (_, plain) = traced_store
    monkeypatch.setenv("LOADERLAB_DB", str(db))
    secret = tmp_path / "secret.json.gz"
    secret.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    link = Path(plain.run_dir) / TRACE_FILE
    link.symlink_to(secret)
    try:
        at = open_page("runs", run=plain.run_id)
        assert not at.exception and not _buttons(at)
    finally:
        link.unlink()
