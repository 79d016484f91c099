"""RunConfig and SweepConfig: the one schema behind CLI flags, TOML files, the launch form and the store.

Every field is declared once below with its help text, its group and its limits. The CLI
(`engine/cli/`), the dashboard's launch form (`ui/form.py`) and the store's `runs` columns
are all generated from `dataclasses.fields(RunConfig)`; nothing else lists the fields again.

    cfg = RunConfig.from_dict({"loader": "threads", "workers": 4})   # raises ConfigError on bad input
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import random
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import ConfigError, printable
from engine.names import DEFAULT_CLASSES, NAMES, SPEC_RE, WORKER_LOADERS, check_workers

__all__ = [
    "ConfigError",
    "DEFAULT_MAX_RUNS",
    "RunConfig",
    "SweepConfig",
    "config_fields",
    "field_choices",
    "field_type",
    "field_value",
    "load_toml",
    "printable",
]

DEFAULT_MAX_RUNS = 1000  # a sweep's runs (configs × repeats) unless its max_runs says more


def _f(default: Any, help: str, group: str, **meta: Any) -> Any:
    """A config field. meta keys: choices (a registry name or a tuple), min, max, ui ("hidden"), plugin (a
    'module.path:callable' spec is accepted besides the choices; an empty plugin field means the default), auto
    (the value the word "auto" stands for)."""
    if isinstance(default, list):
        return field(default_factory=default.copy, metadata={"help": help, "group": group, **meta})
    return field(default=default, metadata={"help": help, "group": group, **meta})


@dataclass(kw_only=True)
class RunConfig:
    # --- workload ---
    workload: str = _f(
        "tensor",
        "dataset to load: a built-in name, or your own as 'module.path:callable' (see engine/plugins/__init__.py)",
        "workload",
        choices="workloads",
        plugin=True,
    )
    n_samples: int = _f(2048, "samples per epoch", "workload", min=1, max=10_000_000)
    image_size: int = _f(32, "side of the square images the model sees", "workload", min=8, max=1024)
    num_classes: int = _f(
        0,
        "label classes; auto (or 0): a user's dataset's own (its num_classes or labels), else "
        "its model's output width; 10 for the built-in workloads",
        "workload",
        min=0,
        max=100_000,
        auto=0,
    )
    work_us: int = _f(
        0,
        "extra per-sample CPU work in microseconds (tensor: GIL-releasing; pyloop: GIL-holding)",
        "workload",
        min=0,
        max=10_000_000,
    )
    latency_ms: float = _f(0.0, "per-sample sleep that emulates remote storage", "workload", min=0.0, max=10_000.0)
    folder: str = _f("", "folder workload: an ImageFolder-style directory (class subfolders)", "workload")
    seed: int = _f(0, "seed for data, shuffling and initial weights", "workload", min=0, max=2**31 - 1)
    # --- loader ---
    loader: str = _f("sync", "how batches are produced", "loader", choices="loaders")
    workers: int = _f(0, "threads or processes producing batches (threads, processes, spdl)", "loader", min=0, max=256)
    prefetch_depth: int = _f(2, "batches kept ready ahead of the training loop", "loader", min=1, max=1024)
    start_method: str = _f(
        "fork", "multiprocessing start method (processes)", "loader", choices=("fork", "spawn", "forkserver")
    )
    persistent_workers: bool = _f(True, "keep worker processes alive between epochs (processes)", "loader")
    pin_memory: bool = _f(True, "pin host batches before the copy (CUDA only; ignored on CPU)", "loader")
    worker_timeout_s: float = _f(
        120.0, "fail the run if no batch arrives for this long", "loader", min=1.0, max=86_400.0
    )
    # --- model ---
    model: str = _f(
        "mlp",
        "architecture: a built-in name, or your own as 'module.path:callable'",
        "model",
        choices="models",
        plugin=True,
    )
    width: int = _f(64, "hidden width (channels for cnn, d_model for transformer)", "model", min=1, max=65_536)
    depth: int = _f(2, "hidden layers / residual blocks / encoder layers", "model", min=1, max=256)
    optimizer: str = _f("sgd", "optimizer", "model", choices=("sgd", "adamw"))
    lr: float = _f(0.05, "learning rate", "model", min=1e-8, max=10.0)
    collate: str = _f(
        "",
        "batch collate function as 'module.path:callable' (empty: torch's default_collate)",
        "model",
        plugin=True,
        ui="hidden",
    )
    loss: str = _f(
        "", "loss(logits, y) as 'module.path:callable' (empty: cross-entropy)", "model", plugin=True, ui="hidden"
    )
    # --- training ---
    batch_size: int = _f(64, "samples per step", "training", min=1, max=1_000_000)
    epochs: int = _f(3, "epochs, warm-up included", "training", min=1, max=100_000)
    warmup_epochs: int = _f(
        1, "leading epochs flagged as warm-up (kept, excluded from summaries)", "training", min=0, max=100_000
    )
    device: str = _f("auto", "auto, cpu, cuda or cuda:N", "training")
    threads: int = _f(
        0,
        "intra-op threads (torch.set_num_threads); auto (or 0): torch's default, and the count it "
        "chose is recorded with the run",
        "training",
        min=0,
        max=1024,
        auto=0,
    )
    transform_threads: int = _f(
        0,
        "threads of the BLAS/OpenMP pools your transforms bring (numpy, SciPy, OpenCV) in "
        "loader workers and producer threads; auto (or 0): as the libraries set them",
        "training",
        min=0,
        max=1024,
        auto=0,
    )
    tag: str = _f("", "free-form label to group runs", "training")
    # --- concurrency mode ---
    mode: str = _f("single", "how models share the machine", "mode", choices="modes")
    n_models: int = _f(2, "fused: models trained as one vmapped program", "mode", min=1, max=4096)
    lr_spread: float = _f(0.0, "fused: model i gets lr * (1 + lr_spread * i)", "mode", min=0.0, max=100.0)
    model_b: str = _f("", "dual-*: second model's architecture (empty: same as model)", "mode")
    width_b: int = _f(0, "dual-*: second model's width (0: same as width)", "mode", min=0, max=65_536)
    dual_data: str = _f(
        "shared",
        "dual-threads: both models consume the same batches, or each has its own loader",
        "mode",
        choices=("shared", "separate"),
    )
    devices: list[str] = _f([], "dual-processes, split: devices to place models or stages on (may repeat)", "mode")
    n_stages: int = _f(2, "split: pipeline stages", "mode", min=1, max=64)
    micro_batches: int = _f(
        1, "split: micro-batches per step (1 = naive split, >1 = GPipe pipeline)", "mode", min=1, max=1024
    )
    world_size: int = _f(2, "ddp: data-parallel processes", "mode", min=1, max=1024)
    # --- measurement ---
    bound: bool = _f(
        True, "measure a loader-only and a compute-only pass for the lower bound and efficiency", "measure"
    )
    sample_hz: float = _f(10.0, "system-metrics sampling rate (CPU %, RSS, GPU)", "measure", min=0.0, max=100.0)
    check_samples: bool = _f(
        False,
        "streams: check each sample's identity every epoch (the key it yields, else a "
        "hash of the item), not only the count, so a stream that repeats or drops "
        "samples fails the run",
        "measure",
    )
    trace: bool = _f(
        False,
        "record a torch.profiler trace of one extra steady-state epoch after the measured ones "
        "into the run's folder (trace.json.gz, opens in Perfetto); stored epochs are unchanged",
        "measure",
    )

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunConfig":
        """Build and validate from plain data (TOML, JSON, form, URL). Unknown keys are rejected by name.

        NOTE: this is the schema alone; it imports no torch. What depends on the machine (the device, --trace, each
        workload's and mode's rules) is engine.registry.check's, which the launchers call: the run child before its
        RunLog starts, submit, the dashboard's form through engine.api, and --dry-run."""
        if not isinstance(data, dict):
            raise ConfigError("config", f"expected a table of fields, got {type(data).__name__}")
        known = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            name = str(key).replace("-", "_")
            if name not in known:
                raise ConfigError(str(key), f"unknown field; choose from: {', '.join(sorted(known))}")
            kwargs[name] = _coerce(known[name], value)
        cfg = cls(**kwargs)
        cfg.validate()
        if cfg.loader not in WORKER_LOADERS:
            cfg.workers = 0  # NOTE: these loaders use no workers; normalising keeps a loader×workers grid honest
        return cfg

    def replace(self, **changes: Any) -> "RunConfig":
        return RunConfig.from_dict({**self.to_dict(), **changes})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def effective(self, device: str | None = None) -> dict[str, Any]:
        """The config as it takes effect, for the store: fields the mode and the loader ignore get the value that
        ran; with `device`, the device it resolved to (auto as cpu, say), and no pinning unless it is a GPU.

        NOTE: the RunConfig itself keeps what the user asked for, so `replace(mode=...)` still finds
        their n_models or world_size; only the stored copy is normalised, in this one place.
        """
        out = self.to_dict()
        dual = self.mode.startswith("dual-")
        if self.mode != "fused":
            out.update(n_models=2 if dual else 1, lr_spread=0.0)
        if not dual:
            out.update(model_b="", width_b=0)
        if self.mode not in ("dual-processes", "split"):
            out["devices"] = []
        if self.mode != "dual-threads":
            out["dual_data"] = "shared"
        if self.mode != "split":
            out.update(n_stages=1, micro_batches=1)
        if self.mode != "ddp":
            out["world_size"] = 1
        # the loader fields a loader ignores: sync keeps no queue; only processes start and keep workers
        if self.loader == "sync":
            out["prefetch_depth"] = _default("prefetch_depth")
        if self.loader != "processes":
            out.update(start_method=_default("start_method"), persistent_workers=_default("persistent_workers"))
        if not self.num_classes and not SPEC_RE.match(self.workload):  # auto: what a built-in workload makes
            out["num_classes"] = DEFAULT_CLASSES
        if device is not None:  # pinning only helps a copy to a GPU
            out.update(device=device, pin_memory=self.pin_memory and device.startswith("cuda"))
        return out

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Raise ConfigError naming the first bad field. Checks types, limits, choices (the registries' names
        included: engine.names) and cross-field rules; the machine's checks are engine.registry.check's."""
        for f in dataclasses.fields(self):
            _check_field(f, getattr(self, f.name))
        if self.warmup_epochs >= self.epochs:
            raise ConfigError("warmup_epochs", f"must be less than epochs ({self.epochs}) so that some epochs count")
        check_workers(self.loader, self.workers)
        if self.num_classes == 1:
            raise ConfigError(
                "num_classes", "one class leaves nothing to learn; set 2 or more, or auto (0) to take the dataset's"
            )
        if self.workload == "folder" and not self.folder:
            raise ConfigError("folder", "the folder workload needs --folder PATH to a directory of class subfolders")

    def refused(self, e: ConfigError) -> ConfigError:
        """`e` as a check of this config says it: naming the grid point that made it, for a config of a sweep."""
        where = self.__dict__.get("_point", "")
        return ConfigError(e.field, f"{e.message} (in grid point {where})" if where else e.message)


def _default(name: str) -> Any:
    """A RunConfig field's default value."""
    return RunConfig.__dataclass_fields__[name].default


def config_fields(cls: type = RunConfig) -> list[dataclasses.Field]:
    """The schema, in declaration order: the CLI, the form and the store iterate this."""
    return list(dataclasses.fields(cls))


def field_choices(f: dataclasses.Field) -> tuple[str, ...] | None:
    choices = f.metadata.get("choices")
    if choices is None:
        return None
    if isinstance(choices, str):
        return NAMES[choices]
    return tuple(choices)


def field_type(f: dataclasses.Field) -> type:
    """The Python type a field's values have: int, float, bool, str or list (of str)."""
    return {"int": int, "float": float, "bool": bool, "str": str, "list[str]": list}[str(f.type)]


def field_value(f: dataclasses.Field, value: Any) -> Any:
    """`value` (a CLI word, URL text, a TOML or form value) as field f's type within its limits, or a ConfigError
    naming the field. The choices are left to validate(): the launch form shows an unknown choice and refuses it
    under its widget."""
    out = _coerce(f, value)
    _check_limits(f, out)
    return out


def _coerce(f: dataclasses.Field, value: Any) -> Any:
    """Strings from CLI/URL/form become the field's type; anything unconvertible is a ConfigError."""
    typ = field_type(f)
    why = ""
    try:
        if typ is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on"):
                return True
            if isinstance(value, str) and value.strip().lower() in ("0", "false", "no", "off"):
                return False
            if isinstance(value, int) and value in (0, 1):
                return bool(value)
            raise ValueError
        if typ is int:
            if isinstance(value, bool):
                raise ValueError
            if "auto" in f.metadata and isinstance(value, str) and value.strip().lower() == "auto":
                return f.metadata["auto"]
            if isinstance(value, int):
                return value
            if isinstance(value, str):
                try:
                    return int(value.strip())
                except ValueError:
                    value = value.strip()
                    number = float(value)  # NOTE: "2.0" and "1e6" are whole numbers too (a URL, a sweep axis)
            else:
                number = float(value)
            why = (
                " (not a finite number)"
                if not math.isfinite(number)
                else " (not a whole number)"
                if not number.is_integer()
                else ""
            )
            if why:
                raise ValueError
            return int(number)
        if typ is float:
            if isinstance(value, bool):
                raise ValueError
            out = float(value)
            if not math.isfinite(out):
                why = " (not a finite number)"
                raise ValueError
            return out
        if typ is list:
            if isinstance(value, str):
                return [v.strip() for v in value.split(",") if v.strip()]
            if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int)) for v in value):
                return [str(v) for v in value]
            raise ValueError
        if isinstance(value, (dict, list, tuple, bytes)) or value is None:
            raise ValueError
        text = str(value)
        if "\x00" in text:
            raise ValueError
        return text
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f.name, f"expected {typ.__name__ if typ is not list else 'a list'}, got {value!r:.60}{why}")


def _check_field(f: dataclasses.Field, value: Any) -> None:
    typ = field_type(f)
    if typ is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
        raise ConfigError(f.name, f"expected {typ.__name__}, got {value!r:.60}")
    _check_limits(f, value)
    if f.metadata.get("plugin") and isinstance(value, str) and SPEC_RE.match(value):
        return  # NOTE: only the spelling is checked here; engine.run.preflight imports and tries it
    choices = field_choices(f)
    if choices is not None and value not in choices:
        own = ", or your own as 'module.path:callable'" if f.metadata.get("plugin") else ""
        raise ConfigError(
            f.name, f"'{printable(str(value)[:200])}' is unknown; choose one of: {', '.join(choices)}{own}"
        )
    if f.metadata.get("plugin") and value and choices is None:
        raise ConfigError(
            f.name,
            f"'{printable(str(value)[:200])}' is not a plugin spec; write "
            "'module.path:callable', "
            "e.g. 'mypkg.data:build', or leave it empty for the default",
        )


def _check_limits(f: dataclasses.Field, value: Any) -> None:
    lo, hi = f.metadata.get("min"), f.metadata.get("max")
    if lo is not None and value < lo:
        raise ConfigError(f.name, f"must be >= {lo}, got {value!r:.60}")
    if hi is not None and value > hi:
        raise ConfigError(f.name, f"must be <= {hi}, got {value!r:.60}")
    if isinstance(value, str) and len(value) > 4096:
        raise ConfigError(f.name, "is longer than 4096 characters")


# ---------------------------------------------------------------------------- sweeps


@dataclass(kw_only=True)
class SweepConfig:
    """A grid over any RunConfig fields × repeats, run in a seeded random order.

    TOML:
        name = "loaders"
        repeats = 2
        seed = 0
        [base]            # RunConfig fields shared by every run
        workload = "jpeg"
        [grid]            # field -> list of values; the product is the set of configs
        loader = ["sync", "threads"]
        workers = [1, 2]
        [[points]]        # optional: explicit configs (over base) instead of / besides the grid product,
        loader = "processes"   # e.g. your setup vs the best, without the 2^k configs of a grid over both
        workers = 4

    max_runs (default 1000) caps points × repeats: a larger sweep is refused from the axes' lengths, before a
    single config is built; raise it in the TOML (max_runs = 5000) or with `sweep --max-runs`.
    """

    name: str = "sweep"
    base: dict[str, Any] = field(default_factory=dict)
    grid: dict[str, list[Any]] = field(default_factory=dict)
    points: list[dict[str, Any]] = field(default_factory=list)
    repeats: int = 1
    seed: int = 0
    shuffle: bool = True
    max_runs: int = DEFAULT_MAX_RUNS

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, expand: bool = True) -> "SweepConfig":
        """Check the keys and the size (from the axes' lengths), then, with expand, build and validate every
        config once (kept: configs() and plan() reuse them). expand=False lets a caller say the size first."""
        allowed = {f.name for f in dataclasses.fields(cls)}
        for key in data:
            if key not in allowed:
                raise ConfigError(f"sweep.{key}", f"unknown sweep key; choose from: {', '.join(sorted(allowed))}")
        sweep = cls(**data)
        if not isinstance(sweep.repeats, int) or isinstance(sweep.repeats, bool) or not 1 <= sweep.repeats <= 1000:
            raise ConfigError("sweep.repeats", "must be an integer from 1 to 1000")
        if not isinstance(sweep.max_runs, int) or isinstance(sweep.max_runs, bool) or sweep.max_runs < 1:
            raise ConfigError(
                "sweep.max_runs", f"must be a whole number of runs, at least 1, got {sweep.max_runs!r:.40}"
            )
        if not isinstance(sweep.base, dict):
            raise ConfigError("sweep.base", "must be a table of RunConfig fields")
        if not isinstance(sweep.grid, dict):
            raise ConfigError("sweep.grid", "must be a table of field = [values]")
        for key, values in sweep.grid.items():
            if not isinstance(values, list) or not values:
                raise ConfigError(f"grid.{key}", "must be a non-empty list of values")
        if not isinstance(sweep.points, list) or not all(isinstance(p, dict) for p in sweep.points):
            raise ConfigError("sweep.points", "must be a list of tables of RunConfig fields ([[points]])")
        if sweep.size() * sweep.repeats > sweep.max_runs:
            raise ConfigError(
                "sweep.max_runs",
                f"{sweep.describe()} is above the cap of {sweep.max_runs} runs; "
                "shrink the grid, or raise the cap (max_runs in the TOML, "
                "--max-runs on the command line)",
            )
        if expand:
            sweep.configs()  # validates every combination up front: nothing runs if one is bad
        return sweep

    def size(self) -> int:
        """How many configs the grid and points make before duplicates are dropped: the product of the axes'
        lengths plus the points, computed without building one."""
        # NOTE: with points and no grid the bare base is not a config of its own
        product = math.prod(len(v) for v in self.grid.values()) if self.grid or not self.points else 0
        return product + len(self.points)

    def describe(self) -> str:
        """The size in words, from the axes' lengths: "200 × 200 × 200 grid points = 8000000 configs × 1 repeat =
        8000000 runs"."""
        parts = [_count(len(self.points), "point")] if self.points else []
        if self.grid:
            parts.insert(0, " × ".join(str(len(v)) for v in self.grid.values()) + " grid points")
        made = " + ".join(parts) or "the base alone"
        return (
            f"{made} = {_count(self.size(), 'config')} × {_count(self.repeats, 'repeat')} = "
            f"{_count(self.size() * self.repeats, 'run')}"
        )

    def configs(self) -> list[RunConfig]:
        """Distinct configs of the grid (no repeats), each validated; configs that would run the same (equal
        `effective()`: they differ only in fields their loader or mode ignores) are kept once, the first of them.

        Built once per grid: from_dict, plan() and the launchers all ask, and the answer is kept until the base,
        grid or points change."""
        stamp = json.dumps([self.base, self.grid, self.points], sort_keys=True, default=str)
        cached = self.__dict__.get("_configs")  # NOTE: not a dataclass field: asdict() (a Ray job's spec) skips it
        if cached is not None and cached[0] == stamp:
            return list(cached[1])
        grid_keys = list(self.grid)
        out: list[RunConfig] = []
        seen: set[str] = set()  # each kept config's effective() as JSON: de-duplication in linear time
        product = itertools.product(*self.grid.values()) if grid_keys or not self.points else []
        points = itertools.chain(
            ((grid_keys, combo) for combo in product), ((list(p), list(p.values())) for p in self.points)
        )
        for keys, combo in points:
            data = {**self.base, **dict(zip(keys, combo))}
            where = ", ".join(f"{k}={v}" for k, v in zip(keys, combo))
            try:
                cfg = RunConfig.from_dict(data)
            except ConfigError as e:
                raise ConfigError(e.field, f"{e.message} (in grid point {where})" if where else e.message) from None
            key = json.dumps(cfg.effective(), sort_keys=True)
            if key not in seen:  # else the same run under other ignored values
                seen.add(key)
                # NOTE: not a field (asdict, ==, the store skip it): the launcher's machine check names the point too
                cfg.__dict__["_point"] = where
                out.append(cfg)
        self.__dict__["_configs"] = (stamp, out)
        return list(out)

    def plan(self) -> list[tuple[int, RunConfig]]:
        """(config index, config) for every run, repeats included, in a seeded random order."""
        runs = [(i, c) for i, c in enumerate(self.configs()) for _ in range(self.repeats)]
        if self.shuffle:
            random.Random(self.seed).shuffle(runs)
        return runs


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def load_toml(path: str | Path, field_name: str = "config") -> dict[str, Any]:
    """A TOML file's table; a missing, unreadable or non-TOML file is a ConfigError naming `field_name`."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(field_name, f"'{p}' is a directory; give a .toml file, e.g. examples/loaders.toml")
    if not p.is_file():
        raise ConfigError(field_name, f"file '{p}' does not exist")
    try:
        return tomllib.loads(p.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(field_name, f"'{p}' is not valid TOML: {e}") from None
    except OSError as e:
        raise ConfigError(field_name, f"'{p}' cannot be read ({e.strerror}); give a .toml file you can read") from None
