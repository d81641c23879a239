"""The Device API under random sequences of calls (Hypothesis), checked against
a simple model of what must hold: buffers keep the bytes written to them
and never overlap, a freed buffer cannot be used, every run returns its own
result (also when several run at once), a job stopped by abort or reset
raises JobAborted, a call with a bad argument changes nothing, and the chip
is idle after every step.

The golden backend runs many sequences; the RTL a short profile (one or two
sequences per simulator), since each is a whole simulation.
"""

import json
import os
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from tpu import TPUConfig
from tpu.driver import ChipFault, JobAborted, TpuError, run
from tpu.selftest.checks import long_program, together
from tpu.isa import Halt, Rhm, Whm

from test_host_interface_rtl import NARROW


ARENA = 1 << 14
MAX_BYTES = 512

buffer_index = st.integers(0, 1 << 16)
copy = st.tuples(buffer_index, buffer_index, st.integers(1, 8)).map(list)
operations = st.one_of(
    st.tuples(st.just("alloc"), st.integers(1, MAX_BYTES)),
    st.tuples(st.just("write"), buffer_index, st.integers(0, MAX_BYTES), st.integers(0, MAX_BYTES),
              st.integers(0, 255)),
    st.tuples(st.just("read"), buffer_index),
    st.tuples(st.just("free"), buffer_index),
    st.tuples(st.just("copy"), st.lists(copy, min_size=1, max_size=3)),
    st.tuples(st.just("stop"), st.sampled_from(["abort", "reset"]), st.floats(0.05, 0.8)),
    st.tuples(st.just("busy"), st.sampled_from(["start", "submit", "fill", "run", "load_weights"])),
    st.tuples(st.just("bad"), st.integers(0, 1 << 16)),
    st.tuples(st.just("weights"), st.integers(0, 1 << 16), st.integers(0, 3), st.integers(0, 255)),
).map(list)
sequences = st.lists(operations, min_size=1, max_size=12)


class Model:
    """What the host's view of the device must be: live buffers and their bytes."""

    def __init__(self, device):
        self.device = device
        self.buffers = []        # every buffer allocated, live or freed
        self.live = {}           # id(buffer) -> bytes it must hold

    def pick(self, index):
        return self.buffers[index % len(self.buffers)] if self.buffers else None

    def live_with(self, index, nbytes):
        """A live buffer of at least `nbytes`, chosen by `index`, or None."""
        fits = [b for b in self.buffers if id(b) in self.live and b.size >= nbytes]
        return fits[index % len(fits)] if fits else None

    async def check(self, step):
        device = self.device
        spans = sorted((b.addr, b.end) for b in self.buffers if id(b) in self.live)
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert end <= start, f"after {step}: live buffers overlap: {spans}"
        for buffer in self.buffers:
            if id(buffer) in self.live:
                assert device.arena.addr <= buffer.addr and buffer.end <= device.arena.end
                assert device.read(buffer) == self.live[id(buffer)], \
                    f"after {step}: {buffer} does not hold the bytes last put there"
        status = await device.status()
        assert status.idle, f"after {step}: the chip is not idle: {status}"
        bad = await device.read_register("BAD_REQUESTS")
        assert bad == 0, f"after {step}: the chip refused {bad} requests"


def _copy_program(src, dst, rows):
    return [Rhm(ub=0, rows=rows, host=src.addr), Whm(ub=0, rows=rows, host=dst.addr), Halt()]


async def _expect(awaitable, error, words, step):
    try:
        await awaitable
    except error as raised:
        assert words in str(raised), f"{step}: {raised}"
        return raised
    raise AssertionError(f"{step}: expected {error.__name__} ({words})")


async def apply(model, step):
    """Do `step` on the device and the model; check the outcome."""
    device, cfg = model.device, model.device.config
    kind = step[0]
    if kind == "alloc":
        try:
            buffer = device.alloc(step[1])
        except TpuError as error:
            assert "no room" in str(error)
            assert sum(b.size for b in model.buffers if id(b) in model.live) + step[1] > ARENA // 4
            return
        # Bytes of its own, so that a copy that did not happen shows.
        data = random.Random(len(model.buffers)).randbytes(buffer.size)
        device.write(buffer, data)
        model.buffers.append(buffer)
        model.live[id(buffer)] = data
    elif kind in ("write", "read", "free"):
        buffer = model.pick(step[1])
        if buffer is None:
            return
        if id(buffer) not in model.live:
            call = {"write": lambda: device.write(buffer, b"x"), "read": lambda: device.read(buffer),
                    "free": lambda: device.free(buffer)}[kind]
            with pytest.raises(ValueError, match="already freed"):
                call()
            return
        if kind == "read":
            assert device.read(buffer) == model.live[id(buffer)]
        elif kind == "free":
            device.free(buffer)
            del model.live[id(buffer)]
        else:
            _, _, offset, n, seed = step
            data = random.Random(seed).randbytes(n)
            if offset + n > buffer.size:
                with pytest.raises(ValueError, match="do not fit"):
                    device.write(buffer, data, offset)
                return
            device.write(buffer, data, offset)
            old = model.live[id(buffer)]
            model.live[id(buffer)] = old[:offset] + data + old[offset + n:]
    elif kind == "copy":
        jobs = []
        for src_index, dst_index, rows in step[1]:
            src = model.live_with(src_index, rows * cfg.rows)
            dst = model.live_with(dst_index, rows * cfg.rows)
            if src is not None and dst is not None:
                jobs.append((src, dst, rows))
        outcomes = await together(*(device.run(_copy_program(s, d, r), timeout=1e-3)
                                    for s, d, r in jobs))
        for (src, dst, rows), (status, value) in zip(jobs, outcomes):
            assert status == "ok" and value.halted, f"{step}: a run gave {status} {value!r}"
            # The runs took turns in the order they were called.
            n = rows * cfg.rows
            model.live[id(dst)] = model.live[id(src)][:n] + model.live[id(dst)][n:]
    elif kind == "stop":
        _, how, fraction = step
        program = long_program(cfg, 4000)
        seconds = 4000 / device.link.clock_hz

        async def stop():
            while not (await device.status()).busy:
                await device.link.sleep(seconds / 100)
            await device.link.sleep(seconds * fraction)
            await (device.abort() if how == "abort" else device.reset())

        # The waiting run notices the stop at its next look at STATUS.
        recheck, device.irq_recheck = device.irq_recheck, seconds / 20
        try:
            (status, value), (stop_status, stop_value) = await together(
                device.run(program, timeout=1.0), stop())
        finally:
            device.irq_recheck = recheck
        assert stop_status == "ok", f"{step}: {how}() failed: {stop_value!r}"
        if status == "ok":
            assert value.halted, f"{step}: {value}"       # it ended before the stop
        else:
            assert isinstance(value, JobAborted) and value.by == how, f"{step}: {value!r}"
    elif kind == "busy":
        job = await device.start(long_program(cfg, 2000))
        bad = await device.read_register("BAD_REQUESTS")
        calls = {"start": lambda: device.start([Halt()]),
                 "submit": lambda: device.submit(device.arena.addr, 1),
                 "fill": lambda: device.fill(device.arena.addr, 0, 1),
                 "run": lambda: device.run([Halt()]),
                 "load_weights": lambda: device.load_weights([[[0] * cfg.cols] * cfg.rows])}
        await _expect(calls[step[1]](), TpuError, "busy", step)
        assert await device.read_register("BAD_REQUESTS") == bad
        await device.abort()
        await _expect(device.wait(job), JobAborted, "stopped by abort()", step)
    elif kind == "weights":
        # The first tile near either end of weight memory, sometimes past it.
        _, pick, n, seed = step
        tiles_total = cfg.weight_mem_tiles
        first = [0, 1, tiles_total - 3, tiles_total - 1, tiles_total, tiles_total + 1][pick % 6]
        tiles = np.frombuffer(random.Random(seed).randbytes(n * cfg.tile_bytes), np.int8).reshape(
            n, cfg.rows, cfg.cols)
        if first >= tiles_total or first + n > tiles_total:
            await _expect(device.load_weights(tiles, first, timeout=1e-3), ChipFault,
                          "WFILL_RANGE", step)
        else:
            result = await device.load_weights(tiles, first, timeout=1e-3)
            assert not result.halted and result.counters is None, f"{step}: {result}"
    elif kind == "bad":
        index = step[1]
        buffer = model.live_with(index, 1)
        calls = [
            (lambda: device.run([Halt()], timeout=float("nan")), ValueError),
            (lambda: device.run(None), TypeError),
            (lambda: device.submit(-1, 1), ValueError),
            (lambda: device.load_weights([[[0.5] * cfg.cols] * cfg.rows]), TypeError),
            (lambda: device.write_register("PROG_LEN", 1.5), TypeError),
        ]
        call, error = calls[index % len(calls)]
        with pytest.raises(error):
            await call()
        if buffer is not None:
            with pytest.raises(TypeError):
                device.write(buffer, 3)
    await model.check(step)


async def play(device, steps):
    """Apply `steps` in order; the device is left idle with its buffers freed."""
    model = Model(device)
    await model.check("opening")
    for step in steps:
        await apply(model, step)
    for buffer in model.buffers:
        if id(buffer) in model.live:
            device.free(buffer)
    return len(steps)


def _golden(steps):
    return run(lambda device: play(device, steps), backend="golden",
               config=TPUConfig(), open={"arena_bytes": ARENA})


# Shrunk examples Hypothesis found, kept.
@settings(max_examples=60, deadline=None)
@given(sequences)
@example([["alloc", 64], ["alloc", 64], ["copy", [[0, 1, 8], [1, 0, 8]]]])
@example([["alloc", 16], ["free", 0], ["free", 0], ["write", 0, 0, 1, 0]])
@example([["stop", "abort", 0.5], ["stop", "reset", 0.05], ["busy", "run"]])
@example([["weights", 4, 0, 0], ["weights", 2, 3, 1], ["weights", 3, 2, 2]])
def test_random_call_sequences_on_golden(steps):
    assert _golden(steps) == len(steps)


# ---------------------------------------------------------------------------------------
# The RTL: a few sequences, each one simulation


async def play_from_environment(device):
    """`play` the steps in TPU_DRIVER_STEPS (JSON): the simulation runs this in
    its own process."""
    return await play(device, json.loads(os.environ["TPU_DRIVER_STEPS"]))


RTL_STEPS = [["alloc", 64], ["alloc", 32], ["write", 0, 0, 64, 1], ["copy", [[0, 1, 8], [0, 1, 2]]],
             ["stop", "abort", 0.3], ["free", 1], ["write", 1, 0, 1, 0], ["busy", "fill"],
             ["alloc", 48], ["copy", [[0, 2, 4], [2, 0, 1], [0, 0, 3]]], ["stop", "reset", 0.5],
             ["bad", 3], ["weights", 2, 3, 5], ["weights", 3, 2, 6], ["read", 2]]


@pytest.mark.rtl
@settings(max_examples=1, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sequences)
@example(RTL_STEPS)
def test_random_call_sequences_on_rtl(simulator, steps):
    os.environ["TPU_DRIVER_STEPS"] = json.dumps(steps)
    try:
        assert run(play_from_environment, backend=simulator, config=NARROW) == len(steps)
    finally:
        del os.environ["TPU_DRIVER_STEPS"]
