"""`tpu exec`: run one program on a chip through the host driver.

The program's host addresses (RHM, WHM) and those of ``--input`` and
``--output`` are offsets into one host buffer that `execute` allocates in the
driver's DMA window; the buffer's address is added to every RHM and WHM
before the run, so a program is written once for every backend.
"""

import dataclasses
import os
import pickle
import tempfile

import numpy as np


__all__ = ["ExecError", "load_program", "execute", "exec_job", "ARENA_BYTES"]

#: The driver's host arena (`Device.open`'s default, which the simulation
#: backends use): the host buffer, the program and the weights share it.
ARENA_BYTES = 1 << 20
_ALIGN = 64


class ExecError(ValueError):
    """A program or its data that `tpu exec` cannot run (exit status 2)."""


def load_program(path, data, config):
    """The bytes of the program in file `path` (its contents `data`): assembly
    for ``.s``/``.asm`` (or any other name whose contents are text), else
    binary."""
    from .asm import AsmError, assemble
    from .isa import INSTRUCTION_BYTES
    suffix = path.suffix.lower()
    is_text = suffix in (".s", ".asm")
    if not is_text and suffix != ".bin":
        try:
            is_text = data.decode("utf-8").isprintable() or b"\n" in data
        except UnicodeDecodeError:
            is_text = False
    if is_text:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ExecError(f"{path}: not UTF-8 text (offset {error.start}); a binary program "
                            f"is named .bin") from None
        try:
            code = assemble(text, filename=str(path), config=config)
        except (AsmError, ValueError, OverflowError, RecursionError) as error:
            message = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise ExecError(message if isinstance(error, AsmError) else f"{path}: {message}") \
                from None
    else:
        code = bytes(data)
        if len(code) % INSTRUCTION_BYTES:
            raise ExecError(f"{path}: {len(code)} bytes is not a whole number of "
                            f"{INSTRUCTION_BYTES}-byte instructions")
    if not code:
        raise ExecError(f"{path} holds no instructions")
    return code


def _host_extents(code, config):
    """(offset, nbytes) of every RHM and WHM of `code`."""
    from .isa import INSTRUCTION_BYTES, IllegalInstruction, Rhm, Whm, decode
    for i in range(0, len(code), INSTRUCTION_BYTES):
        try:
            instruction = decode(code[i:i + INSTRUCTION_BYTES])
        except IllegalInstruction:
            continue
        if isinstance(instruction, (Rhm, Whm)):
            yield instruction.host, instruction.rows * config.rows


def relocate(code, base):
    """`code` with `base` added to the host address of every RHM and WHM
    (wrapping at 2**64, as the field does); illegal words stay as they are."""
    from .isa import INSTRUCTION_BYTES, IllegalInstruction, Rhm, Whm, decode
    out = bytearray()
    for i in range(0, len(code), INSTRUCTION_BYTES):
        word = code[i:i + INSTRUCTION_BYTES]
        try:
            instruction = decode(word)
        except IllegalInstruction:
            out += word
            continue
        if isinstance(instruction, (Rhm, Whm)):
            word = dataclasses.replace(instruction,
                                       host=(instruction.host + base) % (1 << 64)).encode()
        out += word
    return bytes(out)


def _buffer_bytes(code, config, inputs, outputs):
    """Bytes of host buffer the run needs: every input, output and in-arena DMA."""
    ends = [addr + len(data) for addr, data in inputs] + [addr + n for addr, n in outputs]
    ends += [host + n for host, n in _host_extents(code, config) if host + n <= ARENA_BYTES]
    need = max(ends, default=0)
    return max(_ALIGN, -(-need // _ALIGN) * _ALIGN)


def execute(code, config, *, backend="golden", inputs=(), outputs=(), weights=None, seed=1,
            timeout=0.1, waves=None):
    """Run `code` on `backend`; a dict: halted, fault (None or its message),
    int_codes, counters, elapsed (link seconds), outputs (bytes, one per
    ``(offset, nbytes)`` of `outputs`).

    `waves` (a simulation backend only) is a file for the run's waveforms.
    Raises `ExecError` for data that cannot run at all (the chip's own
    faults are in the result).
    """
    from .driver import run
    tile = config.tile_bytes
    if weights is not None:
        if len(weights) % tile:
            raise ExecError(f"the weights are {len(weights)} bytes, not a whole number of "
                            f"{config.rows}x{config.cols} tiles ({tile} bytes each)")
        if len(weights) // tile > config.weight_mem_tiles:
            raise ExecError(f"the weights are {len(weights) // tile} tiles; weight memory holds "
                            f"{config.weight_mem_tiles}")
    buffer = _buffer_bytes(code, config, inputs, outputs)
    need = buffer + len(code) + len(weights or b"") + 3 * _ALIGN
    if need > ARENA_BYTES:
        raise ExecError(f"the run needs {need} bytes of host memory (buffer {buffer}, program "
                        f"{len(code)}, weights {len(weights or b'')}); the driver's host arena "
                        f"holds {ARENA_BYTES}")
    spec = {"code": code, "buffer": buffer, "inputs": list(inputs), "outputs": list(outputs),
            "weights": weights, "timeout": timeout}
    options = {"seed": seed} if backend != "golden" else {}
    if waves is not None:
        options["waves"] = waves
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "job.pickle")
        with open(path, "wb") as file:
            pickle.dump(spec, file)
        # The simulation backends run exec_job in the simulator's process,
        # which inherits the environment.
        before = os.environ.get("TPU_EXEC_JOB")
        os.environ["TPU_EXEC_JOB"] = path
        try:
            return run(exec_job, backend=backend, config=config, **options)
        finally:
            if before is None:
                del os.environ["TPU_EXEC_JOB"]
            else:
                os.environ["TPU_EXEC_JOB"] = before


async def exec_job(device):
    """The driver side of `execute`: the job described by the file ``TPU_EXEC_JOB`` names."""
    from .driver import ChipFault, DeviceTimeout
    with open(os.environ["TPU_EXEC_JOB"], "rb") as file:
        spec = pickle.load(file)
    cfg = device.config
    if spec["weights"]:
        tiles = np.frombuffer(spec["weights"], dtype=np.int8).reshape(-1, cfg.rows, cfg.cols)
        await device.load_weights(tiles)
    buffer = device.alloc(spec["buffer"])
    for addr, data in spec["inputs"]:
        device.write(buffer, data, offset=addr)
    result = {"halted": False, "fault": None, "int_codes": [], "counters": None, "elapsed": 0.0}
    try:
        run = await device.run(relocate(spec["code"], buffer.addr), timeout=spec["timeout"])
        result.update(halted=run.halted, int_codes=list(run.int_codes), counters=run.counters,
                      elapsed=run.elapsed)
    except ChipFault as error:
        result.update(fault=str(error), counters=error.counters)
    except DeviceTimeout as error:
        result.update(fault=f"timeout: {error}", counters=error.counters)
    result["outputs"] = [device.read(buffer, n, offset=addr) for addr, n in spec["outputs"]]
    return result
