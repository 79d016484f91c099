"""Connecting to Ray (optional at install time) and reading which nodes it has."""

from __future__ import annotations

import importlib.util
import logging
import os
import socket
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from engine.errors import ConfigError
from engine.sweeps.ray._session import forget_session, record_session

__all__ = ["INSTALL_HINT", "Node", "alive_nodes", "connect_ray", "ray_available", "require_ray"]

INSTALL_HINT = "pip install -r requirements-cluster.txt"


def ray_available() -> bool:
    """Whether Ray is installed here (the launch page offers a cluster target only then)."""
    return importlib.util.find_spec("ray") is not None


def require_ray() -> Any:
    """The `ray` module, or a ConfigError on `executor` saying how to install it."""
    try:
        # NOTE: imported here: Ray is optional (requirements-cluster.txt), and the CLI, the dashboard and the
        # job worker import this package to offer or refuse a cluster target
        import ray  # noqa: PLC0415
    except ImportError as e:
        raise ConfigError(
            "executor",
            f"the Ray executor needs Ray, which is not installed ({e}); "
            f"install it with `{INSTALL_HINT}` or use --executor local",
        ) from None
    return ray


@contextmanager
def connect_ray(
    address: str | None = None, *, num_cpus: int | None = None, record_in: Path | None = None
) -> Iterator[Any]:
    """Yield `ray`, connected: this process's connection if it has one (left open), else a new one that is
    closed on exit. address None starts a local instance listening on 127.0.0.1 only, with num_cpus
    (default: all); "auto" joins the cluster `ray start` runs on this machine; "host:port" a cluster's
    head; "ray://host:port" goes through Ray Client. record_in: a folder where a local instance is recorded
    while it runs, so that the next job worker can stop its leftovers if this process is killed (_session)."""
    ray = require_ray()
    if ray.is_initialized():
        yield ray
        return
    record = None
    try:
        if address is None:
            _init_local(ray, num_cpus)
            record = record_session(record_in, ray) if record_in is not None else None
        else:
            _probe(address)
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as e:
        ray.shutdown()
        forget_session(record)
        where = "start a local Ray instance" if address is None else f"connect to the Ray cluster at {address!r}"
        first = (str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__).rstrip(".")
        hint = (
            ""
            if address is None
            else (
                " (a cluster with token auth also needs RAY_AUTH_MODE=token and its "
                "token in RAY_AUTH_TOKEN or ~/.ray/auth_token)"
            )
        )
        raise ValueError(
            f"could not {where}: {first}; check --address (auto, host:port or ray://host:port) "
            f"and that `ray status` works on that machine{hint}"
        ) from None
    try:
        yield ray
    finally:
        ray.shutdown()
        forget_session(record)


def _probe(address: str) -> None:
    """Fail in seconds when nothing answers at the address Ray would use: Ray itself retries for minutes."""
    target = address.removeprefix("ray://")
    if not address.startswith("ray://"):
        try:  # NOTE: "auto" and localhost are resolved the way ray.init resolves them (private API, pinned Ray)
            # NOTE: Ray is optional: imported only once a cluster is asked for
            from ray._private.services import canonicalize_bootstrap_address_or_die  # noqa: PLC0415

            target = canonicalize_bootstrap_address_or_die(address)
        except ImportError:
            pass
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        return  # a form only Ray understands: let it try
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5.0).close()
    except OSError as e:
        raise ConnectionError(f"nothing answers at {host}:{port} ({e.strerror or e})") from None


def _init_local(ray: Any, num_cpus: int | None) -> None:
    # NOTE: Ray is optional: imported only once a cluster is asked for
    from ray._private import ray_constants  # noqa: PLC0415

    # NOTE: on Linux Ray turns "127.0.0.1" into the host's LAN address and listens on every interface
    # unless its cluster mode is off. Off only while starting, so a later cluster connection is unaffected.
    saved = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        # address "local": always a new instance, even where RAY_ADDRESS or an earlier `ray start` points elsewhere
        ray.init(
            address="local",
            num_cpus=num_cpus or os.cpu_count(),
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            logging_level=logging.WARNING,
            log_to_driver=False,
        )
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved


@dataclass
class Node:
    """A live node and what the driver has placed on it."""

    node_id: str
    host: str
    cpus: int
    gpus: int
    gpus_used: int = 0
    cpu_trial: bool = False

    def fits(self, gpus: int) -> bool:
        """A CPU trial needs the node to itself; a GPU trial needs that many free GPUs and no CPU trial."""
        if self.cpu_trial or self.cpus < 1 or (gpus == 0 and self.gpus_used):
            return False
        return self.gpus - self.gpus_used >= gpus

    def could_ever_fit(self, gpus: int) -> bool:
        return self.cpus >= 1 and self.gpus >= gpus

    def __str__(self) -> str:
        return f"{self.host} ({self.cpus} CPU, {self.gpus} GPU)"


def alive_nodes(ray: Any) -> dict[str, Node]:
    return {
        n["NodeID"]: Node(
            n["NodeID"],
            n.get("NodeManagerHostname") or n.get("NodeManagerAddress") or "?",
            int(n["Resources"].get("CPU", 0)),
            int(n["Resources"].get("GPU", 0)),
        )
        for n in ray.nodes()
        if n.get("Alive")
    }
