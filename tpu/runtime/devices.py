"""The pool's devices: one chip each, opened once and kept.

`LocalDevice` runs a backend inside this process (the golden model, a board
over its serial port): `tpu.driver.run` drives it on an event loop in a
thread of its own, and jobs reach that loop thread-safely. `ProcessDevice`
runs it in a child process (every RTL simulation, as simulations are
CPU-bound; the golden model when asked), which connects back to this
process and answers jobs over a `multiprocessing.connection`.

Both give the pool the same calls: `open()`, `execute(compiled, chunks,
timeout)`, `recover(kind)`, `close()`. `execute` raises `DeviceFailure`
when the device failed (``kind``: "fault" for a chip fault, "timeout",
"died" for a process that ended), and the request's own `ValueError` when
the input was wrong.
"""

import asyncio
import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Listener
from pathlib import Path


__all__ = ["DeviceFailure", "LocalDevice", "ProcessDevice", "model_bytes", "chip_totals",
           "ENV_ADDRESS", "ENV_KEY", "ENV_SPEC"]

ENV_ADDRESS = "TPU_RUNTIME_ADDRESS"
ENV_KEY = "TPU_RUNTIME_KEY"
ENV_SPEC = "TPU_RUNTIME_SPEC"


class DeviceFailure(Exception):
    """A device could not complete a job.

    kind : "fault" (the chip stopped with an error or the driver raised),
        "timeout" (no answer in time) or "died" (its process ended)
    """

    def __init__(self, kind, device, message):
        self.kind, self.device, self.message = kind, device, message
        super().__init__(f"{device}: {message}")


def model_bytes(compiled):
    """``(key, bytes)`` of a compiled model's saved file: what a device process loads."""
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "model.tpu"
        compiled.save(path)
        data = path.read_bytes()
    return hashlib.sha256(data).hexdigest()[:16], data


def chip_totals(results):
    """``(cycles, mxu_active, useful_macs)`` summed over the chip parts of a
    job's profiles: what the chips did for it."""
    cycles = active = macs = 0
    for _, profile in results:
        for step in profile or ():
            counters = step.get("counters") if isinstance(step, dict) else None
            if counters:
                cycles += int(counters.get("cycles", 0))
                active += int(counters.get("mxu_active", 0))
                macs += int(counters.get("useful_macs", 0))
    return cycles, active, macs


async def run_job(device, compiled, chunks):
    """Every chunk of a job on `device`: a list of ``(outputs, profile)``."""
    from ..compiler.chunks import run_chunks
    return await run_chunks(device, compiled, chunks)


def _kind_of(error):
    from ..driver import TpuError
    if isinstance(error, TpuError):
        return "chip"
    return "input" if isinstance(error, ValueError) else "other"


class LocalDevice:
    """A device driven in this process, on an event loop in its own thread."""

    def __init__(self, name, spec, config, arena_bytes):
        self.name, self.spec, self.config = name, spec, config
        self.arena_bytes = arena_bytes
        self._loop = self._device = self._stop = self._thread = None
        self._error = None

    def open(self, timeout=60.0):
        from ..driver import run as driver_run
        ready = threading.Event()
        options = dict(self.spec.options)
        if self.spec.backend == "golden":
            options.setdefault("open", {"arena_bytes": self.arena_bytes})
            options.setdefault("ram_bytes", max(16 << 20, 2 * self.arena_bytes))

        async def main(device):
            self._loop, self._device = asyncio.get_running_loop(), device
            self._stop = asyncio.Event()
            ready.set()
            await self._stop.wait()

        def drive():
            try:
                driver_run(main, backend=self.spec.backend, config=self.config, **options)
            except BaseException as error:          # reported by open() or the next job
                self._error = error
            finally:
                self._device = None
                ready.set()

        self._error = None
        self._thread = threading.Thread(target=drive, name=f"tpu-{self.name}", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise DeviceFailure("timeout", self.name, f"did not open within {timeout:g} s")
        if self._device is None:
            raise DeviceFailure("died", self.name, f"could not be opened: {self._error}")

    @property
    def pid(self):
        return os.getpid()

    def _call(self, coroutine, timeout):
        if self._device is None:
            coroutine.close()
            raise DeviceFailure("died", self.name, f"is not open ({self._error or 'closed'})")
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise DeviceFailure("timeout", self.name,
                                f"gave no answer within {timeout:g} s") from None

    def execute(self, compiled, chunks, timeout):
        from ..driver import TpuError
        try:
            return self._call(run_job(self._device, compiled, chunks), timeout)
        except TpuError as error:
            raise DeviceFailure("fault", self.name, str(error)) from error

    def recover(self, kind):
        """After a fault: reset the chip. After a timeout or a death: open it anew
        (a golden model stuck in a job cannot be stopped from outside; its
        thread is left and a new device takes its place)."""
        if kind == "fault" and self._device is not None:
            try:
                self._call(self._device.reset(), 30.0)
                return
            except Exception:
                pass
        self._shutdown(wait=kind != "timeout")
        self.open()

    def _shutdown(self, wait=True):
        loop, stop, thread = self._loop, self._stop, self._thread
        self._device = None
        if loop is not None and stop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:
                pass
        if wait and thread is not None:
            thread.join(10)

    def close(self):
        self._shutdown()

    def kill(self):
        """Testing: nothing to kill in this process."""
        raise NotImplementedError(f"{self.name} runs in this process; it has no process to kill")


class ProcessDevice:
    """A device in a child process of its own (`tpu.runtime.device_process`).

    The child opens the device with `tpu.driver.run` (for a simulator, the
    simulation process is the one that connects back) and serves jobs until
    it is told to close. Its process group is killed on a timeout, when it
    dies, and at `close`."""

    def __init__(self, name, spec, config, arena_bytes, log_dir):
        self.name, self.spec, self.config = name, spec, config
        self.arena_bytes = arena_bytes
        self.log_dir = Path(log_dir)
        self.proc = self.conn = None
        self.pid = None
        self._loaded = set()
        self._job = 0
        self._listener = None

    @property
    def log_path(self):
        return self.log_dir / f"{self.name.replace('#', '-')}.log"

    def open(self, timeout=None):
        if timeout is None:
            timeout = 60.0 if self.spec.backend == "golden" else 1800.0
        key = secrets.token_bytes(16)
        self._listener = Listener(("127.0.0.1", 0), authkey=key)
        options = dict(self.spec.options)
        if self.spec.backend == "golden":
            options.setdefault("open", {"arena_bytes": self.arena_bytes})
            options.setdefault("ram_bytes", max(16 << 20, 2 * self.arena_bytes))
        host, port = self._listener.address
        env = {**os.environ, ENV_ADDRESS: f"{host}:{port}", ENV_KEY: key.hex(),
               ENV_SPEC: json.dumps({"backend": self.spec.backend, "options": options,
                                     "config": self.config.to_dict(), "name": self.name})}
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "tpu.runtime.device_process"],
                                         env=env, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()
        accepted = {}

        def accept():
            try:
                accepted["conn"] = self._listener.accept()
            except Exception as error:              # closed below, or a bad key
                accepted["error"] = error
        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        deadline = time.monotonic() + timeout
        while thread.is_alive():
            thread.join(0.2)
            if self.proc.poll() is not None and thread.is_alive():
                self._listener.close()
                raise DeviceFailure("died", self.name, f"its process ended with status "
                                    f"{self.proc.returncode} before it opened the device; "
                                    f"{self._log_tail()}")
            if time.monotonic() > deadline and thread.is_alive():
                self._kill()
                raise DeviceFailure("timeout", self.name,
                                    f"did not open within {timeout:g} s; {self._log_tail()}")
        self._listener.close()
        if "conn" not in accepted:
            self._kill()
            raise DeviceFailure("died", self.name, f"did not connect: {accepted.get('error')}")
        self.conn = accepted["conn"]
        message = self._receive(30.0, "its greeting")
        if message[0] != "hello":
            self._kill()
            raise DeviceFailure("died", self.name, f"could not open the device: {message[-1]}")
        self.pid = message[1]
        self._loaded = set()

    def _log_tail(self, lines=5):
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()[-lines:]
        except OSError:
            return "no log"
        if not text:
            return f"its log ({self.log_path}) is empty"
        return f"its log ({self.log_path}) ends: " + " | ".join(text)

    def _receive(self, timeout, what):
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.conn.poll(0.1):
                    return self.conn.recv()
            except (EOFError, OSError):
                self._kill()
                raise DeviceFailure("died", self.name, f"its process ended while it was "
                                    f"waited for ({what}); {self._log_tail(2)}") from None
            if self.proc.poll() is not None:
                self._kill()
                raise DeviceFailure("died", self.name, f"its process ended with status "
                                    f"{self.proc.returncode} ({what})")
            if time.monotonic() > deadline:
                self._kill()
                raise DeviceFailure("timeout", self.name,
                                    f"gave no answer within {timeout:g} s ({what}); its process "
                                    f"was killed")

    def _send(self, message):
        try:
            self.conn.send(message)
        except (OSError, ValueError, AttributeError) as error:
            self._kill()
            raise DeviceFailure("died", self.name, f"cannot reach its process: {error}") from None

    def execute(self, compiled, chunks, timeout, model=None):
        """`model`: ``(key, bytes)`` of `compiled` (`model_bytes`), computed once by the pool."""
        if self.conn is None:
            raise DeviceFailure("died", self.name, "is not open")
        key, data = model or model_bytes(compiled)
        if key not in self._loaded:
            self._send(("load", key, data))
            self._loaded.add(key)
        self._job += 1
        self._send(("run", self._job, key, chunks))
        reply = self._receive(timeout, "a job")
        if reply[0] == "ok" and reply[1] == self._job:
            return reply[2]
        if reply[0] == "error":
            _, _, kind, message = reply
            if kind == "input":
                raise ValueError(message)
            raise DeviceFailure("fault", self.name, message)
        self._kill()
        raise DeviceFailure("died", self.name, f"answered out of turn: {reply[:2]!r}")

    def recover(self, kind):
        """After a fault the child has reset the chip itself; after a timeout or
        a death, a new process opens the device."""
        if kind == "fault" and self.conn is not None and self.proc.poll() is None:
            return
        self._kill()
        self.open()

    def kill(self, sig=signal.SIGKILL):
        """Send `sig` to the process that holds the chip (for tests of faults)."""
        os.kill(self.pid, sig)

    def _kill(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self.proc is not None:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        # The simulator the child started is in the same process group; it
        # may have set up its own, so it is killed by its pid too.
        if self.pid is not None and self.proc is not None and self.pid != self.proc.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self.conn is not None:
            self.conn.close()
        self.conn = None

    def close(self):
        if self.conn is not None and self.proc is not None and self.proc.poll() is None:
            try:
                self.conn.send(("close",))
                self.proc.wait(30)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        self._kill()
