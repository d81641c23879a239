"""Devices as Ray actors: the pool's chips spread over a Ray cluster.

``DevicePool("ray:golden:4")`` (or ``tpu serve --devices ray:verilator:2``)
makes each device a Ray actor, placed by Ray where there is room: the
actor opens the device once (a golden model inside the actor's process, a
simulation in a process the actor starts, a board on the actor's host)
and runs the pool's jobs. The pool, the batching and the HTTP endpoint stay
in the serving process; only the chips move. `ray.init()` joins the
cluster named by ``RAY_ADDRESS``, or starts a local instance.

A board's actor asks for the custom resource ``tpu-serial:PORT`` (declare
it on the host with the board: ``ray start --resources
'{"tpu-serial:/dev/ttyUSB1": 1}'``); a simulation's for one CPU.
"""

import os
import tempfile

from .devices import DeviceFailure, LocalDevice, ProcessDevice


__all__ = ["RayDevice", "actor_options"]


def actor_options(spec):
    """Ray's placement of the actor of `spec`: a CPU for a simulation, the
    board's resource for a serial port, a fraction of a CPU for a golden model."""
    if spec.backend == "serial":
        return {"num_cpus": 0, "resources": {f"tpu-serial:{spec.options['port']}": 1}}
    if spec.backend in ("icarus", "verilator"):
        return {"num_cpus": 1}
    return {"num_cpus": 0.25}


class DeviceActor:
    """The actor's side: one device, opened in the actor's process."""

    def __init__(self, name, spec, config, arena_bytes):
        if spec.process:
            self.device = ProcessDevice(name, spec, config, arena_bytes,
                                        tempfile.mkdtemp(prefix="tpu-ray-device-"))
        else:
            self.device = LocalDevice(name, spec, config, arena_bytes)
        self.models = {}

    def open(self):
        self.device.open()
        return os.getpid()

    def execute(self, key, data, chunks, timeout):
        from ..compiler.artifact import CompiledModel
        if data is not None:
            path = os.path.join(tempfile.mkdtemp(prefix="tpu-ray-model-"), "model.tpu")
            with open(path, "wb") as file:
                file.write(data)
            self.models[key] = (CompiledModel.load(path), (key, data))
        compiled, model = self.models[key]
        if isinstance(self.device, ProcessDevice):
            return self.device.execute(compiled, chunks, timeout, model)
        return self.device.execute(compiled, chunks, timeout)

    def recover(self, kind):
        self.device.recover(kind)

    def close(self):
        self.device.close()


class RayDevice:
    """The pool's side of a device in a Ray actor."""

    def __init__(self, name, spec, config, arena_bytes):
        self.name, self.spec, self.config = name, spec, config
        self.arena_bytes = arena_bytes
        self.actor = None
        self.pid = None
        self._loaded = set()

    def open(self, timeout=None):
        import ray
        if timeout is None:
            timeout = 120.0 if self.spec.backend == "golden" else 1800.0
        if not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
        from .specs import DeviceSpec
        local = DeviceSpec(self.spec.backend, self.spec.options, self.spec.process)
        options = {**actor_options(self.spec), **(self.spec.ray or {})}
        self.actor = ray.remote(DeviceActor).options(max_restarts=0, **options).remote(
            self.name, local, self.config, self.arena_bytes)
        self._loaded = set()
        try:
            self.pid = ray.get(self.actor.open.remote(), timeout=timeout)
        except Exception as error:
            self._kill()
            raise DeviceFailure("died", self.name, f"its Ray actor could not open the device: "
                                f"{_cause(error)}") from None

    def execute(self, compiled, chunks, timeout, model):
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
        if self.actor is None:
            raise DeviceFailure("died", self.name, "is not open")
        key, data = model
        ref = self.actor.execute.remote(key, None if key in self._loaded else data, chunks,
                                        timeout)
        self._loaded.add(key)
        try:
            return ray.get(ref, timeout=timeout + 30)
        except GetTimeoutError:
            self._kill()
            raise DeviceFailure("timeout", self.name, f"its Ray actor gave no answer within "
                                f"{timeout + 30:g} s; it was killed") from None
        except RayActorError as error:
            self._kill()
            raise DeviceFailure("died", self.name, f"its Ray actor died: "
                                f"{str(error).splitlines()[0]}") from None
        except RayTaskError as error:
            cause = _cause(error)
            if isinstance(cause, (DeviceFailure, ValueError)):
                raise cause from None
            raise DeviceFailure("fault", self.name, f"{type(cause).__name__}: {cause}") from None

    def recover(self, kind):
        import ray
        if kind == "fault" and self.actor is not None:
            try:
                ray.get(self.actor.recover.remote(kind), timeout=120)
                return
            except Exception:
                pass
        self._kill()
        self.open()

    def kill(self):
        """Kill the actor (for tests of faults)."""
        import ray
        ray.kill(self.actor, no_restart=True)

    def _kill(self):
        import ray
        if self.actor is not None:
            try:
                ray.kill(self.actor, no_restart=True)
            except Exception:
                pass
        self.actor = None

    def close(self):
        import ray
        if self.actor is not None:
            try:
                ray.get(self.actor.close.remote(), timeout=60)
            except Exception:
                pass
        self._kill()


def _cause(error):
    return getattr(error, "cause", None) or error
