"""The user's current setup, said once: the baseline that `advise` and `tune` report the best config against.

    python -m engine tune --workload mypkg.data:build --model mypkg.nets:net \\
        --baseline loader=processes,workers=4,batch_size=64
    lab.advise(workload="mypkg.data:build", model="mypkg.nets:net", baseline={"loader": "processes", "workers": 4})

A baseline names loader settings only (KNOB_KEYS: loader, workers, prefetch_depth, start_method,
persistent_workers, pin_memory, batch_size) and must name the loader. What it leaves out takes
RunConfig's default, as a DataLoader left at its defaults would. Everything else (data, model, the
problem) is the run's, so the comparison is like with like.
"""

from __future__ import annotations

import json
from typing import Any

from engine.config import RunConfig
from engine.errors import ConfigError, printable

__all__ = ["BASELINE_KEYS", "EXAMPLE", "confirm_sweep_toml", "describe_baseline", "knobs", "parse", "toml_value"]

# The loader settings a baseline may name; the advisor ranks configs over the same keys (its KNOB_KEYS)
BASELINE_KEYS = (
    "loader",
    "workers",
    "prefetch_depth",
    "start_method",
    "persistent_workers",
    "pin_memory",
    "batch_size",
)
EXAMPLE = "loader=processes,workers=4,batch_size=64"


def parse(value: str | dict[str, Any] | None) -> dict[str, Any]:
    """'loader=processes,workers=4,batch_size=64' (or the same as a dict) -> the given fields, checked and typed.

    Empty or None: {} (no baseline). Bad input is a ConfigError on `baseline` that says what to write."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}
    if isinstance(value, str):
        pairs: dict[str, Any] = {}
        for item in value.split(","):
            key, sep, val = item.partition("=")
            if not sep or not key.strip() or not val.strip():
                raise ConfigError(
                    "baseline", f"'{printable(item.strip()[:80])}' is not FIELD=VALUE; write e.g. --baseline {EXAMPLE}"
                )
            pairs[key.strip()] = val.strip()
        value = pairs
    if not isinstance(value, dict) or not value:
        raise ConfigError("baseline", f"expected FIELD=VALUE pairs or a dict, e.g. {EXAMPLE}")
    given = {str(k).strip().replace("-", "_"): v for k, v in value.items()}
    unknown = [k for k in given if k not in BASELINE_KEYS]
    if unknown:
        raise ConfigError(
            "baseline", f"'{printable(unknown[0][:80])}' is not a loader setting; use: {', '.join(BASELINE_KEYS)}"
        )
    if "loader" not in given:
        raise ConfigError("baseline", f"name your loader, e.g. {EXAMPLE}")
    try:
        cfg = RunConfig.from_dict(given)
    except ConfigError as e:
        raise ConfigError("baseline", f"{e.field}: {e.message}") from None
    return {k: getattr(cfg, k) for k in BASELINE_KEYS if k in given}


def knobs(baseline: dict[str, Any], base: RunConfig | None = None, device: str | None = None) -> dict[str, Any]:
    """All of BASELINE_KEYS: the baseline's fields over `base`'s (a tune's shared fields), else over the
    defaults: what the user did not say is the library default, as in a DataLoader left at its defaults.

    As runs store them (RunConfig.effective on the `device` they ran on), so that the user's setup matches its
    stored runs. Runs stored before devices were resolved say "auto": their pinning stays as asked."""
    cfg = base.replace(**baseline) if base is not None else RunConfig.from_dict(baseline)
    effective = cfg.effective(device=None if device in (None, "auto") else device)
    return {k: effective[k] for k in BASELINE_KEYS}


def describe_baseline(baseline: dict[str, Any]) -> str:
    """'loader=processes,workers=4,batch_size=64': as the user would type it again."""
    return ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in baseline.items())


def confirm_sweep_toml(
    base_config: dict[str, Any], yours: dict[str, Any], best: dict[str, Any], *, repeats: int, title: str
) -> str:
    """A sweep of exactly two configs, your setup and the best, `repeats` runs each in a seeded random order:
    enough runs (7 + 7) for a 95% interval of the speedup. Base: every non-default field of base_config."""
    defaults = RunConfig().to_dict()
    base = {
        k: v
        for k, v in base_config.items()
        if k in defaults and k not in BASELINE_KEYS and k != "tag" and (v != defaults[k] or k in ("workload", "model"))
    }
    out = [
        f"# {title}",
        "# run: python -m engine sweep <this file>; then advise with the same --baseline",
        'name = "confirm"',
        f"repeats = {repeats}",
        "seed = 0",
        "",
        "[base]",
    ]
    out += [f"{k} = {toml_value(v)}" for k, v in base.items()]
    for point in (yours, best):
        out += ["", "[[points]]"] + [f"{k} = {toml_value(v)}" for k, v in point.items()]
    return "\n".join(out) + "\n"


def toml_value(v: Any) -> str:
    """A TOML value for a config field's value: the one writer of the advisor's and tune's sweep files."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(str(v))  # a JSON string is a valid TOML basic string
