"""`DevicePool`: several chips behind one queue of jobs.

::

    with DevicePool("golden:4") as pool:              # or "verilator:2", [DeviceSpec, ...]
        results = pool.run(compiled, chunks)          # data parallel over the devices
        future = pool.submit(compiled, [chunk])       # one job; a concurrent.futures.Future

Every device is opened once and kept. Each has a thread that takes the
oldest job it may run from the queue, so independent jobs run on different
devices at once and a batch cut into chunks (`run`) is spread over all of
them. When a device fails a job (a chip fault, no answer within the
timeout, its process died) it is reset or opened again and the job goes
back to the queue once, for another device if there is one; a second
failure, or a pool with no device left, fails the job's future with a
`PoolError` naming each attempt. A job is never lost: it ends with its
results or an error. A wrong input (`ValueError`) is the caller's and is
not retried.
"""

import collections
import itertools
import logging
import tempfile
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass

from ..config import TPUConfig
from .devices import DeviceFailure, LocalDevice, ProcessDevice, chip_totals, model_bytes
from .specs import DeviceSpec, parse_devices


__all__ = ["DevicePool", "PoolError", "DeviceStats", "DEFAULT_TIMEOUTS"]

log = logging.getLogger("tpu.runtime")

#: seconds one chunk may take, by backend, before its device counts as hung
DEFAULT_TIMEOUTS = {"golden": 60.0, "serial": 300.0, "icarus": 1800.0, "verilator": 900.0}
#: host memory of a simulated host (`tpu.compiler.session.DEFAULT_ARENA_BYTES`)
SIMULATED_ARENA = 1 << 20


class PoolError(RuntimeError):
    """A job the pool could not complete: every attempt failed, or no device is left."""


@dataclass
class DeviceStats:
    """What one device of the pool has done."""
    name: str
    backend: str
    alive: bool = True
    busy: bool = False
    jobs: int = 0
    chunks: int = 0
    failures: int = 0
    restarts: int = 0
    busy_seconds: float = 0.0
    cycles: int = 0
    mxu_active: int = 0
    useful_macs: int = 0


class _Job:
    __slots__ = ("compiled", "chunks", "future", "failures", "excluded", "model")

    def __init__(self, compiled, chunks, model):
        self.compiled, self.chunks, self.model = compiled, chunks, model
        self.future = Future()
        self.failures = []          # (device, message) of each failed attempt
        self.excluded = set()


def _as_specs(devices):
    if isinstance(devices, str):
        return parse_devices(devices)
    specs = []
    for item in devices:
        if isinstance(item, DeviceSpec):
            specs.append(item)
        elif isinstance(item, str):
            specs += parse_devices(item)
        else:
            raise TypeError(f"devices: expected a DeviceSpec or text like 'golden:2', not "
                            f"{item!r}")
    if not specs:
        raise ValueError("devices: the pool needs at least one device")
    return specs


class DevicePool:
    """Devices of any backends, shared by jobs.

    Parameters
    ----------
    devices : str or list of str / DeviceSpec
        ``"golden:4"``, ``"verilator:2"``, ``"serial:/dev/ttyUSB1,/dev/ttyUSB3"``,
        groups joined by ``+``, or `DeviceSpec` objects.
    config : TPUConfig
        The chip every device is (opening checks it).
    timeout : float or None
        Seconds a chunk may take before its device counts as hung (default
        by backend, `DEFAULT_TIMEOUTS`).
    retries : int
        Attempts on other devices after a failed one (default 1).
    arena_bytes : int
        Host memory of each golden device.
    open : bool
        Open every device now (else at `open()` or the first job).
    """

    def __init__(self, devices, config=None, *, timeout=None, retries=1, arena_bytes=8 << 20,
                 open=True):
        if config is not None and not isinstance(config, TPUConfig):
            raise TypeError(f"config must be a TPUConfig, not {config!r}")
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError(f"timeout must be a number of seconds > 0, not {timeout!r}")
        if not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be an int >= 0, not {retries!r}")
        self.config = config or TPUConfig()
        self.specs = _as_specs(devices)
        self.timeout = timeout
        self.retries = retries
        self.arena_bytes = arena_bytes
        self._log_dir = tempfile.TemporaryDirectory(prefix="tpu-devices-")
        counters = collections.Counter()
        self.devices = []
        for spec in self.specs:
            name = f"{spec.label}#{counters[spec.label]}"
            counters[spec.label] += 1
            args = (name, spec, self.config, arena_bytes)
            if spec.ray is not None:
                from .ray_devices import RayDevice
                self.devices.append(RayDevice(*args))
            elif spec.process:
                self.devices.append(ProcessDevice(*args, self._log_dir.name))
            else:
                self.devices.append(LocalDevice(*args))
        self.stats = {d.name: DeviceStats(d.name, d.spec.backend) for d in self.devices}
        self._cond = threading.Condition()
        self._queue = collections.deque()
        self._models = {}               # id(compiled) -> (compiled, (key, bytes))
        self._threads = []
        self._opened = False
        self._closed = False
        self.listeners = []             # callables(device name, job seconds, chunks, totals)
        if open:
            self.open()

    # Opening and closing -------------------------------------------------------------

    def open(self):
        """Open every device (in parallel); `PoolError` naming each that failed."""
        with self._cond:
            if self._opened:
                return self
            if self._closed:
                raise PoolError("the pool is closed")
            self._opened = True
        errors = {}

        def open_one(device):
            try:
                device.open()
            except Exception as error:
                errors[device.name] = error
        threads = [threading.Thread(target=open_one, args=(d,), daemon=True) for d in self.devices]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.close()
            raise PoolError("devices failed to open: " + "; ".join(
                f"{name}: {getattr(error, 'message', error)}" for name, error in errors.items()))
        for device in self.devices:
            thread = threading.Thread(target=self._serve, args=(device,), daemon=True,
                                      name=f"tpu-pool-{device.name}")
            thread.start()
            self._threads.append(thread)
        return self

    def close(self):
        """Fail what is queued, stop every device and its process."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            pending = list(self._queue)
            self._queue.clear()
            self._cond.notify_all()
        for job in pending:
            job.future.set_exception(PoolError("the pool was closed before the job ran"))
        for thread in self._threads:
            thread.join(60)
        for device in self.devices:
            try:
                device.close()
            except Exception as error:          # closing goes on for the others
                log.warning("%s: close failed: %s", device.name, error)
        self._log_dir.cleanup()

    def __enter__(self):
        return self.open()

    def __exit__(self, *exc):
        self.close()

    # Jobs ------------------------------------------------------------------------------

    @property
    def alive(self):
        return [d for d in self.devices if self.stats[d.name].alive]

    def arena_limit(self):
        """Host bytes a job may need on every device of the pool."""
        process_sims = [d for d in self.devices if d.spec.backend != "golden"]
        return SIMULATED_ARENA if process_sims else self.arena_bytes

    def _model(self, compiled):
        entry = self._models.get(id(compiled))
        if entry is None or entry[0] is not compiled:
            needs_bytes = any(not isinstance(d, LocalDevice) for d in self.devices)
            entry = (compiled, model_bytes(compiled) if needs_bytes else None)
            self._models[id(compiled)] = entry
        return entry[1]

    def submit(self, compiled, chunks):
        """Queue one job (chunks of the compiled batch, run in order on one
        device); a `Future` of ``[(outputs, profile), ...]``."""
        from ..compiler.chunks import host_bytes
        if compiled.config != self.config:
            raise ValueError(f"the model was compiled for a {compiled.config.name} chip "
                             f"{compiled.config}, the pool's devices are {self.config}")
        if not chunks:
            raise ValueError("a job needs at least one chunk")
        needed = host_bytes(compiled)
        if needed > self.arena_limit():
            raise ValueError(f"one chunk of batch {compiled.batch} needs {needed} bytes of host "
                             f"memory, more than the devices' {self.arena_limit()}: compile a "
                             f"smaller batch")
        if not self._opened:
            self.open()
        job = _Job(compiled, list(chunks), self._model(compiled))
        with self._cond:
            if self._closed:
                raise PoolError("the pool is closed")
            if not self.alive:
                raise PoolError("no device of the pool is working: "
                                + self._dead_reasons())
            self._queue.append(job)
            self._cond.notify_all()
        return job.future

    def run(self, compiled, chunks):
        """Every chunk, spread over the devices in contiguous groups (data
        parallel); the results in the chunks' order."""
        chunks = list(chunks)
        groups = max(1, min(len(chunks), len(self.alive) or 1))
        size = -(-len(chunks) // groups)
        futures = [self.submit(compiled, chunks[i:i + size]) for i in range(0, len(chunks), size)]
        return list(itertools.chain.from_iterable(f.result() for f in futures))

    def _dead_reasons(self):
        return "; ".join(f"{d.name}: {getattr(d, 'dead_reason', 'down')}" for d in self.devices
                         if not self.stats[d.name].alive) or "none opened"

    def _takes(self, device, job):
        """Whether `device` may run `job`: not one it failed on, unless no
        other working device is left."""
        if device.name not in job.excluded:
            return True
        return all(d.name in job.excluded for d in self.alive)

    def _next_job(self, device):
        with self._cond:
            while True:
                if self._closed:
                    return None
                for job in self._queue:
                    if self._takes(device, job):
                        self._queue.remove(job)
                        self.stats[device.name].busy = True
                        return job
                self._cond.wait(1.0)

    def _timeout(self, device, job):
        base = self.timeout or DEFAULT_TIMEOUTS.get(device.spec.backend, 600.0)
        return base * len(job.chunks)

    def _serve(self, device):
        stats = self.stats[device.name]
        while True:
            job = self._next_job(device)
            if job is None:
                return
            started = time.monotonic()
            try:
                if isinstance(device, LocalDevice):
                    results = device.execute(job.compiled, job.chunks, self._timeout(device, job))
                else:
                    results = device.execute(job.compiled, job.chunks,
                                             self._timeout(device, job), job.model)
            except ValueError as error:
                self._finish(device, job, started, error=error)
                continue
            except Exception as error:
                failure = error if isinstance(error, DeviceFailure) else \
                    DeviceFailure("fault", device.name, f"{type(error).__name__}: {error}")
                self._failed(device, job, started, failure)
                if not stats.alive:
                    return
                continue
            self._finish(device, job, started, results=results)

    def _finish(self, device, job, started, results=None, error=None):
        seconds = time.monotonic() - started
        stats = self.stats[device.name]
        totals = chip_totals(results) if results is not None else (0, 0, 0)
        with self._cond:
            stats.busy = False
            stats.busy_seconds += seconds
            if results is not None:
                stats.jobs += 1
                stats.chunks += len(job.chunks)
                stats.cycles += totals[0]
                stats.mxu_active += totals[1]
                stats.useful_macs += totals[2]
        for listener in self.listeners:
            listener(device.name, seconds, len(job.chunks), totals)
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(results)

    def _failed(self, device, job, started, failure):
        stats = self.stats[device.name]
        log.warning("%s failed a job (%s): %s", device.name, failure.kind, failure.message)
        with self._cond:
            stats.busy = False
            stats.busy_seconds += time.monotonic() - started
            stats.failures += 1
        job.failures.append((device.name, failure.message))
        job.excluded.add(device.name)
        if self._closed:
            job.future.set_exception(PoolError(f"the pool was closed while {device.name} "
                                               f"failed the job: {failure.message}"))
            return
        # The device comes back first, so a pool of one retries on it.
        try:
            device.recover(failure.kind)
            if failure.kind != "fault":
                with self._cond:
                    stats.restarts += 1
        except Exception as error:
            log.error("%s could not be recovered: %s", device.name, error)
            device.dead_reason = f"failed ({failure.message}) and could not be restarted: {error}"
            with self._cond:
                stats.alive = False
        with self._cond:
            retry = len(job.failures) <= self.retries and self.alive and not self._closed
            if retry:
                self._queue.appendleft(job)
                self._cond.notify_all()
            orphans = []
            if not self.alive:
                orphans, self._queue = list(self._queue), collections.deque()
        if not retry:
            attempts = "; then ".join(f"on {name}: {message}" for name, message in job.failures)
            why = "" if self.alive else \
                f" (no device of the pool is left working: {self._dead_reasons()})"
            job.future.set_exception(PoolError(f"the job failed{why}: {attempts}"))
        for orphan in orphans:
            orphan.future.set_exception(PoolError(
                "no device of the pool is left working: " + self._dead_reasons()))
