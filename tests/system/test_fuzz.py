"""Fuzzed input never gets past validation as anything but a valid config or a ConfigError naming the field,
never a traceback, and nothing is stored. Covers RunConfig.from_dict, `python -m engine run --dry-run`
(engine.cli.main in this process under Hypothesis, plus a few real processes), the browser-only
checks of the job queue (no `folder` outside the data roots) and a scan of the code that handles browser
input for anything that imports or evaluates it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from engine import jobs
from engine.cli import main
from engine.config import ConfigError, RunConfig, SweepConfig, config_fields
from engine.plugins import browser
from tests.engine._browser_plugins import HOSTILE, imported, register

ROOT = Path(__file__).resolve().parents[2]
FIELDS = {f.name: f for f in config_fields()}
PSEUDO_FIELDS = {"config"}  # documented: the input as a whole (not a table, not a file, not TOML)
FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

# ---------------------------------------------------------------------------- strategies

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(-3, 300),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(
        [
            "",
            " ",
            "0",
            "1",
            "-1",
            "1e309",
            "nan",
            "inf",
            "true",
            "off",
            "3.5",
            "cpu",
            "cuda",
            "cuda:9",
            "auto",
            "sync",
            "threads",
            "processes",
            "mlp",
            "cnn",
            "fused",
            "x" * 5000,
            "a\x00b",
            "../../etc/passwd",
        ]
    ),
)
_values = st.one_of(
    _scalars, st.lists(_scalars, max_size=3), st.dictionaries(st.text(max_size=5), _scalars, max_size=2)
)
_keys = st.one_of(
    st.sampled_from(sorted(FIELDS)), st.sampled_from([k.replace("_", "-") for k in FIELDS]), st.text(max_size=12)
)
configs = st.dictionaries(_keys, _values, max_size=6)


def _folder_is_harmless(data: dict) -> bool:
    """Random text that happens to name an existing directory ('.', '/') would make validation walk it."""
    folder = data.get("folder")
    return not (isinstance(folder, str) and folder.strip() and Path(folder.strip()).expanduser().exists())


def _check_rejection(e: ConfigError, given_keys: set[str]) -> None:
    assert e.field in FIELDS or e.field in PSEUDO_FIELDS or e.field in given_keys, e.field
    assert e.message and str(e).startswith(f"{e.field}: ")


# ---------------------------------------------------------------------------- RunConfig.from_dict


@FUZZ
@given(data=configs)
def test_from_dict_returns_a_valid_config_or_names_the_field(data):
    assume(_folder_is_harmless(data))
    try:
        cfg = RunConfig.from_dict(data)
    except ConfigError as e:
        _check_rejection(e, {str(k) for k in data})
        return
    assert RunConfig.from_dict(cfg.to_dict()) == cfg  # valid, and stable through the store's JSON
    assert RunConfig.from_dict(json.loads(cfg.to_json())) == cfg


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        "loader=threads",
        3,
        {"loader": {"nested": 1}},
        {"seed": 2**70},
        {"workers": True},
        {"lr": float("nan")},
        {"devices": [None]},
        {"tag": "a\x00b"},
        {"folder": "x" * 5000},
    ],
)
def test_from_dict_edge_cases(data):
    with pytest.raises(ConfigError) as err:
        RunConfig.from_dict(data)
    _check_rejection(err.value, set(data) if isinstance(data, dict) else set())


# ---------------------------------------------------------------------------- the CLI, in this process

_flag_names = st.sampled_from(
    ["--" + n.replace("_", "-") for n in FIELDS] + ["--no-bound", "--no-pin-memory", "--bogus", "--work", "-x", "--"]
)
_flag_values = st.one_of(
    st.text(max_size=20).filter(lambda s: not s.startswith("-h")),
    st.sampled_from(["-1", "0", "1e9", "nan", "cuda:7", "threads", "../x", "", "--quiet"]),
)
argvs = st.lists(st.tuples(_flag_names, st.one_of(st.none(), _flag_values)), max_size=6).map(
    lambda pairs: [t for flag, value in pairs for t in ((flag,) if value is None else (flag, value))]
)


CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # ESC and friends: user text must be echoed escaped


def _field_named(line: str) -> bool:
    """An error line names a config field (snake or kebab case), a pseudo-field, or the bad flag itself."""
    names = set(FIELDS) | {n.replace("_", "-") for n in FIELDS} | PSEUDO_FIELDS
    return any(re.search(rf"(?<!\w){re.escape(n)}(?![\w-])", line) for n in names) or "argument" in line


@FUZZ
@given(argv=argvs)
def test_cli_dry_run_prints_a_config_or_one_line_naming_the_field(argv, tmp_path_factory, capsys):
    db = tmp_path_factory.getbasetemp() / "fuzz-cli" / "loaderlab.duckdb"
    assume(all(_folder_is_harmless({"folder": value}) for flag, value in zip(argv, argv[1:]) if flag == "--folder"))
    code = main(["run", "--dry-run", "--db", str(db), *argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    if code == 0:
        cfg = json.loads(out)
        assert RunConfig.from_dict(cfg).to_dict() == cfg
    else:
        lines = [line for line in err.split("\n") if line.strip()]
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err)
        assert _field_named(lines[0]), lines[0]
        assert not CONTROL.search(lines[0]), f"raw control characters echoed to the terminal: {lines[0]!r}"
    assert not db.exists() and not db.parent.joinpath("runs").exists()  # a dry run stores nothing


TOML_CASES = {
    "not toml": ("loader = [unclosed", "config"),
    "unknown key": ('loader = "sync"\nturbo = true', "turbo"),
    "wrong type": ('workers = "many"', "workers"),
    "table value": ("[loader]\nname = 'sync'", "loader"),
    "out of range": ("batch_size = 0", "batch_size"),
    "unknown loader": ('loader = "engine.loaders.sync:SyncLoader"', "loader"),
    "cross-field": ('loader = "threads"\nworkers = 0', "workers"),
}


@pytest.mark.parametrize("case", list(TOML_CASES))
def test_cli_config_files_that_are_wrong(case, tmp_path, capsys):
    text, field = TOML_CASES[case]
    (tmp_path / "c.toml").write_text(text)
    assert main(["run", "--dry-run", "--config", str(tmp_path / "c.toml"), "--db", str(tmp_path / "s.duckdb")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {field}: ") and "\n" not in err, err
    assert not (tmp_path / "s.duckdb").exists()


# ---------------------------------------------------------------------------- the CLI, real processes

PROCESS_CASES = [  # (argv, expected exit status, field named on the one stderr line)
    (["--workers", "abc"], 2, "workers"),
    (["--loader", "__import__('os').system('true')"], 2, "loader"),
    (["--device", "cuda:99"], 2, "device"),
    (["--turbo"], 2, "--turbo"),
    (["--loader", "threads", "--workers", "3", "--tag", "ünï\tcode"], 0, None),
]


def test_cli_processes_with_bad_flags(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    db = tmp_path / "loaderlab.duckdb"

    def call(argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "engine", "run", "--dry-run", "--db", str(db), *argv],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(call, [argv for argv, _, _ in PROCESS_CASES]))
    for (argv, code, field), out in zip(PROCESS_CASES, results):
        assert out.returncode == code and "Traceback" not in out.stderr, (argv, out.stderr)
        if field:
            lines = out.stderr.strip().splitlines()
            assert len(lines) == 1 and field in lines[0], (argv, out.stderr)
        else:
            assert json.loads(out.stdout)["workers"] == 3
    assert not db.exists() and not (tmp_path / "runs").exists()


# ---------------------------------------------------------------------------- what the browser may name


def _image_folder(root: Path) -> Path:
    from PIL import Image  # noqa: PLC0415

    for cls in ("cat", "dog"):
        (root / cls).mkdir(parents=True)
        Image.new("RGB", (8, 8), (200, 10, 10)).save(root / cls / "a.png")
    return root


@pytest.fixture
def roots(tmp_path, monkeypatch):
    """An allowed data root holding an image folder, and an image folder outside it."""
    allowed = tmp_path / "allowed"
    inside, outside = _image_folder(allowed / "pets"), _image_folder(tmp_path / "elsewhere" / "pets")
    (allowed / "link").symlink_to(outside)
    monkeypatch.setenv("LOADERLAB_DATA_ROOTS", str(allowed))
    return inside, outside, allowed


def test_browser_jobs_may_read_only_folders_under_the_data_roots(store, roots):
    """The server-side guard: a job submitted from the browser names a folder under LOADERLAB_DATA_ROOTS."""
    inside, outside, allowed = roots
    base = dict(workload="folder", image_size=8, width=8, epochs=2, batch_size=2, bound=False)
    for folder in (outside, allowed / "pets" / ".." / ".." / "elsewhere" / "pets", allowed / "link"):
        cfg = RunConfig.from_dict({**base, "folder": str(folder)})  # a valid image folder for the CLI
        with pytest.raises(ConfigError) as err:
            jobs.submit(cfg, db=store, origin="browser")
        assert err.value.field == "folder" and "LOADERLAB_DATA_ROOTS" in err.value.message, err.value
    assert jobs.list_jobs(store).empty
    assert jobs.submit(RunConfig.from_dict({**base, "folder": str(inside)}), db=store, origin="browser")
    assert len(jobs.list_jobs(store)) == 1


# ---------------------------------------------------------------------------- nothing is imported or evaluated

BROWSER_FACING = [
    *sorted((ROOT / "pages").glob("*.py")),
    *sorted((ROOT / "ui").glob("*.py")),
    *sorted((ROOT / "engine" / "jobs").glob("*.py")),
    ROOT / "engine" / "store" / "views.py",
    ROOT / "engine" / "plugins" / "browser.py",
    ROOT / "app.py",
]
FORBIDDEN = re.compile(
    r"(?<![.\w])(eval|exec|compile|__import__)\s*\(|\bimportlib\b|\bpickle\b|\bmarshal\b|\bdill\b|"
    r"\bshelve\b|yaml\.(unsafe_)?load\b|shell\s*=\s*True|\bos\.system\b"
)


@pytest.mark.parametrize("path", BROWSER_FACING, ids=lambda p: str(p.relative_to(ROOT)))
def test_browser_facing_code_never_imports_or_evaluates_input(path):
    code = re.sub(r'"""[\s\S]*?"""', "", path.read_text())  # docstrings may mention the words
    code = "\n".join(line.split("#")[0] for line in code.splitlines())
    assert not FORBIDDEN.findall(code), f"{path.name}: {FORBIDDEN.findall(code)}"
    # ui.cache.cached(fn, ...) calls the engine.api function it is given: written in the code as api.<name>, never
    # a name or a function that came from data
    for call in re.finditer(r"(?<!def )\bcached\(\s*([^,)]*)", code):
        assert re.fullmatch(r"api\.[a-z_]+", call.group(1).strip()), f"{path.name}: cached({call.group(1)}"


def test_config_fields_are_plain_data():
    """What a form or URL can set is a str, int, float, bool or list of str: nothing callable or importable."""
    for f in dataclasses.fields(RunConfig):
        assert str(f.type) in ("str", "int", "float", "bool", "list[str]"), f.name


# ---------------------------------------------------------------------------- plugins from the browser

PLUGIN_FIELDS = ("workload", "model", "model_b", "collate", "loss")
hostile = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(max_size=40),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_.]{0,20}:[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True),
)


def test_browser_input_names_registered_plugins_only_and_never_imports_them(store, tmp_path, monkeypatch):
    """Form, URL and sweep values go through browser_values/browser_sweep, then submit(origin="browser"):
    a registered name becomes its spec; a module path or anything else is a ConfigError naming the field,
    nothing is queued and the sentinel module is never imported."""
    specs = register(tmp_path, monkeypatch)
    tiny = dict(n_samples=64, image_size=8, width=8, epochs=2, bound=False)

    @FUZZ
    @given(field=st.sampled_from(PLUGIN_FIELDS), value=hostile)
    def fuzz(field, value):
        assume(value not in browser.choices(field))
        attempts = [
            lambda: browser.browser_values({**tiny, field: value}),
            lambda: browser.browser_sweep(tiny, {field: ["", value]}),
        ]
        if value != specs.get(browser.PLUGIN_FIELDS[field]):  # the owner's own spec may reach submit (by name)
            attempts += [
                lambda: jobs.submit(RunConfig.from_dict({**tiny, field: value}), db=store, origin="browser"),
                lambda: jobs.submit_sweep(
                    SweepConfig.from_dict({"base": tiny, "grid": {field: [value]}}), db=store, origin="browser"
                ),
            ]
        for attempt in attempts:
            with pytest.raises(ConfigError) as err:
                attempt()
            assert err.value.field == field or err.value.field.startswith("grid."), err.value
        assert jobs.list_jobs(store).empty and not imported(tmp_path)

    fuzz()
    mapped = browser.browser_values({**tiny, "workload": "mydata", "model": "mynet", "collate": "mycollate"})
    assert (mapped["workload"], mapped["model"], mapped["collate"]) == (
        specs["workload"],
        specs["model"],
        specs["collate"],
    )
    with pytest.raises(ConfigError, match="^model: "):  # a registered name of another kind is no model
        browser.browser_values({"model": "mydata"})
    assert jobs.submit(RunConfig.from_dict(mapped), db=store, origin="browser")  # queued, still not imported
    assert len(jobs.list_jobs(store)) == 1 and not imported(tmp_path)


def test_browser_submit_refuses_a_spec_the_owner_did_not_register_for_that_field(store, tmp_path, monkeypatch):
    specs = register(tmp_path, monkeypatch)
    for field, spec in [("workload", specs["model"]), ("model_b", specs["workload"]), ("loss", "os:system")]:
        with pytest.raises(ConfigError, match=f"^{field}: .*not a plugin registered"):
            jobs.submit(RunConfig.from_dict({field: spec}), db=store, origin="browser")
    assert jobs.list_jobs(store).empty and not imported(tmp_path)
