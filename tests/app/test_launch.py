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
from engine.jobs.demo import demo_sweep
from tests._markup import live_markup, seen
from ui.text import plain
from ui.form_labels import label

# the form's defaults: RunConfig's on the demo's pipeline (examples/demo.toml's base, less its tag)
FORM_DEFAULTS = RunConfig.from_dict({k: v for k, v in demo_sweep().base.items() if k != "tag"})


@pytest.fixture
def launch_and_worker(store, open_page, monkeypatch):
    """launch_and_worker(**query_params) -> AppTest on the Launch page, which starts a job worker for the store
    (stopped after): for the tests of the worker the page starts, or of a job it runs.
    NOTE: the worker starts cold (LOADERLAB_WARM=0): a warm parent imports torch for the jobs to come, and these
    tests run at most one job, so every test paid that import for nothing."""
    monkeypatch.setenv("LOADERLAB_WARM", "0")
    yield lambda **params: open_page("launch", **params)
    jobs.stop_worker(store, timeout_s=30)
    for pid_file in runs_dir(store).glob("*/pid"):
        kill_group(int(pid_file.read_text()))


@pytest.fixture
def launch(store, open_page):
    """launch(**query_params) -> AppTest on the Launch page, with no job worker: the test holds the worker's lock, so
    the page starts none and a queued job stays queued.
    NOTE: these tests read the form and the queue, not a run: a worker was a process started for nothing, and it
    began running whatever a test queued (an oversubscribed ddp run among them) until the test stopped it."""
    jobs_dir(store).mkdir(parents=True, exist_ok=True)
    fd = os.open(jobs_dir(store) / "worker.lock", os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)
    yield lambda **params: open_page("launch", **params)
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def queue_run(at):
    at.button(key="launch.queue_run").click()
    return at.run()


def run_links(at) -> list[str]:
    """The query strings of the page's links to a run (st.page_link to the Runs page)."""
    return [p.proto.query_string for p in at.get("page_link") if p.proto.query_string.startswith("run=")]


def test_every_config_field_has_a_widget_and_the_form_queues_a_job(launch_and_worker, store, no_problems):
    at = launch_and_worker()
    no_problems(at)
    keys = {w.key for kind in ("selectbox", "checkbox", "text_input") for w in getattr(at, kind)}
    assert {f"run.{f.name}" for f in config_fields() if f.metadata.get("ui") != "hidden"} <= keys
    assert not at.number_input  # numbers are text the schema reads: no browser-side bound keeps an old value
    assert jobs.worker_alive(store)  # the page makes sure a worker runs the queue
    at.selectbox(key="run.preset").set_value("tiny_cpu").run()
    at.text_input(key="run.n_samples").set_value("128")
    at = queue_run(at)
    no_problems(at)
    queued = jobs.list_jobs(store)
    assert len(queued) == 1
    cfg = RunConfig.from_dict(json.loads(queued.loc[0, "config_json"]))
    assert cfg == PRESETS["tiny_cpu"]().replace(n_samples=128)
    assert any(queued.loc[0, "job_id"] in seen(s.value) for s in at.success)
    assert f"run={queued.loc[0, 'run_id']}" in run_links(at)  # in this tab, not a new one
    shown = [e for e in at.main if e.type in ("button", "success")]  # in page order
    said = next(i for i, e in enumerate(shown) if e.type == "success")  # under the button, not off in Jobs
    assert shown[said - 1].key == "launch.queue_run"
    assert [t.value for t in at.toast] == ["Run queued: it shows under Jobs"]  # in view wherever the button is
    at.text_input(key="run.n_samples").set_value("256").run()
    assert not at.success and not at.toast  # issue 39: the old "Queued 1 job" stayed beside a moved-on queue


def test_the_form_opens_on_the_demos_pipeline_with_word_labels_and_the_schema_name_in_the_help(launch):
    at = launch()
    values = {f.name: at.session_state[f"run.{f.name}"] for f in config_fields() if f"run.{f.name}" in at.session_state}
    assert RunConfig.from_dict(values) == FORM_DEFAULTS
    assert (FORM_DEFAULTS.workload, FORM_DEFAULTS.model) == (demo_sweep().base["workload"], demo_sweep().base["model"])
    for name in ("n_samples", "work_us", "latency_ms"):
        widget = at.text_input(key=f"run.{name}")
        assert widget.label == label(name) and "_" not in widget.label and f"Field name: {name}" in widget.help
    assert not any(x.label == "Settings" for x in at.expander)  # the Ray address sits under the target now


def test_a_refused_number_is_named_under_its_field_and_queues_nothing(launch, store):
    """Issue 28: workers=-1 in a bounded number_input kept the last valid value, and Queue run queued that."""
    at = launch()
    at.text_input(key="run.workers").set_value("-1")
    at.text_input(key="run.batch_size").set_value("100000000")
    at = queue_run(at)
    assert not at.exception
    loader = [seen(e.value) for e in next(x for x in at.expander if x.label == "Loader").error]
    training = [seen(e.value) for e in next(x for x in at.expander if x.label == "Training").error]
    assert loader == ["**Workers**: must be >= 0, got -1"]
    assert training == ["**Batch size**: must be <= 1000000, got 100000000"]
    refusal = [seen(e.value) for e in at.error if "Nothing queued" in seen(e.value)]
    assert refusal and "fix **Workers**, **Batch size** first" in refusal[0], refusal
    at.button(key="launch.queue_sweep").click().run()
    assert any("Nothing queued: fix **Workers**" in seen(e.value) for e in at.error)
    assert jobs.list_jobs(store).empty


@pytest.mark.parametrize("field, value, group", [("device", "cuda:9", "Training"), ("folder", "", "Workload")])
def test_bad_value_is_shown_under_its_field_and_nothing_is_queued(launch, store, field, value, group):
    at = launch()
    if field == "folder":
        at.selectbox(key="run.workload").set_value("folder")
    at.text_input(key=f"run.{field}").set_value(value)
    at = queue_run(at)
    assert not at.exception
    inline = [e.value for e in next(x for x in at.expander if x.label == group).error]
    assert inline and inline[0].startswith(f"**{label(field)}**")
    assert any(f"fix **{label(field)}**" in e.value for e in at.error)
    assert jobs.list_jobs(store).empty


def test_the_form_refuses_ranks_this_host_cannot_run_and_the_checkbox_insists(launch, store):
    """The form goes through engine.api.check_host, as every launcher does: values relative to this host. The
    refusal names the form's checkbox, never the CLI's flag, and the checkbox queues the run as --oversubscribe."""
    cores = len(os.sched_getaffinity(0))
    at = launch(mode="ddp", world_size=str(8 * cores), device="cpu", workload="tensor", model="mlp")
    inline = [seen(e.value) for e in next(x for x in at.expander if x.label == "Mode").error]
    assert inline and inline[0].startswith("**Processes (ddp)**: ") and "oversubscribed" in inline[0]
    assert "--" not in inline[0] and "Oversubscribe" in inline[0], inline
    at = queue_run(at)
    assert jobs.list_jobs(store).empty
    at.checkbox(key="run.oversubscribe").check()
    at = queue_run(at)
    assert not at.exception and len(queued := jobs.list_jobs(store)) == 1
    assert json.loads((jobs_dir(store) / f"{queued.loc[0, 'job_id']}.json").read_text())["oversubscribe"] is True
    jobs.cancel(queued.loc[0, "job_id"], store)


@pytest.mark.parametrize(
    "over", [dict(loader="processes", workers="USABLE+1"), dict(mode="ddp", world_size="USABLE+1")]
)
def test_light_oversubscription_is_refused_by_name_unless_ticked_then_warned_once(launch, store, over):
    """Issue 39: workers=8 on 2 cores queued with Oversubscribe unticked, and its warning showed twice (the form's,
    then the sweep's). Unticked: one line under the field naming it and the checkbox, and nothing queues; ticked:
    one warning on the page, and the run queues."""
    field = next(k for k, v in over.items() if v == "USABLE+1")
    params = {k: str(usable_cores() + 1) if v == "USABLE+1" else v for k, v in over.items()}
    at = launch(device="cpu", workload="tensor", model="mlp", **params)
    under = [seen(e.value) for x in at.expander for e in x.error]
    assert len(under) == 1 and under[0].startswith(f"**{label(field)}**: ") and "Oversubscribe" in under[0], under
    assert not any("time-share" in seen(w.value) for w in at.warning)  # said once, as the refusal
    at = queue_run(at)
    assert jobs.list_jobs(store).empty
    at.checkbox(key="run.oversubscribe").check().run()
    assert not at.error
    assert [seen(w.value) for w in at.warning if "time-share" in seen(w.value)] == [
        next(seen(w.value) for w in at.warning if "time-share" in seen(w.value))
    ]  # exactly one
    at = queue_run(at)
    assert len(jobs.list_jobs(store)) == 1


def test_preset_and_url_fill_the_form_and_the_form_writes_the_url(launch):
    at = launch(loader="threads", workers="3", pin_memory="false", bogus="1")
    assert (at.selectbox(key="run.loader").value, at.text_input(key="run.workers").value) == ("threads", "3")
    assert at.checkbox(key="run.pin_memory").value is False
    assert any("bogus" in w.value for w in at.warning)
    at.selectbox(key="run.preset").set_value("storage_latency").run()
    assert at.text_input(key="run.latency_ms").value == str(PRESETS["storage_latency"]().latency_ms)
    assert at.text_input(key="run.workers").value == "16"
    assert at.query_params["latency_ms"] == "2.0" and at.query_params["loader"] == "threads"
    assert not at.error
    at.switch_page("pages/history.py").run()  # Streamlit drops the state of widgets it did not draw
    at.query_params.clear()
    at.switch_page("pages/launch.py").run()
    assert at.text_input(key="run.workers").value == "16" and at.selectbox(key="run.loader").value == "threads"


@pytest.mark.parametrize(
    "field, value, why",
    [
        ("batch_size", "-1", "must be >= 1"),
        ("n_samples", "1e99", "must be <= 10000000"),
        ("workers", "2.5", "not a whole number"),
        ("latency_ms", "-3", "must be >= 0.0"),
        ("epochs", "abc", "expected int"),
        ("lr", "nan", "not a finite number"),
        ("workers", "abc", "expected int"),
    ],
)
def test_a_bad_url_value_stays_in_its_field_and_is_refused_by_name_like_a_typed_one(launch, store, field, value, why):
    """Issue 19: /launch?batch_size=-1 was clamped silently. Issue 39: workers=abc was swapped for the default (with a
    warning at the top of the page) while loader=bogus stayed in its box, refused by name. Now every field that can
    hold what the URL said holds it, and the form refuses it under the field, naming it; nothing queues."""
    at = launch(**{field: value})
    assert not at.exception
    assert at.session_state[f"run.{field}"] == value  # what the link said, not the default
    under = [seen(e.value) for x in at.expander for e in x.error]
    assert len(under) == 1 and under[0].startswith(f"**{label(field)}**: ") and why in under[0], under
    assert not any("Ignored URL parameter" in seen(w.value) for w in at.warning)
    at = queue_run(at)
    assert any(f"fix **{label(field)}**" in seen(e.value) for e in at.error) and jobs.list_jobs(store).empty


def test_loader_bogus_and_workers_abc_in_a_url_are_refused_the_same_way(launch):
    at = launch(loader="bogus", workers="abc")
    under = [seen(e.value) for x in at.expander for e in x.error]
    assert sorted(u.split("**")[1] for u in under) == sorted([label("loader"), label("workers")]), under


def test_a_checkbox_cannot_hold_a_bad_url_value_so_it_warns_with_the_default(launch):
    at = launch(pin_memory="maybe")
    warnings = [w.value for w in at.warning if "Ignored URL parameter pin_memory=" in seen(w.value)]
    assert len(warnings) == 1 and "expected bool" in seen(warnings[0]) and not live_markup(warnings[0])
    assert at.session_state["run.pin_memory"] is FORM_DEFAULTS.pin_memory


def test_every_label_fits_its_column(launch):
    """Issue 39: "Keep workers b…": a form column cuts a label past LABEL_MAX characters; the help says the rest."""
    from ui.form_labels import LABEL_MAX

    at = launch()
    widgets = [
        w
        for kind in ("selectbox", "checkbox", "text_input")
        for w in getattr(at, kind)
        if w.key and w.key.startswith("run.") and w.key != "run.oversubscribe"
    ]
    assert len(widgets) > 20
    assert [w.label for w in widgets if len(w.label) > LABEL_MAX] == []


def test_a_url_value_within_bounds_is_taken_without_a_warning(launch):
    at = launch(batch_size="1", n_samples="10000000", workers="2.0", latency_ms="0")
    assert not at.exception and not at.warning, [seen(w.value) for w in at.warning]
    assert [at.text_input(key=f"run.{k}").value for k in ("batch_size", "n_samples", "workers", "latency_ms")] == [
        "1",
        "10000000",
        "2",
        "0.0",
    ]


def test_every_preset_is_valid_here():
    for name, preset in PRESETS.items():
        assert RunConfig.from_dict(preset().to_dict()) == preset(), name


def test_sweep_builder_counts_distinct_configs_times_repeats_and_queues_them(launch, store):
    at = launch()
    at.multiselect(key="sweep.axes").set_value(["loader", "workers"]).run()
    at.text_input(key="sweep.axis.loader").set_value("sync, prefetch")
    at.text_input(key="sweep.axis.workers").set_value("0, 1")
    at.text_input(key="sweep.repeats").set_value("3").run()
    # workers is normalised to 0 for sync and prefetch: 4 grid points, 2 distinct configs
    assert any(m.value.startswith("**6 runs** = 2 distinct configs × 3 repeats") for m in at.markdown)
    at.text_input(key="sweep.axis.workers").set_value("zero").run()
    assert any(e.value.startswith("**Workers**") for e in at.error)
    at.button(key="launch.queue_sweep").click().run()
    assert any(seen(e.value).startswith("Nothing queued: fix **Workers**") for e in at.error)
    assert jobs.list_jobs(store).empty
    at.text_input(key="sweep.axis.workers").set_value("0").run()
    at.button(key="launch.queue_sweep").click().run()
    assert not at.exception and not at.error
    queued = jobs.list_jobs(store)
    assert len(queued) == 6 and queued["sweep_id"].nunique() == 1


def test_jobs_panel_shows_live_progress_and_cancels(launch_and_worker, store):
    long = dict(
        workload="tensor",
        n_samples=32,
        image_size=8,
        width=8,
        batch_size=8,
        epochs=1000,
        latency_ms=10.0,
        bound=False,
        sample_hz=0.0,
    )
    job_id = jobs.submit(RunConfig.from_dict(long), db=store, origin="cli")
    at = launch_and_worker()  # starts the worker
    deadline = time.monotonic() + 90
    while jobs.job_progress(job_id, store)["epochs_done"] < 2:
        assert time.monotonic() < deadline, "the job never ran"
        time.sleep(0.2)
    at.run()
    assert not at.exception and not at.error
    label_ = jobs.list_jobs(store).loc[0, "label"]
    card = next(m.value for m in at.markdown if m.value.endswith(plain(label_)))
    assert card.startswith("**running**")
    assert at.get("plotly_chart") and any("ETA" in p.proto.text for p in at.get("progress"))
    assert f"run={jobs.job_progress(job_id, store)['run_id']}" in run_links(at)
    at.button(key=f"launch.cancel.{job_id}").click().run()
    cards = [m.value for m in at.markdown if m.value.endswith(plain(label_))]
    # NOTE: the worker may end the run before this rerun draws the panel; a job no longer active has no card
    assert cards and cards[0].startswith("**cancelling**") or jobs.job_progress(job_id, store)["status"] == "cancelled"
    table = at.dataframe[0].value
    assert table.loc[0, "status"] in ("running", "cancelled")  # the card's state, from the same read
    while jobs.job_progress(job_id, store)["status"] != "cancelled":
        assert time.monotonic() < deadline, "the job was never cancelled"
        time.sleep(0.2)
    at.run()  # issue 39: the card vanished, with no way to the kept epochs
    cards = [m.value for m in at.markdown if m.value.endswith(plain(label_))]
    assert cards and cards[0].startswith("**cancelled**")
    assert f"run={jobs.job_progress(job_id, store)['run_id']}" in run_links(at)
    assert any("finished epochs are kept" in seen(c.value) for c in at.caption)


def test_ray_target_queues_the_sweep_as_one_job_with_the_address_from_settings(launch_and_worker, store, monkeypatch):
    monkeypatch.setenv("LOADERLAB_RAY_ADDRESS", "ray://head.example:10001")
    at = launch_and_worker()
    target = at.radio(key="launch.target")
    assert target.options == ["This machine", "Ray cluster"] and target.value == "This machine"
    assert not target.disabled  # Ray is installed here (requirements-cluster.txt)
    assert "ray://head.example:10001" in seen(target.proto.captions[1])
    target.set_value("Ray cluster").run()  # the address box shows once Ray is the target
    assert at.text_input(key="launch.ray_address").value == "ray://head.example:10001"
    # NOTE: nothing listens on port 1, so the worker fails the job in seconds instead of waiting for Ray
    at.text_input(key="launch.ray_address").set_value("127.0.0.1:1").run()
    assert "127.0.0.1:1" in seen(at.radio(key="launch.target").proto.captions[1])
    at.multiselect(key="sweep.axes").set_value(["batch_size"]).run()
    at.text_input(key="sweep.axis.batch_size").set_value("16, 32")
    at.text_input(key="sweep.repeats").set_value("2").run()
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
    table = at.run().dataframe[0].value
    row = table[table["what"].str.startswith("Ray sweep ui-sweep")].iloc[-1]
    assert row["status"] == "failed" and "127.0.0.1:1" in row["error"]


def test_without_ray_the_cluster_target_is_disabled_with_the_install_hint(launch, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what a missing package looks like to the import system
    at = launch()
    target = at.radio(key="launch.target")
    assert target.disabled and target.value == "This machine"
    assert "pip install -r requirements-cluster.txt" in target.proto.captions[1]
    assert any("pip install -r requirements-cluster.txt" in c.value for c in at.caption)


def test_a_running_ray_job_shows_its_runs_landed_and_cancels(launch_and_worker, store):
    sweep = SweepConfig.from_dict(
        {"name": "rs", "base": {"workload": "tensor"}, "grid": {"batch_size": [8, 16]}, "repeats": 2}
    )
    job_id = jobs.submit_ray_sweep(sweep, address="auto", db=store, origin="cli")
    jobs_dir(store).mkdir(parents=True, exist_ok=True)
    lock = os.open(jobs_dir(store) / "worker.lock", os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(lock, fcntl.LOCK_EX)  # no worker: this test plays the worker's part in the store
    try:
        with connect(store, read_only=False) as conn:  # one of its 4 runs landed, 10 s after it started
            started = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(seconds=10)  # naive UTC, as stored
            conn.execute("UPDATE jobs SET status = 'running', started_at = ? WHERE job_id = ?", [started, job_id])
            conn.execute("INSERT INTO runs (run_id, status, sweep_id) SELECT 'r1', 'done', sweep_id FROM jobs")
        at = launch_and_worker()
        card = next(seen(m.value) for m in at.markdown if "Ray sweep rs" in seen(m.value))
        assert card == "**running** · Ray sweep rs: 4 runs on auto"
        assert any(seen(c.value).startswith("sweep rs-") for c in at.caption)
        progress = next(p.proto.text for p in at.get("progress"))
        assert progress.startswith("1/4 runs landed (1 done) · ETA ")
        at.button(key=f"launch.cancel.{job_id}").click().run()
        assert "**cancelling**" in next(m.value for m in at.markdown if "Ray sweep rs" in seen(m.value))
        assert (jobs_dir(store) / f"{job_id}.cancel").exists()  # what the worker watches
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        os.close(lock)
