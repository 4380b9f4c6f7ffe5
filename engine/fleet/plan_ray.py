"""Run a plan's grid as Ray tasks: the same evaluate() as the local pool, so the same answer.

Ray is an optional extra (`pip install -e ".[ray]"`); nothing else in tokensim imports it. Without an
address a private local Ray instance is started, bound to 127.0.0.1 (and shut down after); with one
(`HOST:6379` for a cluster's head node, or `ray://HOST:10001` for Ray Client) the tasks run on that cluster,
which needs tokensim's engine importable on its workers: the engine package is shipped with the job
(runtime_env py_modules). A profile registered by --runtime-file travels in each task's payload (a Ray worker is
a fresh process that never read the file) and is registered on the worker before the point is evaluated.
An address that does not answer is one InputError, raised before anything is submitted.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from typing import Any

from engine.errors import InputError
from engine.fleet.plan import Job, PointResult, _evaluate_job
from engine.physics.calibration import register, registered

CONNECT_TIMEOUT_S = 3.0


def check_address(address: str) -> None:
    """Raise InputError unless something listens at the address (host:port or ray://host:port)."""
    if address in ("auto", "local"):
        return
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InputError(f"--ray {address!r}: expected HOST:PORT (a head node, e.g. 10.0.0.5:6379) or"
                         " ray://HOST:PORT (Ray Client, e.g. ray://10.0.0.5:10001)")
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as e:
        raise InputError(f"--ray {address}: no Ray cluster answers there ({e.strerror or e}); start one with"
                         " `ray start --head` or leave out the address for a local instance") from None


_QUIET: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
# Ray's switch for a one-machine instance: with clusters disabled its node address is the loopback one, so every
# service it starts (GCS, raylet, workers) listens on 127.0.0.1 only. Read when Ray is imported; set here first.
_LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def start_local(num_cpus: int | None = None) -> None:
    """Start a private Ray instance on this machine, bound to 127.0.0.1.

    `address="local"` always starts a new instance: an address Ray finds on its own (RAY_ADDRESS, or the
    `ray_current_cluster` record an earlier head left behind, even a killed one) is never waited on. Nothing listens
    beyond loopback: the node address is the loopback one (see _LOOPBACK_ENV)."""
    os.environ[_LOOPBACK_ENV] = "0"
    import ray
    from ray._private import ray_constants  # already imported with Ray: its switch was read before we set it

    ray_constants.ENABLE_RAY_CLUSTER = False
    ray.init(address="local", num_cpus=num_cpus, **_QUIET)


def ray_map(jobs: list[Job], address: str | None = None, num_cpus: int | None = None) -> Iterator[tuple[int, Any]]:
    """Evaluate jobs as Ray tasks, yielding (index, result) as they finish; shuts down what it started."""
    try:
        import ray
    except ImportError:
        raise InputError('--ray needs Ray: pip install -e ".[ray]" (or pip install "ray>=2.9")') from None
    if address is not None:
        check_address(address)
    import engine

    started = not ray.is_initialized()
    if started:
        try:
            if address is None or address == "local":
                start_local(num_cpus)
            else:
                ray.init(address=address, runtime_env={"py_modules": [engine]}, **_QUIET)
        except (ConnectionError, TimeoutError, RuntimeError, ValueError) as e:  # ValueError: ray:// without ray[client]
            raise InputError(f"--ray {address or 'local'}: could not connect ({str(e).splitlines()[0]})") from None
    try:
        task = ray.remote(_evaluate_with)
        profiles = registered()
        refs = {task.remote(profiles, job): i for i, job in enumerate(jobs)}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                yield refs[ref], ray.get(ref)
    finally:
        if started:
            ray.shutdown()


def _evaluate_with(profiles: dict[str, dict[str, Any]], job: Job) -> PointResult:
    """A Ray task: register the driver's --runtime-file profiles in this worker, then evaluate the point."""
    for name, section in profiles.items():
        register(name, section)
    return _evaluate_job(job)
