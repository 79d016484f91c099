"""Tampered URLs and fuzzed form values on every page: never an exception, always a clear st.error or
st.warning, nothing stored. The browser can only pick registered workloads, models, loaders and modes,
and may only name a `folder` under the data roots.

Every page runs through app.py (AppTest), as a browser session would.
"""

from __future__ import annotations

import fcntl
import os
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

from engine import api, jobs, registry
from engine.config import config_fields, field_choices
from engine.paths import jobs_dir, runs_dir
from engine.plugins.browser import PLUGIN_FIELDS
from engine.store import list_runs
from tests._markup import seen
from tests.app.conftest import APP
from ui.form_labels import label

FUZZ = settings(
    max_examples=25,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
TRICKY = [
    "",
    " ",
    "../../etc/passwd",
    "/etc/passwd",
    "<script>alert(1)</script>",
    "a,b,c,d,e",
    ",,,",
    "%00",
    "\x00",
    "x" * 3000,
    "'; DROP TABLE runs; --",
    "__import__('os').system('id')",
    "nan",
    "-1",
    "1e309",
    "cuda:999",
    "[link](http://example.com)",
    "{{7*7}}",
    "${jndi:ldap://x}",
    "🙂" * 50,
    "\n\n",
    "true",
]
RESERVED = {"embed", "embed_options", "token"}  # Streamlit's own, and the sharing token (tests/app/test_auth.py)
texts = st.one_of(st.sampled_from(TRICKY), st.text(st.characters(blacklist_categories=("Cs",)), max_size=40))
unknown_names = st.text(string.ascii_letters + string.digits + "_-.", min_size=1, max_size=12).map(lambda s: "zz" + s)
KNOWN = {
    "explore": [
        "view",
        "metric",
        "x",
        "color",
        "facet",
        "interval",
        "date_from",
        "date_to",
        "sel",
        *api.EXPLORE_FILTERS,
    ],
    "runs": ["run", "compare", "epoch", "q", "status", "deleted", "view"],
    "history": ["sql", "view"],
    "launch": [f.name for f in config_fields()] + ["preset"],
}


@pytest.fixture
def no_worker(store):
    """Hold the job worker's lock, so the Launch page starts no worker and queued jobs stay queued."""
    jobs_dir(store).mkdir(parents=True, exist_ok=True)
    fd = os.open(jobs_dir(store) / "worker.lock", os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)
    yield store
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def _open(page: str, params: dict[str, str]) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    if page != "explore":
        at.run()
        at.switch_page(f"pages/{page}.py")
        at.query_params.clear()
    at.query_params.update(params)
    return at.run()


def _messages(at: AppTest) -> list[str]:
    """The errors and warnings as the reader sees them (their user text is escaped Markdown)."""
    return [seen(str(m.value)) for m in [*at.error, *at.warning]]


def _check(at: AppTest, params: dict[str, str]) -> None:
    assert not at.exception, [e.value for e in at.exception]
    messages = _messages(at)
    assert all(m.strip() and "Traceback" not in m for m in messages), messages
    for name in params:
        if name.startswith("zz"):
            assert any(name in m for m in messages), (name, messages)  # an unknown parameter is named


def _params(page: str):
    names = st.one_of(st.sampled_from(KNOWN[page]), unknown_names).filter(lambda n: n not in RESERVED)
    return st.dictionaries(names, texts, min_size=1, max_size=4)


@pytest.mark.slow
@pytest.mark.parametrize("page", ["explore", "runs", "history"])
def test_tampered_urls_on_read_pages(seeded, page):
    db, _ = seeded
    before = list_runs(limit=100_000)

    @FUZZ
    @given(params=_params(page))
    def fuzz(params):
        _check(_open(page, params), params)

    fuzz()
    assert len(list_runs(limit=100_000)) == len(before)  # reading pages changed nothing


@pytest.mark.slow
def test_tampered_urls_on_the_launch_page_store_nothing(no_worker):
    @FUZZ
    @given(params=_params("launch"))
    def fuzz(params):
        at = _open("launch", params)
        _check(at, params)
        if _errors_name_fields(at):  # a rejected config: the button must refuse it
            at.button(key="launch.queue_run").click().run()
            assert not at.exception
            assert jobs.list_jobs(no_worker).empty

    fuzz()
    queued = jobs.list_jobs(no_worker)
    assert queued.empty, queued[["job_id", "config_json"]].to_dict("records")
    assert not runs_dir(no_worker).exists()


@pytest.mark.parametrize(
    "page, params, expected",
    [
        ("explore", {"view": "../../etc/passwd"}, "malformed"),
        ("explore", {"view": "x" * 5000}, "malformed"),
        ("explore", {"view": "'; DROP TABLE views; --"}, "malformed"),
        ("explore", {"view": "abcd1234"}, "not in the store"),
        ("runs", {"run": "../../etc/passwd"}, "not a run id"),
        ("runs", {"run": "<script>alert(1)</script>"}, "not a run id"),
        ("runs", {"run": "20250101-120000-abcdef"}, "20250101-120000-abcdef"),
        ("runs", {"compare": "only-one"}, "Give 2–4 run ids"),
        ("runs", {"compare": "a,b,c,d,e"}, "Give 2–4 run ids"),
        ("runs", {"compare": "../../x,a"}, "not a run id"),
    ],
)
def test_tampered_ids_are_a_clear_error(seeded, page, params, expected):
    at = _open(page, params)
    assert not at.exception, [e.value for e in at.exception]
    assert any(expected in m for m in _messages(at)), _messages(at)


# ---------------------------------------------------------------------------- the launch form


def _errors_name_fields(at: AppTest) -> list[str]:
    """The fields the form's inline errors name ("**Label**: message"), as the schema's names."""
    names = {label(n): n for n in [f.name for f in config_fields()] + ["config", "sweep.repeats"]}
    return [
        names.get(seen(e.value.split("**")[1]), seen(e.value.split("**")[1]))
        for e in at.error
        if e.value.startswith("**")
    ]


@pytest.mark.slow
def test_fuzzed_form_values_are_rejected_by_field_and_nothing_is_queued(no_worker):
    fields = [f for f in config_fields() if f.metadata.get("ui") != "hidden"]
    numbers = [f for f in fields if str(f.type) in ("int", "float")]
    words = [
        f
        for f in fields
        if str(f.type) in ("str", "list[str]") and field_choices(f) is None and f.name not in PLUGIN_FIELDS
    ]  # model_b: a select box of built-ins and registered names
    edits = st.lists(
        st.one_of(
            st.tuples(st.sampled_from(numbers), st.one_of(st.integers(-(10**12), 10**12), st.floats(-1e12, 1e12))),
            st.tuples(st.sampled_from(words), texts),
        ),
        min_size=1,
        max_size=4,
    )
    names = {f.name for f in fields} | {"config"}

    @FUZZ
    @given(edits=edits)
    def fuzz(edits):
        at = _open("launch", {})
        for f, value in edits:
            # numbers are text inputs: what is typed reaches the schema (issue 28)
            at.text_input(key=f"run.{f.name}").set_value(str(int(value) if str(f.type) == "int" else value))
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        named = _errors_name_fields(at)
        assert set(named) <= names, named
        if named:
            at.button(key="launch.queue_run").click().run()
            assert not at.exception
            assert any(m.startswith("Nothing queued: fix **") for m in _messages(at)), _messages(at)
            assert jobs.list_jobs(no_worker).empty

    fuzz()
    assert jobs.list_jobs(no_worker).empty and not runs_dir(no_worker).exists()


def test_select_boxes_offer_only_registered_names(no_worker):
    at = _open("launch", {})
    for f in config_fields():
        choices = field_choices(f)
        if choices is not None and f.metadata.get("ui") != "hidden":
            assert list(at.selectbox(key=f"run.{f.name}").options) == list(choices), f.name
    for kind in ("workloads", "loaders", "models", "modes"):
        assert list(at.selectbox(key=f"run.{kind[:-1]}").options) == registry.names(kind)


@pytest.mark.parametrize("value", ["engine.loaders.sync:SyncLoader", "os:system", "__import__('os')", "../sync"])
def test_a_loader_named_in_the_url_but_not_registered_is_refused(no_worker, value):
    at = _open("launch", {"loader": value})
    assert not at.exception
    assert "loader" in _errors_name_fields(at)
    at.button(key="launch.queue_run").click().run()
    assert any("fix **Loader**" in m for m in _messages(at))
    assert jobs.list_jobs(no_worker).empty


def _image_folder(root):
    from PIL import Image  # noqa: PLC0415

    for cls in ("cat", "dog"):
        (root / cls).mkdir(parents=True)
        Image.new("RGB", (8, 8)).save(root / cls / "a.png")
    return root


def test_the_form_refuses_a_folder_outside_the_data_roots(no_worker, tmp_path, monkeypatch):
    allowed = tmp_path / "allowed"
    inside, outside = _image_folder(allowed / "pets"), _image_folder(tmp_path / "home" / "secrets")
    monkeypatch.setenv("LOADERLAB_DATA_ROOTS", str(allowed))
    at = _open("launch", {"workload": "folder", "folder": str(inside), "epochs": "2"})
    assert not at.exception and "folder" not in _errors_name_fields(at), _messages(at)
    at = _open("launch", {"workload": "folder", "folder": str(outside), "epochs": "2"})
    assert not at.exception
    assert "folder" in _errors_name_fields(at), _messages(at)
    at.button(key="launch.queue_run").click().run()
    assert jobs.list_jobs(no_worker).empty


@pytest.mark.parametrize("name", ["empty", "missing", "root"])
def test_a_folder_outside_the_data_roots_is_refused_before_it_is_read(no_worker, tmp_path, monkeypatch, name):
    """The browser learns nothing about paths outside the roots (does it exist? what is in it?), and the
    server walks none of them: the root check comes before the folder workload's own check."""
    monkeypatch.setenv("LOADERLAB_DATA_ROOTS", str(tmp_path / "allowed"))
    (tmp_path / "allowed").mkdir()
    (tmp_path / "empty" / "cls").mkdir(parents=True)
    folder = {"empty": tmp_path / "empty", "missing": tmp_path / "missing", "root": "/"}[name]
    at = _open("launch", {"workload": "folder", "folder": str(folder)})
    assert not at.exception
    inline = [seen(e.value) for e in at.error if e.value.startswith("**Image folder**")]
    assert inline and all("LOADERLAB_DATA_ROOTS" in m for m in inline), inline
    assert not any(w in m for m in inline for w in ("does not exist", "no class subfolders", "cannot be read"))
