"""The Launch page through app.py: the generated form, inline validation, presets, URL state, sweeps, the queue,
the target (this machine or a Ray cluster)."""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest

from engine import jobs
from engine.config import RunConfig, SweepConfig, config_fields
from engine.paths import jobs_dir, runs_dir
from engine.presets import PRESETS
from engine.run.hostfit import usable_cores
from engine.run.runner import kill_group
from engine.store import connect
from tests._markup import live_markup, seen


@pytest.fixture
def launch(store, open_page):
    """launch(**query_params) -> AppTest on the Launch page; the worker the page starts is stopped after."""
    yield lambda **params: open_page("launch", **params)
    jobs.stop_worker(store, timeout_s=30)
    for pid_file in runs_dir(store).glob("*/pid"):
        kill_group(int(pid_file.read_text()))


def queue_run(at):
    at.button(key="launch.queue_run").click()
    return at.run()


def test_every_config_field_has_a_widget_and_the_form_queues_a_job(launch, store, no_problems):
    at = launch()
    no_problems(at)
    keys = {w.key for kind in ("number_input", "selectbox", "checkbox", "text_input") for w in getattr(at, kind)}
    assert {f"run.{f.name}" for f in config_fields() if f.metadata.get("ui") != "hidden"} <= keys
    assert jobs.worker_alive(store)  # the page makes sure a worker runs the queue
    at.selectbox(key="run.preset").set_value("tiny_cpu").run()
    at.number_input(key="run.n_samples").set_value(128)
    at = queue_run(at)
    no_problems(at)
    queued = jobs.list_jobs(store)
    assert len(queued) == 1
    cfg = RunConfig.from_dict(json.loads(queued.loc[0, "config_json"]))
    assert cfg == PRESETS["tiny_cpu"]().replace(n_samples=128)
    assert any(queued.loc[0, "job_id"] in seen(s.value) for s in at.success)
    assert any(f"/runs?run={queued.loc[0, 'run_id']}" in m.value for m in at.markdown)


@pytest.mark.parametrize("field, value, group", [("device", "cuda:9", "Training"), ("folder", "", "Workload")])
def test_bad_value_is_shown_under_its_field_and_nothing_is_queued(launch, store, field, value, group):
    at = launch()
    if field == "folder":
        at.selectbox(key="run.workload").set_value("folder")
    at.text_input(key=f"run.{field}").set_value(value)
    at = queue_run(at)
    assert not at.exception
    inline = [e.value for e in next(x for x in at.expander if x.label == group).error]
    assert inline and inline[0].startswith(f"**{field}**")
    assert any(f"fix **{field}**" in e.value for e in at.error)
    assert jobs.list_jobs(store).empty


def test_the_form_refuses_ranks_this_host_cannot_run_and_warns_of_oversubscription(launch, store):
    """The form goes through engine.api.check_host, as every launcher does: values relative to this host."""
    cores = len(os.sched_getaffinity(0))
    at = launch(mode="ddp", world_size=str(8 * cores), device="cpu")
    inline = [seen(e.value) for e in next(x for x in at.expander if x.label == "Mode").error]
    assert inline and inline[0].startswith("**world_size**") and "oversubscribed" in inline[0]
    at = queue_run(at)
    assert jobs.list_jobs(store).empty
    at.number_input(key="run.world_size").set_value(usable_cores() + 1).run()
    assert not at.error and any(seen(w.value).startswith("world_size: ") and "time-share" in seen(w.value)
                                for w in at.warning)


def test_preset_and_url_fill_the_form_and_the_form_writes_the_url(launch):
    at = launch(loader="threads", workers="3", pin_memory="false", bogus="1")
    assert (at.selectbox(key="run.loader").value, at.number_input(key="run.workers").value) == ("threads", 3)
    assert at.checkbox(key="run.pin_memory").value is False
    assert any("bogus" in w.value for w in at.warning)
    at.selectbox(key="run.preset").set_value("storage_latency").run()
    assert at.number_input(key="run.latency_ms").value == PRESETS["storage_latency"]().latency_ms
    assert at.number_input(key="run.workers").value == 16
    assert at.query_params["latency_ms"] == "2.0" and at.query_params["loader"] == "threads"
    assert not at.error
    at.switch_page("pages/history.py").run()  # Streamlit drops the state of widgets it did not draw
    at.query_params.clear()
    at.switch_page("pages/launch.py").run()
    assert at.number_input(key="run.workers").value == 16 and at.selectbox(key="run.loader").value == "threads"


@pytest.mark.parametrize("field, value, why", [
    ("batch_size", "-1", "must be >= 1"), ("n_samples", "1e99", "must be <= 10000000"),
    ("workers", "2.5", "not a whole number"), ("latency_ms", "-3", "must be >= 0.0"),
    ("epochs", "abc", "expected int"), ("lr", "nan", "not a finite number"), ("pin_memory", "maybe", "expected bool"),
])
def test_an_out_of_range_url_value_is_named_in_a_warning_not_clamped(launch, field, value, why):
    """Issue 19: /launch?batch_size=-1 and n_samples=1e99 were clamped silently while other bad values warned."""
    at = launch(**{field: value})
    assert not at.exception
    warnings = [w.value for w in at.warning if f"Ignored URL parameter {field}=" in seen(w.value)]
    assert len(warnings) == 1, [seen(w.value) for w in at.warning]
    assert why in seen(warnings[0]) and not live_markup(warnings[0]), warnings
    default = getattr(RunConfig(), field)
    assert at.session_state[f"run.{field}"] == default  # the default, as the warning says
    assert f"using the default, {default}" in seen(warnings[0])


def test_a_url_value_within_bounds_is_taken_without_a_warning(launch):
    at = launch(batch_size="1", n_samples="10000000", workers="2.0", latency_ms="0")
    assert not at.exception and not at.warning, [seen(w.value) for w in at.warning]
    assert [at.number_input(key=f"run.{k}").value for k in ("batch_size", "n_samples", "workers", "latency_ms")] == \
        [1, 10_000_000, 2, 0.0]


def test_every_preset_is_valid_here():
    for name, preset in PRESETS.items():
        assert RunConfig.from_dict(preset().to_dict()) == preset(), name


def test_sweep_builder_counts_distinct_configs_times_repeats_and_queues_them(launch, store):
    at = launch()
    at.multiselect(key="sweep.axes").set_value(["loader", "workers"]).run()
    at.text_input(key="sweep.axis.loader").set_value("sync, prefetch")
    at.text_input(key="sweep.axis.workers").set_value("0, 1")
    at.number_input(key="sweep.repeats").set_value(3).run()
    # workers is normalised to 0 for sync and prefetch: 4 grid points, 2 distinct configs
    assert any(m.value.startswith("**6 runs** = 2 distinct configs × 3 repeats") for m in at.markdown)
    at.text_input(key="sweep.axis.workers").set_value("zero").run()
    assert any(e.value.startswith("**workers**") for e in at.error)
    assert at.button(key="launch.queue_sweep").disabled
    at.text_input(key="sweep.axis.workers").set_value("0").run()
    at.button(key="launch.queue_sweep").click().run()
    assert not at.exception and not at.error
    queued = jobs.list_jobs(store)
    assert len(queued) == 6 and queued["sweep_id"].nunique() == 1


def test_jobs_panel_shows_live_progress_and_cancels(launch, store):
    long = dict(workload="tensor", n_samples=32, image_size=8, width=8, batch_size=8, epochs=1000, latency_ms=10.0,
                bound=False, sample_hz=0.0)
    job_id = jobs.submit(RunConfig.from_dict(long), db=store, origin="cli")
    at = launch()  # starts the worker
    deadline = time.monotonic() + 90
    while jobs.job_progress(job_id, store)["epochs_done"] < 2:
        assert time.monotonic() < deadline, "the job never ran"
        time.sleep(0.2)
    at.run()
    assert not at.exception and not at.error
    card = next(seen(m.value) for m in at.markdown if job_id in seen(m.value))
    assert "**running**" in card
    assert at.get("plotly_chart") and any("ETA" in p.proto.text for p in at.get("progress"))
    at.button(key=f"launch.cancel.{job_id}").click().run()
    cards = [seen(m.value) for m in at.markdown if job_id in seen(m.value)]
    # NOTE: the worker may end the run before this rerun draws the panel; a job no longer active has no card
    assert cards and "**cancelling**" in cards[0] or jobs.job_progress(job_id, store)["status"] == "cancelled", cards
    while jobs.job_progress(job_id, store)["status"] != "cancelled":
        assert time.monotonic() < deadline, "the job was never cancelled"
        time.sleep(0.2)


def test_ray_target_queues_the_sweep_as_one_job_with_the_address_from_settings(launch, store, monkeypatch):
    monkeypatch.setenv("LOADERLAB_RAY_ADDRESS", "ray://head.example:10001")
    at = launch()
    target = at.radio(key="launch.target")
    assert target.options == ["This machine", "Ray cluster"] and target.value == "This machine"
    assert not target.disabled  # Ray is installed here (requirements-cluster.txt)
    assert at.text_input(key="launch.ray_address").value == "ray://head.example:10001"
    # NOTE: nothing listens on port 1, so the worker fails the job in seconds instead of waiting for Ray
    at.text_input(key="launch.ray_address").set_value("127.0.0.1:1")
    target.set_value("Ray cluster").run()
    assert "127.0.0.1:1" in seen(at.radio(key="launch.target").proto.captions[1])
    at.multiselect(key="sweep.axes").set_value(["batch_size"]).run()
    at.text_input(key="sweep.axis.batch_size").set_value("16, 32")
    at.number_input(key="sweep.repeats").set_value(2).run()
    at.button(key="launch.queue_sweep").click().run()
    assert not at.exception and not at.error
    queued = jobs.list_jobs(store)
    assert len(queued) == 1 and queued.loc[0, "kind"] == "ray-sweep"
    spec = json.loads(queued.loc[0, "config_json"])
    assert (spec["kind"], spec["address"], spec["runs"]) == ("ray-sweep", "127.0.0.1:1", 4)
    assert spec["sweep"]["grid"] == {"batch_size": ["16", "32"]} and spec["sweep"]["repeats"] == 2
    job_id = queued.loc[0, "job_id"]
    assert any(job_id in seen(s.value) for s in at.success)
    at = queue_run(at)  # a single run to the cluster is a one-run sweep job too
    run_job = jobs.list_jobs(store).loc[0]
    spec = json.loads(run_job["config_json"])
    assert (run_job["kind"], spec["runs"], spec["address"]) == ("ray-sweep", 1, "127.0.0.1:1")
    form = {f.name: at.session_state[f"run.{f.name}"] for f in config_fields() if f"run.{f.name}" in at.session_state}
    assert RunConfig.from_dict(spec["sweep"]["base"]) == RunConfig.from_dict(form)
    deadline = time.monotonic() + 90
    while (p := jobs.job_progress(job_id, store))["status"] != "failed":  # the worker ran it: no cluster there
        assert time.monotonic() < deadline and p["status"] in ("queued", "running"), p
        time.sleep(0.2)
    assert "could not connect to the Ray cluster at '127.0.0.1:1'" in p["error"]
    assert (p["runs_done"], p["runs_total"]) == (0, 4)
    table = at.run().dataframe[0].value.set_index("job_id")
    assert table.loc[job_id, "status"] == "failed" and table.loc[job_id, "label"].startswith("Ray sweep ui-sweep")


def test_without_ray_the_cluster_target_is_disabled_with_the_install_hint(launch, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what a missing package looks like to the import system
    at = launch()
    target = at.radio(key="launch.target")
    assert target.disabled and target.value == "This machine"
    assert "pip install -r requirements-cluster.txt" in target.proto.captions[1]
    assert any("pip install -r requirements-cluster.txt" in c.value for c in at.caption)


def test_a_running_ray_job_shows_its_runs_landed_and_cancels(launch, store):
    sweep = SweepConfig.from_dict({"name": "rs", "base": {"workload": "tensor"}, "grid": {"batch_size": [8, 16]},
                                   "repeats": 2})
    job_id = jobs.submit_ray_sweep(sweep, address="auto", db=store, origin="cli")
    jobs_dir(store).mkdir(parents=True, exist_ok=True)
    lock = os.open(jobs_dir(store) / "worker.lock", os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(lock, fcntl.LOCK_EX)  # no worker: this test plays the worker's part in the store
    try:
        with connect(store, read_only=False) as conn:  # one of its 4 runs landed, 10 s after it started
            started = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(seconds=10)  # naive UTC, as stored
            conn.execute("UPDATE jobs SET status = 'running', started_at = ? WHERE job_id = ?", [started, job_id])
            conn.execute("INSERT INTO runs (run_id, status, sweep_id) SELECT 'r1', 'done', sweep_id FROM jobs")
        at = launch()
        card = next(seen(m.value) for m in at.markdown if job_id in seen(m.value))
        assert "**running**" in card and "Ray sweep rs: 4 runs on auto" in card and "sweep rs-" in card
        progress = next(p.proto.text for p in at.get("progress"))
        assert progress.startswith("1/4 runs landed (1 done) · ETA ")
        at.button(key=f"launch.cancel.{job_id}").click().run()
        assert "**cancelling**" in next(seen(m.value) for m in at.markdown if job_id in seen(m.value))
        assert (jobs_dir(store) / f"{job_id}.cancel").exists()  # what the worker watches
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        os.close(lock)
