"""LoaderLab on a GPU box that already has its own CUDA torch: install what is missing, test, benchmark, summarise.

    python3 bench/gpu_box.py missing                 # the pinned packages this Python lacks (torch never listed)
    python3 bench/gpu_box.py install [--dry-run]     # pip install --no-deps exactly those pins, nothing else
    python3 bench/gpu_box.py test  [--out DIR]       # CUDA tests one at a time, then tests/engine tests/system
    python3 bench/gpu_box.py bench [--out DIR]       # the GPU benchmarks, each under a time limit
    python3 bench/gpu_box.py test -- tests/x.py -x   # (or bench -- bench/x.py --flag): only that, same record
    python3 bench/gpu_box.py summary [--out DIR]     # (re)write DIR/summary.md from what the steps left there

`make test-gpu` and `make bench-gpu` call these with the Python that has the box's torch (PYTHON=...): no venv,
and neither torch nor anything the box already has is installed, upgraded or downgraded. A pin whose package is
there in another version is kept and named in the summary. DIR (default data/gpu-box) gets summary.md, a text
to paste into an issue: the device, torch, the test counts and failures, the benchmarks' figures.

Tests run with tests/_failwriter.py, a pytest plugin that writes every outcome and failure as it happens, so a
run cut off by a time limit or a lost machine still leaves its record. The CUDA tests (`-m gpu`) run one at a
time, as they share the one GPU; the rest run in parallel under pytest-xdist when it is installed (each worker
gets its share of the cores as torch threads, tests/conftest.py), else one at a time.

Only the standard library is imported here: this script runs before the missing packages are installed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata as md
import importlib.util
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "requirements.txt"
KEEP = {"torch"}  # the box's own: never installed or replaced from requirements.txt
SUITES = {
    "cuda": ["-m", "gpu", "tests/engine", "tests/system"],
    "suite": ["-m", "not gpu", "tests/engine", "tests/system"],
}
BENCHES = {
    "concurrency": ["bench/concurrency.py", "--device", "cuda", "--repeats", "1", "--epochs", "3"],
    "startup": ["bench/startup.py", "--runs", "5"],
    "sync_cpu": ["bench/sync_cpu.py", "--widths", "16,64,256,512", "--image-size", "128", "--n-samples", "1024"],
}
OUTCOMES, FAILURES = "outcomes.tsv", "failures.txt"  # what tests/_failwriter.py writes, per suite folder
_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)")


# ---------------------------------------------------------------------------- packages


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path = REQUIREMENTS) -> dict[str, str]:
    """name -> pinned version, for every `name==version` line of a requirements file (comments ignored)."""
    out = {}
    for line in path.read_text().splitlines():
        m = _PIN.match(line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def installed_version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def classify(wanted: dict[str, str]) -> dict[str, list[tuple[str, str, str | None]]]:
    """The pins sorted into missing (to install), other (there in another version: kept), kept (KEEP: the box's
    own), ok; each as (name, pinned, installed)."""
    out: dict[str, list[tuple[str, str, str | None]]] = {"missing": [], "other": [], "kept": [], "ok": []}
    for name, version in wanted.items():
        have = installed_version(name)
        kind = (
            "kept" if canonical(name) in KEEP else "missing" if have is None else "ok" if have == version else "other"
        )
        out[kind].append((name, version, have))
    return out


def pip_command(missing: list[tuple[str, str, str | None]], pip_args: str = "") -> list[str]:
    """pip install --no-deps of exactly these pins: requirements.txt pins every dependency, so each one that is
    missing is in the list, and --no-deps keeps pip from replacing what the box has (its torch's numpy, say)."""
    return [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--disable-pip-version-check",
        *shlex.split(pip_args),
        *(f"{name}=={version}" for name, version, _ in missing),
    ]


# ---------------------------------------------------------------------------- tests and benchmarks


def xdist_workers(requested: int | None) -> int:
    """How many pytest-xdist workers for the parallel part: 0 (serial) without xdist; else as asked, or half
    the cores (the tests start processes and threads of their own), at most 8."""
    if importlib.util.find_spec("xdist") is None:
        return 0
    if requested is not None:
        return requested
    return max(1, min(8, len(os.sched_getaffinity(0)) // 2))


def run_suite(name: str, out: Path, extra: list[str], workers: int, timeout_s: int) -> int:
    """One pytest run with the failure writer, its outcomes under out/<name>/; returns pytest's exit status."""
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    for stale in (OUTCOMES, FAILURES, "pytest.log"):
        (folder / stale).unlink(missing_ok=True)
    # NOTE: pytest.ini's addopts (-q, no cache, -ra) still apply; --timeout here overrides its 600 s
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "tests._failwriter",
        f"--timeout={timeout_s}",
        *(["-n", str(workers)] if workers else []),
        *extra,
    ]
    (folder / "command.txt").write_text(shlex.join(cmd[1:]) + "\n")
    # the checkout first, and whatever PYTHONPATH the box's own torch or packages may need after it
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "LOADERLAB_REPORT_DIR": str(folder), "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}
    t0 = time.monotonic()
    with open(folder / "pytest.log", "wb") as log:
        code = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    (folder / "exit.txt").write_text(f"{code} {time.monotonic() - t0:.1f}\n")
    return code


def run_bench(name: str, argv: list[str], out: Path, timeout_s: int) -> int:
    """A benchmark script, its output kept whole in out/bench/<name>.txt; a time limit keeps what it printed."""
    folder = out / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.txt"
    t0 = time.monotonic()
    with open(path, "wb") as fh:
        fh.write(f"$ python {shlex.join(argv)}\n".encode())
        fh.flush()
        # unbuffered, so that a benchmark cut off at its limit has written every line it printed; its own
        # session, so that the limit stops the runs it started too
        proc = subprocess.Popen(
            [sys.executable, *argv],
            cwd=ROOT,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = 124
    (folder / f"{name}.exit").write_text(f"{code} {time.monotonic() - t0:.1f}\n")
    return code


# ---------------------------------------------------------------------------- the summary


def tally(folder: Path) -> dict[str, object]:
    """Counts per outcome and the failures from a suite folder's outcomes (complete or cut off).

    A test is an error when its setup or teardown failed, failed when its call did, skipped when skipped, passed
    when its call passed, and unfinished when only its setup was reported (the run was cut off in it)."""
    phases: dict[str, dict[str, str]] = {}
    path = folder / OUTCOMES
    for line in path.read_text().splitlines() if path.exists() else []:
        nodeid, when, outcome = line.split("\t")[:3]
        phases.setdefault(nodeid, {})[when] = outcome
    per_test = {nodeid: _result(seen) for nodeid, seen in phases.items()}
    counts = {k: sum(v == k for v in per_test.values()) for k in ("passed", "failed", "error", "skipped", "unfinished")}
    exit_file = folder / "exit.txt"
    code, seconds = exit_file.read_text().split() if exit_file.exists() else (None, None)
    return {
        "counts": counts,
        "failed": sorted(n for n, v in per_test.items() if v in ("failed", "error")),
        "exit": code,
        "seconds": seconds,
        "finished": exit_file.exists(),
    }


def _result(seen: dict[str, str]) -> str:
    """One test's result from its phases' outcomes (when -> passed | failed | skipped)."""
    if seen.get("call") == "failed":
        return "failed"
    if "failed" in seen.values():
        return "error"  # setup, teardown or collection
    if "skipped" in seen.values():
        return "skipped"
    return "passed" if "call" in seen else "unfinished"


def _first_error_line(folder: Path, nodeid: str) -> str:
    """The first 'E   ' line of a test's failure report in failures.txt: what its assertion or exception said."""
    path = folder / FAILURES
    blocks = path.read_text(errors="replace").split("===== ") if path.exists() else []
    said = [
        line[1:].strip()
        for block in blocks
        if block.startswith(f"{nodeid} [")
        for line in block.splitlines()
        if line.startswith("E ")
    ]
    return (said[0] if said else "")[:240]


def machine() -> list[str]:
    """Lines naming the machine, torch and the GPU (asked of torch in a child: this script must not need it)."""
    probe = (
        "import json, torch; c = torch.cuda.is_available(); print(json.dumps({'torch': torch.__version__, "
        "'cuda': torch.version.cuda, 'gpus': [torch.cuda.get_device_name(i) for i in "
        "range(torch.cuda.device_count())] if c else [], 'memory_gib': [round(torch.cuda.get_device_properties(i)"
        ".total_memory / 2**30, 1) for i in range(torch.cuda.device_count())] if c else []}))"
    )
    try:
        facts = json.loads(
            subprocess.run(
                [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=True
            ).stdout
        )
    except (subprocess.SubprocessError, ValueError, OSError):
        facts = {"torch": "not importable here", "cuda": None, "gpus": [], "memory_gib": []}
    gpus = ", ".join(f"{n} ({m} GiB)" for n, m in zip(facts["gpus"], facts["memory_gib"])) or "no CUDA GPU"
    if facts["gpus"]:
        gpus += f", driver {_driver()}"
    commit = (
        subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        or "unknown"
    )
    return [
        f"- **GPU:** {gpus}",
        f"- **torch:** {facts['torch']} (CUDA {facts['cuda']}), Python {platform.python_version()} ({sys.executable})",
        f"- **host:** {platform.processor() or platform.machine()}, {len(os.sched_getaffinity(0))} cores, "
        f"{platform.system()} {platform.release()}",
        f"- **checkout:** {commit}, {dt.date.today().isoformat()}",
    ]


def _driver() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.split("\n")[0].strip() or "unknown"


def _suite_lines(out: Path) -> list[str]:
    lines = []
    folders = (
        sorted(
            (f for f in out.iterdir() if (f / "command.txt").exists()),
            key=lambda f: (list(SUITES).index(f.name) if f.name in SUITES else len(SUITES), f.name),
        )
        if out.exists()
        else []
    )
    for folder in folders:
        name, t = folder.name, tally(folder)
        c = t["counts"]
        state = (
            f"exit {t['exit']} in {float(t['seconds']):.0f} s" if t["finished"] else "**cut off**: the counts so far"
        )
        unfinished = f", {c['unfinished']} unfinished" if c["unfinished"] else ""
        command = (folder / "command.txt").read_text().strip()
        lines += [
            f"### {name}: {c['passed']} passed, {c['failed']} failed, {c['error']} errors, "
            f"{c['skipped']} skipped{unfinished} ({state})",
            "",
            f"`python {command}`",
            "",
        ]
        lines += [f"- `{n}`: {_first_error_line(folder, n)}" for n in t["failed"]] or ["No failures."]
        lines.append("")
    return lines


def _bench_lines(out: Path) -> list[str]:
    lines = []
    for path in sorted((out / "bench").glob("*.txt")) if (out / "bench").exists() else []:
        exit_file = path.with_suffix(".exit")
        code, seconds = exit_file.read_text().split() if exit_file.exists() else ("?", "0")
        state = "cut off at its time limit" if code == "124" else f"exit {code}"
        text = path.read_text(errors="replace").rstrip()
        lines += [f"### {path.stem} ({state}, {float(seconds):.0f} s)", "", "```text", text[-6000:], "```", ""]
    return lines


def write_summary(out: Path) -> Path:
    """out/summary.md from whatever the steps left in out: packages, tests, benchmarks."""
    lines = ["# LoaderLab on a GPU box", "", *machine(), ""]
    if (out / "packages.txt").exists():
        lines += ["## Packages", "", *(out / "packages.txt").read_text().splitlines(), ""]
    suites, benches = _suite_lines(out), _bench_lines(out)
    lines += (["## Tests", "", *suites] if suites else []) + (["## Benchmarks", "", *benches] if benches else [])
    path = out / "summary.md"
    path.write_text("\n".join(lines).rstrip() + "\n")
    return path


def package_report(groups: dict[str, list[tuple[str, str, str | None]]], installed_now: bool) -> list[str]:
    def names(kind: str, fmt: str) -> str:
        return ", ".join(fmt.format(n=n, p=p, h=h) for n, p, h in groups[kind]) or "none"

    return [
        f"- installed from requirements.txt pins{'' if installed_now else ' (not yet)'}: "
        f"{names('missing', '{n}=={p}')}",
        f"- kept as found (another version than the pin): {names('other', '{n} {h} (pinned {p})')}",
        f"- the box's own, never touched: {names('kept', '{n} {h}')}",
        f"- as pinned: {len(groups['ok'])} packages",
    ]


# ---------------------------------------------------------------------------- commands


def cmd_missing(args: argparse.Namespace) -> int:
    groups = classify(pins(args.requirements))
    for name, version, _ in groups["missing"]:
        print(f"{name}=={version}")
    for name, version, have in groups["other"]:
        print(f"# kept: {name} {have} (pinned {version})", file=sys.stderr)
    return 0


def cmd_install(args: argparse.Namespace) -> int:
    groups = classify(pins(args.requirements))
    args.out.mkdir(parents=True, exist_ok=True)
    if not groups["missing"]:
        print("nothing to install: every pinned package is here (torch is the box's own)")
        (args.out / "packages.txt").write_text("\n".join(package_report(groups, True)) + "\n")
        return 0
    cmd = pip_command(groups["missing"], args.pip_args)
    print(shlex.join(cmd))
    if args.dry_run:
        return 0
    code = subprocess.run(cmd).returncode
    if code != 0:
        print(
            f"error: pip could not install the missing pins (exit {code}); offline, point it at wheels with "
            "PIP_ARGS='--no-index --find-links DIR'",
            file=sys.stderr,
        )
        return code
    (args.out / "packages.txt").write_text("\n".join(package_report(groups, True)) + "\n")
    return 0


def _has_torch() -> bool:
    return importlib.util.find_spec("torch") is not None


def cmd_test(args: argparse.Namespace) -> int:
    if not _has_torch():
        print(
            f"error: {sys.executable} has no torch; run with the Python that has the box's CUDA torch: "
            "make test-gpu PYTHON=/path/to/python",
            file=sys.stderr,
        )
        return 2
    suites = {"custom": args.pytest_args} if args.pytest_args else SUITES
    codes = []
    for name, extra in suites.items():
        workers = 0 if name == "cuda" else xdist_workers(args.workers)  # one GPU: its tests one at a time
        print(f"{name}: pytest {shlex.join(extra)}{f' -n {workers}' if workers else ''} ...", flush=True)
        codes.append(run_suite(name, args.out, extra, workers, args.timeout))
    print(f"summary: {write_summary(args.out)}")
    return max(codes) if codes else 0


def cmd_bench(args: argparse.Namespace) -> int:
    if not _has_torch():
        print(f"error: {sys.executable} has no torch; make bench-gpu PYTHON=/path/to/python", file=sys.stderr)
        return 2
    benches = {Path(args.script[0]).stem: args.script} if args.script else BENCHES
    codes = []
    for name, argv in benches.items():
        print(f"{name}: python {shlex.join(argv)} ...", flush=True)
        codes.append(run_bench(name, argv, args.out, args.timeout))
    print(f"summary: {write_summary(args.out)}")
    return 0 if all(c in (0, 124) for c in codes) else 1


def cmd_summary(args: argparse.Namespace) -> int:
    print(write_summary(args.out).read_text())
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", type=Path, default=ROOT / "data" / "gpu-box", help="where results and summary.md go")
    common.add_argument("--requirements", type=Path, default=REQUIREMENTS, help="the pins (default requirements.txt)")
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("missing", parents=[common], help="print the pins this Python lacks").set_defaults(fn=cmd_missing)
    p = sub.add_parser("install", parents=[common], help="pip install --no-deps the missing pins")
    p.add_argument("--dry-run", action="store_true", help="print the pip command, run nothing")
    p.add_argument("--pip-args", default="", help="extra pip arguments, e.g. '--no-index --find-links wheels/'")
    p.set_defaults(fn=cmd_install)
    p = sub.add_parser(
        "test", parents=[common], help="the CUDA tests, then tests/engine tests/system; writes summary.md"
    )
    p.add_argument("--workers", type=int, default=None, help="pytest-xdist workers (default: half the cores, <= 8)")
    p.add_argument("--timeout", type=int, default=600, help="per-test limit in seconds (the suite's own: 600)")
    p.add_argument("pytest_args", nargs="*", help="after --: run only these pytest arguments instead")
    p.set_defaults(fn=cmd_test)
    p = sub.add_parser("bench", parents=[common], help="the GPU benchmarks, each under --timeout; writes summary.md")
    p.add_argument("--timeout", type=int, default=900, help="seconds per benchmark (its output so far is kept)")
    p.add_argument("script", nargs="*", help="after --: run only this script with these arguments instead")
    p.set_defaults(fn=cmd_bench)
    sub.add_parser("summary", parents=[common], help="rewrite summary.md from --out and print it").set_defaults(
        fn=cmd_summary
    )
    args = ap.parse_args(argv)
    args.out = args.out.resolve()
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
