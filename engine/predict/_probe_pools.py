"""How a hidden pool's load runs in two worker processes at once, for the probe (engine/predict/probe.py): the
collapse the model's `processes` loader pays where the pools' threads, counted over every worker, outnumber the cores.

Each of two forked children loads the same batches as the probe's one-thread windows, on its own copy of the pool (a
DataLoader worker forks so, and numpy's OpenBLAS starts a pool of its own in each). A BLAS team whose thread is off
its core spins at its barrier rather than yield, so two teams on too few cores run far slower than sharing the cores
would make them, now and then: on 2 cores, two workers of a 2-thread OpenBLAS ran a covariance-and-eigenvalues load
2x to 22x slower than one, epoch by epoch, where sharing predicts 1x (bench/RESULTS.md, 'Predict before you run':
sensors). The collapse is the pair's wall over what processor sharing gives the same CPU-seconds: 1 where the teams
fit the cores, or share them cleanly. The model reaches a prediction's range up to it (engine/predict/model.py).

NOTE: the children fetch and collate only, never touch the device: a fork after CUDA's start cannot use CUDA.
"""

from __future__ import annotations

import os
import select
import signal
import struct
import time
from typing import Any, Callable

__all__ = ["DEADLINE", "PAIR", "PAIRS", "WITHIN_S", "pool_collapse"]

PAIR = 2  # worker processes loading at once: the fewest whose pools can outnumber the cores their pool sizes fill
PAIRS = 3  # pairs a full probe times (the largest slowdown counts); a quick probe's one
WITHIN_S = 2.0  # wall seconds after which no further pair starts
DEADLINE = 10.0  # times sharing's wall: a pair not done by then is killed and counts at it (the collapse's reach)
_WAIT_LEAST_S = 0.5  # a deadline's least seconds (a tiny load's pair is its children waking up)


def pool_collapse(
    fetch: Callable[[Any], Any],
    batch: list,
    cpu_s: float,
    wall_s: float,
    cores: float,
    pairs: int = PAIRS,
    within_s: float = WITHIN_S,
) -> float | None:
    """How far the pair can slow past processor sharing (>= 1): PAIR forked children each run fetch(k) for every k of
    `batch` at once, up to `pairs` times while they take under `within_s` in all; the largest slowdown seen (a pair
    that overran its deadline, DEADLINE times sharing's wall, counts at it and is killed). `cpu_s` and `wall_s` are
    one process's CPU (its pool's threads included) and wall for the same batches alone. None where a child could
    not run them.

    NOTE: the largest, not a typical figure: the collapse is bimodal. On 2 cores, two DataLoader workers over
    sensors' items ran epochs of 8.1, 0.71 and 8.1 s in turn (0.36 s on one thread), and runs of the same setting
    measured 6.69 s once and 1.04 s (2 threads) another time: a team that loses its core at the wrong moment spins
    through the rest of its product. No point figure predicts which an epoch gets; the model widens the range."""
    if not batch or cpu_s <= 0:
        return None
    # processor sharing: PAIR loads of cpu_s each on `cores`, never faster than one of them alone
    shared = max(wall_s, PAIR * cpu_s / max(1.0, cores))
    deadline = max(_WAIT_LEAST_S, DEADLINE * shared)
    collapses: list[float] = []
    t0 = time.perf_counter()
    while len(collapses) < max(1, pairs) and (not collapses or time.perf_counter() - t0 < within_s):
        took = _pair(fetch, batch, deadline)
        if took is None:
            return None
        collapses.append(min(DEADLINE, max(1.0, took / shared)))  # NOTE: past DEADLINE it is not measured
    return max(collapses)


def _pair(fetch: Callable[[Any], Any], batch: list, deadline_s: float) -> float | None:
    """Wall seconds for PAIR forked children to run fetch(k) for each k of `batch` at once (deadline_s where they
    overran it: then they are killed); None where a child died before it reported."""
    go_r, go_w = os.pipe()
    done_r, done_w = os.pipe()
    pids: list[int] = []
    ends: list[float] = []
    closed = False
    try:
        for _ in range(PAIR):
            pid = os.fork()
            if pid == 0:  # pragma: no cover (a forked child: its coverage is not collected)
                code = 1
                try:
                    os.close(go_w)
                    os.close(done_r)
                    os.read(go_r, 1)
                    for k in batch:
                        fetch(k)
                    os.write(done_w, struct.pack("d", time.perf_counter()))
                    code = 0
                finally:
                    os._exit(code)
            pids.append(pid)
        os.close(go_r)
        os.close(done_w)
        go_r = done_w = -1
        t0 = time.perf_counter()
        os.write(go_w, b"g" * PAIR)
        ends, closed = _ends(done_r, t0 + deadline_s)
    finally:
        for fd in (go_r, go_w, done_r, done_w):
            if fd >= 0:
                os.close(fd)
        for pid in pids:
            _reap(pid, finished=len(ends) == PAIR)
    if len(ends) == PAIR:
        return max(ends) - t0
    return None if closed else deadline_s


def _ends(fd: int, deadline: float) -> tuple[list[float], bool]:
    """The children's end times as they report them (8 bytes each), until both did, the pipe closed (True: every
    child exited, one of them without reporting) or the deadline."""
    data = b""
    closed = False
    while len(data) < 8 * PAIR:
        left = deadline - time.perf_counter()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 8 * PAIR - len(data))
        if not chunk:
            closed = True
            break
        data += chunk
    return [struct.unpack("d", data[i : i + 8])[0] for i in range(0, len(data) - len(data) % 8, 8)], closed


def _reap(pid: int, finished: bool) -> None:
    """Waits for a child: one that reported exits at once; one that did not (past the deadline, or the parent's own
    error) is killed first."""
    try:
        if not finished and os.waitpid(pid, os.WNOHANG) == (0, 0):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
