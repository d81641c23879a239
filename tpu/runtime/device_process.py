"""The child side of a `ProcessDevice`: ``python -m tpu.runtime.device_process``.

The parent names its listener, key and the device in the environment
(`ENV_ADDRESS`, `ENV_KEY`, `ENV_SPEC`). This process opens the device with
`tpu.driver.run`; `serve_device` (which, on a simulator, runs inside the
simulation process) connects back and answers messages until "close":

    ("load", key, model file bytes)      keep a compiled model
    ("run", job, key, chunks)            -> ("ok", job, [(outputs, profile)])
                                            or ("error", job, kind, message)

While it waits for a message a simulation stands still: the chip has
nothing to do, and simulated time does not move.
"""

import json
import os
import sys
import tempfile
from multiprocessing.connection import Client
from pathlib import Path

from .devices import ENV_ADDRESS, ENV_KEY, ENV_SPEC, _kind_of, run_job


async def serve_device(device):
    """`main` of the device: answer the parent's jobs until it says "close"."""
    from ..compiler.artifact import CompiledModel
    host, port = os.environ[ENV_ADDRESS].rsplit(":", 1)
    conn = Client((host, int(port)), authkey=bytes.fromhex(os.environ[ENV_KEY]))
    conn.send(("hello", os.getpid()))
    models = {}
    with tempfile.TemporaryDirectory() as scratch:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return "parent gone"
            if message[0] == "close":
                conn.close()
                return "closed"
            if message[0] == "load":
                _, key, data = message
                path = Path(scratch) / f"{key}.tpu"
                path.write_bytes(data)
                try:
                    models[key] = CompiledModel.load(path)
                except Exception as error:
                    models[key] = error
                continue
            _, job, key, chunks = message
            try:
                compiled = models[key]
                if isinstance(compiled, Exception):
                    raise RuntimeError(f"the compiled model could not be loaded: {compiled}")
                reply = ("ok", job, await run_job(device, compiled, chunks))
            except Exception as error:
                reply = ("error", job, _kind_of(error), f"{type(error).__name__}: {error}")
                if reply[2] == "chip":
                    # The driver aborted the chip; a reset leaves nothing of the job behind.
                    try:
                        await device.reset()
                    except Exception:
                        pass
            conn.send(reply)


def main():
    from ..config import TPUConfig
    from ..driver import run as driver_run
    # By its module's real name, not __main__'s: a simulation process finds
    # `main` by module and function name.
    from tpu.runtime.device_process import serve_device as main_of_device
    spec = json.loads(os.environ[ENV_SPEC])
    config = TPUConfig(**spec["config"])
    try:
        driver_run(main_of_device, backend=spec["backend"], config=config, **spec["options"])
    except Exception as error:
        print(f"{spec['name']}: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
