"""cocotb testbench: the matrix part (`SerialMatrixPart`) on its UART pins,
driven by the host's `MatrixPart` over the driver's `SerialLink` and
cocotbext-uart, against the matrix engine's golden model.

``random_matmuls`` writes random weight tiles and activation rows, queues
tiles and runs multiplies of random length, place and flags, with random
idle gaps inside the host's frames and, at ``TPU_SERIAL_FRAME_RATE``, frames
damaged, cut short or after garbage (`NoisyTransport`); every accumulator
row it touched must equal the model's. ``refused`` checks the commands the
part must refuse, the error and link-error LEDs, and the damaged frames it
must never act on. ``power_up`` starts the part with no reset, as an FPGA
starts, and checks that its LEDs and UART line are never X or Z.

The part's UART divisor is ``TPU_PART_DIVISOR`` (4 unless told).
"""

import os
import random
import warnings
from collections import deque

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import Event, FallingEdge, RisingEdge, Timer

from ...driver.matrix_part import MatrixPart, MatrixPartError
from ...driver.matrix_part_registers import MATRIX_PART_MAGIC, MatrixPartRegister as R, MatrixPartStatus
from ...driver.serial_framing import Kind, encode_frame
from ...driver.serial_link import SerialLink
from ...driver.tlp_bytes import memory_read, memory_write
from ..harness import config_from_env
from ..host.serial_host import CLOCK_NS, NoisyTransport, UartTransport
from ...models.matrix_engine_model import MatMul, MatrixEngineModel


# cocotbext-uart sets its line with an API cocotb 2 deprecates.
warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"cocotbext\.")


def _seed():
    return int(os.environ.get("TPU_SEED", "1"))


class IdleGapTransport:
    """`inner` (a `UartTransport`) with the line left idle for a random while
    (up to `max_gap` byte times) at random places inside and between the
    frames written, as a host's USB and operating system do."""

    def __init__(self, inner, rng, *, byte_seconds, max_gap=4, rate=0.1):
        self.inner = inner
        self.rng = rng
        self.byte_seconds = byte_seconds
        self.max_gap = max_gap
        self.rate = rate
        self.gaps = 0
        self._chunks = deque()
        self._more = Event()
        cocotb.start_soon(self._send())

    def write(self, data):
        start = 0
        for at in range(1, len(data)):
            if self.rng.random() < self.rate:
                self._chunks.append(bytes(data[start:at]))
                start = at
        self._chunks.append(bytes(data[start:]))
        self._more.set()

    async def _send(self):
        while True:
            if not self._chunks:
                self._more.clear()
                await self._more.wait()
                continue
            self.inner.write(self._chunks.popleft())
            await self.inner.source.wait()
            if self._chunks:
                self.gaps += 1
                await Timer(max(1, round(self.rng.uniform(0.1, self.max_gap) * self.byte_seconds * 1e9)),
                            "ns")

    async def read(self, timeout):
        return await self.inner.read(timeout)

    def time(self):
        return self.inner.time()

    async def sleep(self, seconds):
        await self.inner.sleep(seconds)

    def __repr__(self):
        return f"{self.inner!r} with idle gaps"


def _divisor():
    """Clock cycles per UART bit the part was generated with (``TPU_PART_DIVISOR``, 4 unless told)."""
    return int(os.environ.get("TPU_PART_DIVISOR", "4"))


def _link(dut, config, *, seed, gaps=True, frame_rate=0.0, byte_rate=0.0):
    """Start the clock and return a `SerialLink` over cocotbext-uart on the part's pins."""
    cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
    baud = 1e9 / (CLOCK_NS * _divisor())
    rng = random.Random(seed)
    transport = UartTransport(dut, baud)
    if gaps:
        transport = IdleGapTransport(transport, rng, byte_seconds=10 / baud)
    if frame_rate or byte_rate:
        transport = NoisyTransport(transport, rng, frame_rate=frame_rate, byte_rate=byte_rate)
    return SerialLink(transport, config, baudrate=baud, clock_hz=1e9 / CLOCK_NS, host_latency=20e-6,
                      read_timeout=5e-3 * _divisor() / 4, retries=32, completion_bytes=64)


async def open_part(dut, config, *, seed, **options):
    """Start the clock, reset the part, and return (MatrixPart, SerialLink)
    over cocotbext-uart (`options` as for `_link`)."""
    link = _link(dut, config, seed=seed, **options)
    dut.rst.value = 1
    for _ in range(4):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    return await MatrixPart.open(link, config), link


@cocotb.test(timeout_time=40, timeout_unit="ms")
async def random_matmuls(dut):
    config = config_from_env()
    seed = _seed()
    rng = np.random.default_rng(seed)
    frame_rate = float(os.environ.get("TPU_SERIAL_FRAME_RATE", "0"))
    part, link = await open_part(dut, config, seed=seed, frame_rate=frame_rate,
                                 byte_rate=frame_rate / 50)
    dut._log.info(f"config {config.name}, seed {seed} (replay with TPU_SEED={seed})")
    rows, cols = config.rows, config.cols
    model = MatrixEngineModel(config)
    weight_memory = np.zeros((config.weight_mem_tiles, rows, cols), dtype=np.int64)
    ub = np.zeros((config.ub_rows, rows), dtype=np.int64)
    touched = set()
    written = set()     # weight tiles given random weights
    queued = 0
    ops = int(os.environ.get("TPU_PART_OPS", "5"))

    for op in range(ops):
        # New weights into a tile or two, then maybe queue some.
        for _ in range(int(rng.integers(1, 3))):
            tile = int(rng.integers(config.weight_mem_tiles))
            weight_memory[tile] = rng.integers(-128, 128, size=(rows, cols))
            await part.write_tile(tile, weight_memory[tile])
            written.add(tile)
        if queued == 0 or rng.random() < 0.4:
            room = config.weight_fifo_tiles + 2 - queued
            if room:
                count = int(rng.integers(1, min(room, 2) + 1))
                first = int(rng.integers(config.weight_mem_tiles - count + 1))
                # An all-zero tile multiplies any rows to zero, so that the
                # rows read from the UB would go unchecked: write it first.
                for t in sorted(set(range(first, first + count)) - written):
                    weight_memory[t] = rng.integers(-128, 128, size=(rows, cols))
                    await part.write_tile(t, weight_memory[t])
                    written.add(t)
                await part.load(first, count)
                for t in range(first, first + count):
                    model.push_tile(weight_memory[t])
                queued += count
        # Activation rows and a multiply of them.
        batch = int(rng.integers(2 if op == 0 else 1, 6))
        unsigned = bool(rng.random() < 0.5)
        x = rng.integers(0, 256, size=(batch, rows)) if unsigned else \
            rng.integers(-128, 128, size=(batch, rows))
        ub_addr = int(rng.integers(config.ub_rows - batch + 1))
        if op == 0:     # rows at odd and even addresses, whatever the draw
            ub_addr |= 1 if ub_addr + batch < config.ub_rows else 0
        ub[ub_addr:ub_addr + batch] = x
        await part.write_rows(ub_addr, x)
        acc_addr = int(rng.integers(config.acc_rows - batch + 1))
        switch = model.weights is None or (queued > 0 and rng.random() < 0.7)
        accumulate = bool(rng.random() < 0.5)
        dut._log.info(f"op {op}: {batch} rows at UB {ub_addr} into acc {acc_addr}, "
                      f"switch {switch}, accumulate {accumulate}, unsigned {unsigned}")
        await part.matmul(ub_addr, batch, acc_addr, accumulate=accumulate, unsigned=unsigned,
                          switch=switch)
        model.matmul(MatMul(x=ub[ub_addr:ub_addr + batch], acc_addr=acc_addr, accumulate=accumulate,
                            unsigned=unsigned, switch=switch))
        queued -= switch
        touched.update(range(acc_addr, acc_addr + batch))
        if ops >= 4 and op == ops // 2:
            await _compare(part, model, touched, seed, dut)
    await _compare(part, model, touched, seed, dut)
    status, tiles = await part.status()
    assert status == MatrixPartStatus(0) and tiles == queued, (status, tiles, queued)
    cycles = await part.cycles()
    dut._log.info(f"busy {cycles} cycles; link {link.stats}; "
                  f"gaps {getattr(link.transport, 'gaps', getattr(getattr(link.transport, 'inner', None), 'gaps', 0))}; "
                  f"injected {getattr(link.transport, 'faults', {})}")
    if frame_rate:
        # A short run can draw no damage at all: read on until a frame has
        # been damaged (and recovered from), so every run checks recovery.
        for _ in range(300):
            if sum(link.transport.faults.values()):
                break
            assert await part.status() == (MatrixPartStatus(0), queued)
        assert sum(link.transport.faults.values()) > 0, f"no fault was injected (seed {seed})"


async def _compare(part, model, touched, seed, dut):
    for start, count in _runs(sorted(touched)):
        got = await part.read_accumulators(start, count)
        want = model.acc[start:start + count]
        assert np.array_equal(got, want), (f"accumulator rows {start}..{start + count - 1} are\n{got}\n"
                                           f"the model's are\n{want}\n(seed {seed})")
    dut._log.info(f"{len(touched)} accumulator rows equal the model's")


def _runs(addresses):
    """Consecutive runs of sorted `addresses`, as (first, count)."""
    runs = []
    for a in addresses:
        if runs and runs[-1][0] + runs[-1][1] == a:
            runs[-1][1] += 1
        else:
            runs.append([a, 1])
    return runs


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def refused(dut):
    """Commands that would hang or misuse the engine are refused with
    STATUS.ERROR (and the error LED) and do nothing; damaged frames never
    act (and light the link-error LED); a too-long write, a partial write
    and a read outside the registers are not obeyed."""
    config = config_from_env()
    seed = _seed()
    part, link = await open_part(dut, config, seed=seed, gaps=False)
    rows, cols = config.rows, config.cols

    async def refuses(call, what):
        try:
            await call
        except MatrixPartError:
            return
        raise AssertionError(f"{what} was not refused (seed {seed})")

    await refuses(part.matmul(0, 1, 0), "a multiply before any tile")
    await refuses(part.matmul(0, 1, 0, switch=True), "a switch with no tile queued")
    await refuses(part.load(config.weight_mem_tiles - 1, 2), "a LOAD past the last tile")
    await refuses(part.load(0, config.weight_fifo_tiles + 3), "a LOAD of more tiles than fit")
    status, tiles = await part.status()
    assert status == MatrixPartStatus(0) and tiles == 0, (status, tiles)

    # Damaged frames of a LOAD that would be refused: acted on, it would set ERROR.
    seq = link._tx_seq

    def frame(offset, value, **options):
        return bytearray(encode_frame(Kind.TLP, seq, memory_write(offset, value.to_bytes(4, "little"),
                                                                  **options)))

    bad_load = config.weight_mem_tiles - 1 | 2 << 16
    flipped = frame(R.LOAD, bad_load)
    flipped[-6] ^= 0x10
    wrong_crc = frame(R.LOAD, bad_load)
    wrong_crc[-2] ^= 0x01
    lost = frame(R.LOAD, bad_load)
    del lost[8]
    for note, data in [("flipped bit", flipped), ("wrong CRC", wrong_crc), ("lost byte", lost),
                       ("cut short", frame(R.LOAD, bad_load)[:-3]),
                       ("garbage", b"\x7e\x12\x7d" + frame(R.LOAD, bad_load)[:-1])]:
        link.transport.write(data)
        await link.sleep(30e-6)
        status, _ = await part.status()
        assert not status & MatrixPartStatus.ERROR, f"a damaged frame ({note}) acted (seed {seed})"
    assert dut.link_error.value == 1, "the link-error LED is off after damaged frames"
    # The same frame undamaged acts: the damage, not the command, kept it out.
    # (The link's next sequence bit is still `seq`: none of those was taken.)
    await link.write32(R.LOAD, bad_load)
    status, _ = await part.status()
    assert status & MatrixPartStatus.ERROR, "the good frame did not act"
    assert dut.error.value == 1, "the error LED is off while STATUS.ERROR is set"
    await part.clear_error()
    assert dut.error.value == 0, "the error LED is still on after STATUS.ERROR was cleared"

    # Writes the target must not obey: two words, one byte enable missing,
    # outside the 4 KiB of registers; a read outside answers UR.
    w = np.arange(rows * cols).reshape(rows, cols) - 5
    await part.write_tile(0, w)
    await part.load(0)
    x = np.arange(3 * rows).reshape(3, rows) - 4
    await part.write_rows(0, x)
    await link.write32(R.MM_SRC, 0)
    await link.write32(R.MM_COUNT, 1)
    await link._send(memory_write(R.MM_SRC, (1).to_bytes(4, "little") * 2), 1e-3)
    await link._send(memory_write(R.MM_COUNT, (3).to_bytes(4, "little"), first_be=0x7), 1e-3)
    await link._send(memory_write(0x1000 + R.MM_COUNT, (2).to_bytes(4, "little")), 1e-3)
    await link.write32(R.MM_GO, 4 | 1 << 18)
    await part.check("the multiply")
    got = await part.read_accumulators(4, 1)
    assert np.array_equal(got[0], x[0] @ w), (got, x[0] @ w)
    assert np.array_equal(await part.read_accumulators(5, 1), np.zeros((1, cols))), \
        "a write the part should have dropped was obeyed"
    assert await link.read32(0xFFC) == 0, "an unused register does not read as 0"
    tag = 7
    await link._send(memory_read(0x1_0000_0000, 1, tag=tag), 1e-3)
    assert await link._pump(lambda: tag in link._completions, 1e-3), "no completion for a read outside"
    assert link._completions.pop(tag).status == 1, "a read outside the registers did not answer UR"
    for _ in range(10):
        await RisingEdge(dut.clk)


#: The outputs a board shows: its LEDs and the UART line to the host.
BOARD_OUTPUTS = ("busy", "error", "link_error", "tx")


async def _watch_outputs(dut):
    """Fail the test at the first falling clock edge where a board output is
    neither 0 nor 1."""
    cycle = 0
    while True:
        await FallingEdge(dut.clk)
        for name in BOARD_OUTPUTS:
            value = getattr(dut, name).value
            assert value.is_resolvable, f"the {name} output is {value} in cycle {cycle} after power-up"
        cycle += 1


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def power_up(dut):
    """Started as an FPGA starts, with no reset pulse (``rst`` held low, every
    flip-flop at its initial value), the board outputs are 0 or 1 from the
    first cycle on, idle for ``TPU_PART_IDLE`` cycles (the LEDs off, the
    UART line high) and while the host reads the part's ID."""
    config = config_from_env()
    seed = _seed()
    dut.rst.value = 0
    link = _link(dut, config, seed=seed, gaps=False)
    cocotb.start_soon(_watch_outputs(dut))
    idle = int(os.environ.get("TPU_PART_IDLE", "3000"))
    for _ in range(idle):
        await RisingEdge(dut.clk)
    assert (dut.busy.value, dut.error.value, dut.link_error.value, dut.tx.value) == (0, 0, 0, 1), \
        "an idle part's LEDs are not off or its UART line is not idle"
    ident = await link.read32(R.ID)
    assert ident == MATRIX_PART_MAGIC << 16 | config.rows << 8 | config.cols, f"ID 0x{ident:08x}"
    await FallingEdge(dut.clk)
    dut._log.info(f"board outputs defined for {idle} idle cycles and the link's first frames")
