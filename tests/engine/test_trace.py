"""--trace: one extra profiled epoch in the run folder, the stored epochs untouched, refused where it cannot see."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from engine.config import ConfigError, RunConfig
from engine.measure.trace import TRACE_FILE, TRACED_MODES, trace_path
from engine.registry import check
from engine.store import connect
from tests._cli import cli_in_process
from tests.engine._mode_runs import TINY, launch_mode

pytestmark = pytest.mark.usefixtures("warm_runs")  # runs forked warm: these check what a run measures


def _trace_events(run_dir: str | Path) -> list[dict]:
    path = trace_path(run_dir)
    assert path is not None and path.name == TRACE_FILE
    with gzip.open(path, "rt") as fh:
        return json.load(fh)["traceEvents"]


def test_a_traced_run_stores_the_same_epochs_as_an_untraced_one_and_a_chrome_trace(store):
    plain, plain_events = launch_mode(store, epochs=2)
    traced, traced_events = launch_mode(store, epochs=2, trace=True)
    assert plain.status == traced.status == "done", (plain.error, traced.error)
    epochs = [
        [(e["epoch"], e["warmup"], e["samples"]) for e in ev if e["type"] == "epoch"]
        for ev in (plain_events, traced_events)
    ]
    assert epochs[0] == epochs[1] == [(0, True, 128), (1, False, 128)]  # the traced epoch is extra and unstored
    assert trace_path(plain.run_dir) is None
    names = {e.get("name", "") for e in _trace_events(traced.run_dir)}
    assert any("aten::" in n for n in names), sorted(names)[:20]  # the training step's ops are in it
    with connect(store, read_only=True) as conn:
        rows = dict(conn.execute("SELECT run_id, n_epochs FROM runs").fetchall())
        traced_row = conn.execute("SELECT trace, summary_json FROM runs WHERE run_id = ?", [traced.run_id]).fetchone()
    assert rows[plain.run_id] == rows[traced.run_id] == 2
    assert traced_row[0] is True and json.loads(traced_row[1])["trace_file"] == TRACE_FILE


def test_the_sampler_stops_before_the_traced_epoch(store):
    """Memory and CPU % are figures of the measured epochs too: no sample is taken while the profiler runs an
    extra epoch (about 0.6 s here, at 100 samples a second)."""
    traced, events = launch_mode(store, epochs=2, trace=True, sample_hz=100.0, latency_ms=5.0)
    assert traced.status == "done", traced.error
    last_epoch = max(e["t"] for e in events if e["type"] == "epoch")
    sampled = [row[0] for e in events if e["type"] == "samples" for row in e["rows"]]
    assert len(sampled) > 20 and max(sampled) < last_epoch + 0.3, max(sampled) - last_epoch


@pytest.mark.parametrize("mode, extra", [("dual-sequential", {}), ("fused", {"n_models": 2})])
def test_other_in_process_modes_trace_too(store, mode, extra):
    result, events = launch_mode(store, mode=mode, trace=True, **extra)
    assert result.status == "done", result.error
    assert {e["epoch"] for e in events if e["type"] == "epoch"} == {0, 1}
    assert _trace_events(result.run_dir)


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda"])
@pytest.mark.parametrize("mode", ["dual-threads", "dual-processes", "ddp"])
def test_modes_the_profiler_cannot_see_refuse_trace_by_name(mode, device):
    """The trace error comes first on every machine: no CUDA here (device cuda) or one GPU for ddp's two ranks
    there (auto, cuda) must not put a host-dependent error in its place."""
    assert mode not in TRACED_MODES
    with pytest.raises(ConfigError) as err:
        check(RunConfig.from_dict({**TINY, "mode": mode, "trace": True, "device": device, "world_size": 2}))
    assert err.value.field == "trace" and mode in err.value.message


@pytest.mark.parametrize("device", [[], ["--device", "cuda"]], ids=["auto", "cuda"])
def test_cli_trace_in_a_mode_it_cannot_see_exits_2_and_stores_nothing(store, device):
    bad = cli_in_process("run", "--mode", "ddp", "--trace", *device, db=store)
    assert bad.returncode == 2 and "trace:" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    with connect(store, read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
