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

from typing import Any

from engine.config import ConfigError, RunConfig, printable

__all__ = ["BASELINE_KEYS", "EXAMPLE", "confirm_sweep_toml", "describe_baseline", "knobs", "parse",
           "vs_baseline_lines"]

# NOTE: the advisor's KNOB_KEYS, typed here too so that parsing needs neither pandas nor the store;
# tests/engine/test_tune.py checks the two agree
BASELINE_KEYS = ("loader", "workers", "prefetch_depth", "start_method", "persistent_workers", "pin_memory",
                 "batch_size")
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
                raise ConfigError("baseline", f"'{printable(item.strip()[:80])}' is not FIELD=VALUE; write e.g. "
                                              f"--baseline {EXAMPLE}")
            pairs[key.strip()] = val.strip()
        value = pairs
    if not isinstance(value, dict) or not value:
        raise ConfigError("baseline", f"expected FIELD=VALUE pairs or a dict, e.g. {EXAMPLE}")
    given = {str(k).strip().replace("-", "_"): v for k, v in value.items()}
    unknown = [k for k in given if k not in BASELINE_KEYS]
    if unknown:
        raise ConfigError("baseline", f"'{printable(unknown[0][:80])}' is not a loader setting; "
                                      f"use: {', '.join(BASELINE_KEYS)}")
    if "loader" not in given:
        raise ConfigError("baseline", f"name your loader, e.g. {EXAMPLE}")
    try:
        cfg = RunConfig.from_dict(given)
    except ConfigError as e:
        raise ConfigError("baseline", f"{e.field}: {e.message}") from None
    return {k: getattr(cfg, k) for k in BASELINE_KEYS if k in given}


def knobs(baseline: dict[str, Any], base: RunConfig | None = None) -> dict[str, Any]:
    """All of BASELINE_KEYS: the baseline's fields over `base`'s (a tune's shared fields), else over the
    defaults: what the user did not say is the library default, as in a DataLoader left at its defaults."""
    cfg = base.replace(**baseline) if base is not None else RunConfig.from_dict(baseline)
    return {k: getattr(cfg, k) for k in BASELINE_KEYS}


def describe_baseline(baseline: dict[str, Any]) -> str:
    """'loader=processes,workers=4,batch_size=64': as the user would type it again."""
    return ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in baseline.items())


def confirm_sweep_toml(base_config: dict[str, Any], yours: dict[str, Any], best: dict[str, Any], *,
                       repeats: int, title: str) -> str:
    """A sweep of exactly two configs, your setup and the best, `repeats` runs each in a seeded random order:
    enough runs (7 + 7) for a 95% interval of the speedup. Base: every non-default field of base_config."""
    from engine.advisor import _toml  # noqa: PLC0415 - one TOML writer

    defaults = RunConfig().to_dict()
    base = {k: v for k, v in base_config.items() if k in defaults and k not in BASELINE_KEYS and k != "tag"
            and (v != defaults[k] or k in ("workload", "model"))}
    out = [f"# {title}", "# run: python -m engine sweep <this file>; then advise with the same --baseline",
           'name = "confirm"', f"repeats = {repeats}", "seed = 0", "", "[base]"]
    out += [f"{k} = {_toml(v)}" for k, v in base.items()]
    for point in (yours, best):
        out += ["", "[[points]]"] + [f"{k} = {_toml(v)}" for k, v in point.items()]
    return "\n".join(out) + "\n"


def vs_baseline_lines(advice: Any) -> list[str]:
    """The advisor's answer for the user's setup: the best's speedup over it with its interval, or the
    sweep that would give one. `advice` is an engine.advisor.Advice with a baseline."""
    from engine import stats  # noqa: PLC0415
    from engine.advisor import CONFIRM_REPEATS, describe  # noqa: PLC0415

    c, mine = advice.comparison, f"your setup ({describe(advice.default)})"
    if advice.default == advice.best:
        return [f"{mine} is the fastest measured config ({c.get('n_b', 0)} runs)"]
    if not c.get("n_a"):
        lines = [f"{mine}: no stored runs for this problem yet, so no speedup to report"]
    else:
        ci = stats.ci_text(c["speedup_lo"], c["speedup_hi"], min(c["n_a"], c["n_b"]), "{:.2f}", "x")
        said = (f"best is {c['speedup']:.2f}x faster than {mine}" if c["verdict"] == "B faster"
                else f"best vs {mine}: {c['speedup']:.2f}x by the medians, {c['verdict']}")
        lines = [f"{said} ({ci}; {c['n_a']} + {c['n_b']} runs)"]
    if advice.needs_confirmation:
        host = "" if advice.host == "this" else f" --host {advice.host}"
        lines.append(f"  confirm it ({CONFIRM_REPEATS} runs of each, in a random order): python -m engine advise "
                     f"--workload {advice.workload} --model {advice.model}{host} --baseline "
                     f"{describe_baseline(advice.baseline)} --write-confirm confirm.toml && "
                     "python -m engine sweep confirm.toml")
    return lines
