"""The driver loop: place trials on free nodes, wait, and land each trial's RunLog in this machine's store."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

from engine.config import RunConfig
from engine.paths import Db, db_path, runs_dir
from engine.run.runner import RunResult, new_run_id
from engine.runlog import RunLog, claim, launching, read_events
from engine.status import RunStatus
from engine.store import ingest_run
from engine.sweeps.local import SweepResult
from engine.sweeps.ray import _node
from engine.sweeps.ray._cluster import Node, alive_nodes

__all__ = ["Driver", "Trial", "gpus_needed"]

log = logging.getLogger(__name__)

_SALVAGE_TIMEOUT_S = 30.0
_REFRESH_S = 5.0


@dataclass
class Trial:
    cfg: RunConfig
    meta: dict[str, Any]
    run_id: str = field(default_factory=new_run_id)
    gpus: int = 0
    node: Node | None = None


def gpus_needed(cfg: RunConfig, cluster_has_gpus: bool) -> int:
    """Whole GPUs a trial holds: 0 on CPU; ddp one per rank; else enough for the highest cuda:N it names."""
    names = [cfg.device, *cfg.devices]
    cuda = [n for n in names if n.startswith("cuda")]
    if not cuda and not (cluster_has_gpus and "auto" in names):
        return 0
    if cfg.mode == "ddp":
        return max(1, cfg.world_size)
    indexes = [int(n.split(":", 1)[1]) + 1 for n in cuda if ":" in n and n.split(":", 1)[1].isdigit()]
    return max([1, len(set(cfg.devices) & set(cuda)), *indexes])


class Driver:
    def __init__(self, ray: Any, db: Db, result: SweepResult, bar: tqdm, cancel: threading.Event | None):
        # NOTE: Ray is optional: imported only when a Ray sweep runs
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415

        self.ray, self.db, self.result, self.bar = ray, db, result, bar
        self.cancel = cancel or threading.Event()
        self.cancelled_at: float | None = None  # time.monotonic() of the first cancel
        self.forced = False
        self.pin = lambda node: NodeAffinitySchedulingStrategy(node.node_id, soft=False)
        self.trial_fn, self.salvage_fn = ray.remote(_node.trial), ray.remote(_node.salvage)
        self.nodes = alive_nodes(ray)
        self.inflight: dict[Any, Trial] = {}

    def run(self, pending: list[Trial]) -> None:
        refreshed = time.monotonic()
        try:
            while pending or self.inflight:
                if self.cancel.is_set() and self.cancelled_at is None:
                    self._cancel_all(pending)
                elif (
                    self.cancelled_at and time.monotonic() - self.cancelled_at > _SALVAGE_TIMEOUT_S and not self.forced
                ):
                    self._cancel_all(pending, force=True)  # a trial deaf to the interrupt: kill its worker
                if time.monotonic() - refreshed > _REFRESH_S:  # nodes that joined become usable; dead ones drop
                    alive = alive_nodes(self.ray)
                    self.nodes, refreshed = {k: self.nodes.get(k, v) for k, v in alive.items()}, time.monotonic()
                self._dispatch(pending)
                self._wait(timeout=0.5)
        except KeyboardInterrupt:
            self._cancel_all(pending)  # Ctrl-C: record the running trials as cancelled, then stop
            self._wait(timeout=_SALVAGE_TIMEOUT_S, num=len(self.inflight))
            self._cancel_all(pending, force=True)
            self._wait(timeout=_SALVAGE_TIMEOUT_S, num=len(self.inflight))
            raise

    def _wait(self, timeout: float, num: int = 1) -> None:
        if not self.inflight:
            return
        ready, _ = self.ray.wait(list(self.inflight), num_returns=min(num, len(self.inflight)), timeout=timeout)
        for ref in ready:
            self._finish(ref, self.inflight.pop(ref))

    def _dispatch(self, pending: list[Trial]) -> None:
        any_gpu = any(n.gpus for n in self.nodes.values())
        for trial in list(pending):
            trial.gpus = gpus_needed(trial.cfg, any_gpu)
            node = next((n for n in self.nodes.values() if n.fits(trial.gpus)), None)
            if node is None:
                if not any(n.could_ever_fit(trial.gpus) for n in self.nodes.values()):
                    pending.remove(trial)  # no node could ever take it: record why and go on
                    nodes = ", ".join(map(str, self.nodes.values())) or "none"
                    self._land(
                        trial,
                        None,
                        RunStatus.FAILED,
                        f"no live node in the Ray cluster has {trial.gpus} "
                        f"GPU(s) and a CPU for this run; nodes: {nodes}",
                    )
                continue
            pending.remove(trial)
            trial.node = node
            node.gpus_used += trial.gpus
            node.cpu_trial = trial.gpus == 0
            # NOTE: a CPU trial asks for all of its node's CPUs, so Ray's own accounting keeps it alone there
            ref = self.trial_fn.options(
                num_cpus=node.cpus if trial.gpus == 0 else 1,
                num_gpus=trial.gpus,
                max_retries=0,
                name=f"loaderlab-trial-{trial.run_id}",
                scheduling_strategy=self.pin(node),
            ).remote(trial.cfg.to_dict(), trial.meta, trial.run_id)
            self.inflight[ref] = trial
            self._show()

    def _finish(self, ref: Any, trial: Trial) -> None:
        if trial.node is not None:
            trial.node.gpus_used -= trial.gpus
            trial.node.cpu_trial = trial.node.cpu_trial and trial.gpus != 0
        exc = self.ray.exceptions
        try:
            payload = self.ray.get(ref, timeout=0)
            status, reason = RunStatus.FAILED, "the trial returned no RunLog"
        except exc.TaskCancelledError:
            payload, status, reason = self._salvage(trial), RunStatus.CANCELLED, "cancelled; finished epochs kept"
        except (exc.NodeDiedError, exc.LocalRayletDiedError) as e:
            payload, status, reason = None, RunStatus.FAILED, _reason(exc, e, trial.node)  # nothing left to salvage
        except (exc.RayError, TimeoutError) as e:
            payload, status, reason = self._salvage(trial), RunStatus.FAILED, _reason(exc, e, trial.node)
        self._land(trial, payload, status, reason)

    def _salvage(self, trial: Trial) -> dict[str, Any] | None:
        if trial.node is None or trial.node.node_id not in alive_nodes(self.ray):
            return None  # a lost node: only what the driver knows is recorded
        try:
            ref = self.salvage_fn.options(
                num_cpus=0,
                max_retries=0,
                scheduling_strategy=self.pin(trial.node),
                name=f"loaderlab-salvage-{trial.run_id}",
            ).remote(trial.run_id)
            return self.ray.get(ref, timeout=_SALVAGE_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - best effort: the run is recorded as failed either way
            log.warning("could not salvage run %s from %s: %s", trial.run_id, trial.node.host, e)
            return None

    def _cancel_all(self, pending: list[Trial], force: bool = False) -> None:
        """Run nothing more; interrupt running trials (their runner records `cancelled`), or kill their workers."""
        self.cancelled_at, self.forced = self.cancelled_at or time.monotonic(), force
        pending.clear()
        for ref in self.inflight:
            self.ray.cancel(ref, force=force)

    def _land(self, trial: Trial, payload: dict[str, Any] | None, status: str, reason: str) -> None:
        """Write the trial's RunLog under this store's runs/, end it if the trial could not, and ingest it."""
        run_dir = runs_dir(self.db) / trial.run_id
        claim(run_dir, db_path(self.db))  # the node's RunLog named its scratch store; this copy is this store's
        with launching(run_dir):  # this process stores it: until then it is not waiting for anyone
            (run_dir / "events.jsonl").write_text((payload or {}).get("events", ""), encoding="utf-8")
            (run_dir / "stderr.log").write_text((payload or {}).get("stderr", ""), encoding="utf-8")
            events = read_events(run_dir)
            end = next((e for e in reversed(events) if e.get("type") == "end"), None)
            with RunLog(run_dir) as runlog:
                if not events:
                    host = (payload or {}).get("host") or (trial.node.host if trial.node else None)
                    runlog.write(
                        "start", run_id=trial.run_id, config=trial.cfg.to_dict(), host={"hostname": host}, **trial.meta
                    )
                if end is None:
                    end = {"status": status, "error": reason}
                    runlog.write("end", **end)
            try:
                ingest_run(run_dir, db=self.db)
            except Exception as e:  # noqa: BLE001 - the RunLog is on disk; ingest_pending picks it up later
                log.warning("run %s is in %s but could not be ingested yet: %s", trial.run_id, run_dir, e)
        run = RunResult(trial.run_id, end["status"], end.get("error"), run_dir)
        self.result.results.append(run)
        if run.status != RunStatus.DONE:
            log.warning("run %s %s: %s", run.run_id, run.status, run.error)
        self.bar.update(1)
        self._show()

    def _show(self) -> None:
        done = self.result.counts.get(RunStatus.DONE, 0)
        self.bar.set_postfix_str(
            f"done {done} · failed {len(self.result.results) - done} · running {len(self.inflight)}", refresh=True
        )


def _reason(exc: Any, e: Exception, node: Node | None) -> str:
    where = f" on {node.host}" if node else ""
    if isinstance(e, exc.RayTaskError):  # the trial itself raised: its own message says why
        cause = getattr(e, "cause", None) or e
        last = (str(cause).strip().splitlines() or [""])[-1]
        return f"the trial failed{where}: {type(cause).__name__}: {last:.500}"
    if isinstance(e, (exc.NodeDiedError, exc.LocalRayletDiedError)):
        return f"the Ray node{where} was lost during the run"
    if isinstance(e, exc.WorkerCrashedError):
        return f"the Ray worker running this trial{where} died (killed, or out of memory); finished epochs kept"
    first = (str(e).strip().splitlines() or [""])[0]
    return f"Ray lost the trial{where}: {type(e).__name__}: {first:.300}"
