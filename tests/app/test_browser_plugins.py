"""Registered plugins in the Launch page (AppTest through app.py): offered by name, queued as the owner's spec,
and nothing a browser sends through the URL, the form or the sweep builder can name a module or import one."""

from __future__ import annotations

import json

import pytest

from engine import jobs, registry
from tests.app.test_fuzz_urls import _errors_name_fields, _messages, _open, no_worker  # noqa: F401 (a fixture)
from tests.engine._browser_plugins import HOSTILE, imported, register

FIELDS = ("workload", "model", "model_b", "collate", "loss")


@pytest.fixture
def plugins(no_worker, tmp_path, monkeypatch):  # noqa: F811
    return no_worker, register(tmp_path, monkeypatch), tmp_path


def test_registered_plugins_are_offered_by_name_and_queued_as_their_spec(plugins):
    store, specs, tmp = plugins
    at = _open("launch", {})
    assert list(at.selectbox(key="run.workload").options) == [*registry.names("workloads"), "mydata"]
    assert list(at.selectbox(key="run.model").options) == [*registry.names("models"), "mynet"]
    assert list(at.selectbox(key="run.model_b").options)[-1] == "mynet"
    assert at.selectbox(key="run.collate").options[-1] == "mycollate"
    assert at.selectbox(key="run.loss").options[-1] == "myloss"
    for field, name in (("workload", "mydata"), ("model", "mynet"), ("loss", "myloss")):
        at.selectbox(key=f"run.{field}").set_value(name)
    at.text_input(key="run.epochs").set_value("2")
    at.run()
    assert not at.exception and not _errors_name_fields(at), _messages(at)
    assert at.query_params["workload"] in ("mydata", ["mydata"])  # the shareable URL holds the name, never the spec
    at.button(key="launch.queue_run").click().run()
    cfg = json.loads(jobs.list_jobs(store).loc[0, "config_json"])
    assert (cfg["workload"], cfg["model"], cfg["loss"]) == (specs["workload"], specs["model"], specs["loss"])
    assert not imported(tmp)  # the dashboard queued it without importing it; the run child will


def test_module_paths_and_lookalikes_in_the_url_are_refused_by_field(plugins):
    """Each hostile value on one of the five fields in turn (the engine fuzz in tests/system/test_fuzz.py tries
    every pair); a registered name of the wrong kind too. Each is named inline and the button queues nothing."""
    store, _, tmp = plugins
    cases = [(FIELDS[i % len(FIELDS)], v) for i, v in enumerate(HOSTILE[::3])] + [
        ("model", "mydata"),
        ("collate", "myloss"),
    ]
    for field, value in cases:
        at = _open("launch", {field: value, "epochs": "2"})
        assert not at.exception, [e.value for e in at.exception]
        assert field in _errors_name_fields(at), (field, value, _messages(at))
        at.button(key="launch.queue_run").click().run()
        assert not at.exception
    assert jobs.list_jobs(store).empty and not imported(tmp)


def test_the_sweep_builder_refuses_a_module_path_on_any_plugin_axis(plugins):
    store, _, tmp = plugins
    at = _open("launch", {"epochs": "2"})
    at.multiselect(key="sweep.axes").set_value(list(FIELDS)).run()
    for field in FIELDS:
        at.text_input(key=f"sweep.axis.{field}").set_value(f"{'mydata' if field == 'workload' else ''}, os:system")
    at.run()
    assert not at.exception
    assert any(m.startswith("**Workload**") and "os:system" in m for m in _messages(at)), _messages(at)
    at.button(key="launch.queue_sweep").click().run()  # it refuses, naming the field
    assert any(m.startswith("Nothing queued: fix **Workload**") for m in _messages(at)), _messages(at)
    assert jobs.list_jobs(store).empty and not imported(tmp)
