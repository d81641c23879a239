"""The narrow host protocol's chip side alone (`NarrowLink` with `NarrowReader`
and `NarrowWriter`), in Amaranth's simulator: read jobs answered in random
pieces come out as the host memory's bytes, write jobs go out as WRITE
messages, register messages reach the register port, with random idle
cycles and backpressure on every stream."""

import random

import pytest
from amaranth import Fragment, Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from conftest import base_seed
from tpu import TPUConfig
from tpu.driver.narrow_messages import MessageKind, encode, parse
from tpu.hdl.narrow_link import NarrowLink
from tpu.hdl.narrow_reader import NarrowReader
from tpu.hdl.narrow_writer import NarrowWriter
from tpu.host_registers import HostError


CONFIG = TPUConfig(rows=2, cols=2, link_dw=1, read_tags=1, serial_host=1, narrow_host=1,
                   host_addr_bits=32, max_payload=128, max_read_request=128, cpl_timeout=3000)


def _words(raw):
    """A message's link words: header words big-endian, data little-endian."""
    return ([int.from_bytes(raw[i:i + 4], "big") for i in range(0, 12, 4)] +
            [int.from_bytes(raw[i:i + 4], "little") for i in range(12, len(raw), 4)])


def _raw(words):
    return (b"".join(w.to_bytes(4, "big") for w in words[:3]) +
            b"".join(w.to_bytes(4, "little") for w in words[3:]))


class Bench:
    """The link, reader and writer wired as `HostInterface` wires them, a
    host that answers READ_REQs from `memory` in random pieces, and a
    register port that answers a read with its offset times 3."""

    def __init__(self, seed, memory_base=0x1000, memory_bytes=4096):
        self.rng = random.Random(seed)
        self.base = memory_base
        self.memory = bytearray(self.rng.randbytes(memory_bytes))
        m = Module()
        m.submodules.link = self.link = NarrowLink(CONFIG)
        m.submodules.reader = self.reader = NarrowReader(CONFIG)
        m.submodules.writer = self.writer = NarrowWriter(CONFIG)
        link, reader, writer = self.link, self.reader, self.writer
        wiring.connect(m, reader.request, link.read_request)
        wiring.connect(m, link.read_answer, reader.answer)
        wiring.connect(m, link.read_words, reader.words)
        wiring.connect(m, writer.request, link.write_request)
        wiring.connect(m, writer.words, link.write_words)
        self.sim = Simulator(m)
        self.sim.add_clock(1e-8)
        self.to_chip = []           # messages (raw bytes) for the host to send
        self.from_chip = []         # messages the chip sent (parsed)
        self.accesses = []          # (write, offset, value) at the register port
        self.delivered = []         # (bytes, last, channel) beats of the reader
        self.malformed = 0
        self.answers = "pieces"     # how the host answers a READ_REQ

    def idle(self, p=0.3):
        return self.rng.random() < p

    def answer(self, msg):
        a, n = msg.address, msg.count
        if self.answers == "error" or not self.base <= a and a + n <= self.base + len(self.memory):
            self.to_chip.append(encode(MessageKind.READ_ERROR, a))
            return
        pos = a
        while pos < a + n:
            size = min(a + n - pos, 4 * self.rng.randint(1, 40))
            self.to_chip.append(encode(MessageKind.READ_DATA, pos,
                                       data=self.memory[pos - self.base:pos + size - self.base]))
            pos += size

    async def host_out(self, ctx):
        """Sends the queued messages a word at a time, with idle cycles."""
        rx = self.link.rx
        while True:
            if not self.to_chip:
                await ctx.tick()
                continue
            words = _words(self.to_chip.pop(0))
            for i, word in enumerate(words):
                while self.idle():
                    await ctx.tick()
                ctx.set(rx.payload.data, word)
                ctx.set(rx.payload.keep, 1)
                ctx.set(rx.payload.last, i == len(words) - 1)
                ctx.set(rx.valid, 1)
                await ctx.tick().until(rx.ready)
                ctx.set(rx.valid, 0)

    async def host_in(self, ctx):
        """Takes the chip's messages with backpressure and answers READ_REQs."""
        tx = self.link.tx
        words = []
        async for _, _, valid, ready, word, last in ctx.tick().sample(
                tx.valid, tx.ready, tx.payload.data, tx.payload.last):
            if valid and ready:
                words.append(word)
                if last:
                    msg = parse(_raw(words))
                    words = []
                    self.from_chip.append(msg)
                    if msg.kind == MessageKind.READ_REQ:
                        self.answer(msg)
            ctx.set(tx.ready, not self.idle())

    async def registers(self, ctx):
        """The register port: takes accesses with backpressure, answers reads."""
        access, answer = self.link.access, self.link.answer
        answering = False
        async for _, _, valid, ready, write, offset, value, a_valid, a_ready, malformed in ctx.tick().sample(
                access.valid, access.ready, access.payload.write, access.payload.offset,
                access.payload.value, answer.valid, answer.ready, self.link.malformed):
            self.malformed += malformed
            if a_valid and a_ready:
                answering = False
                ctx.set(answer.valid, 0)
            if valid and ready:
                self.accesses.append((write, offset, value if write else 0))
                if not write:
                    answering = True
                    ctx.set(answer.payload, offset * 3)
                    ctx.set(answer.valid, 1)
            ctx.set(access.ready, not answering and not self.idle())

    async def consumer(self, ctx):
        data = self.reader.data
        async for _, _, valid, ready, word, count, last, channel in ctx.tick().sample(
                data.valid, data.ready, data.payload.data, data.payload.count, data.payload.last,
                data.payload.channel):
            if valid and ready:
                self.delivered.append((word.to_bytes(4, "little")[:count], last, channel))
            ctx.set(data.ready, not self.idle())

    def run(self, script, cycles=200_000):
        """Run `script` to its end; more than `cycles` cycles is a hang."""
        async def watchdog(ctx):
            for _ in range(cycles):
                await ctx.tick()
            raise AssertionError(f"the script did not end within {cycles} cycles")

        for process in (self.host_out, self.host_in, self.registers, self.consumer, watchdog):
            self.sim.add_process(process)
        self.sim.add_testbench(script)
        self.sim.run()


async def _read_job(ctx, bench, addr, length, channel):
    job = bench.reader.job
    ctx.set(job.payload.addr, addr)
    ctx.set(job.payload.length, length)
    ctx.set(job.payload.channel, channel)
    ctx.set(job.valid, 1)
    await ctx.tick().until(job.ready)
    ctx.set(job.valid, 0)


def _jobs_of(delivered):
    """Delivered beats grouped into jobs (`last`), each checked: every beat
    full but the job's last, one channel."""
    jobs, current = [], []
    for data, last, channel in delivered:
        current.append((data, channel))
        if last:
            assert all(len(d) == 4 for d, _ in current[:-1]), current
            assert len({c for _, c in current}) == 1
            jobs.append((b"".join(d for d, _ in current), channel))
            current = []
    assert not current, "bytes delivered after a job's last"
    return jobs


def test_reads_in_pieces():
    seed = base_seed()
    print(f"seed {seed}")
    bench = Bench(seed)
    rng = random.Random(seed + 1)
    jobs = [(bench.base + rng.randrange(0, 3000), rng.randint(1, 600), rng.randrange(3))
            for _ in range(8)]

    async def script(ctx):
        for addr, length, channel in jobs:
            await _read_job(ctx, bench, addr, length, channel)
        await ctx.tick().until(bench.reader.idle)
        await ctx.tick().repeat(20)
        assert ctx.get(bench.reader.error) == 0

    bench.run(script)
    expected = [(bytes(bench.memory[a - bench.base:a - bench.base + n]), c) for a, n, c in jobs]
    assert _jobs_of(bench.delivered) == expected
    requests = [msg for msg in bench.from_chip if msg.kind == MessageKind.READ_REQ]
    assert all(1 <= msg.count <= CONFIG.max_read_request for msg in requests)
    assert len(requests) == sum(-(-n // CONFIG.max_read_request) for _, n, _ in jobs)


@pytest.mark.parametrize("case, code", [("error", HostError.CPL_STATUS),
                                        ("too_many", HostError.CPL_MALFORMED),
                                        ("timeout", HostError.CPL_TIMEOUT),
                                        ("unexpected", HostError.CPL_UNEXPECTED)])
def test_read_errors(case, code):
    seed = base_seed()
    print(f"seed {seed}")
    bench = Bench(seed)
    if case == "error":
        bench.answers = "error"
    elif case == "too_many":
        bench.answer = lambda msg: bench.to_chip.append(
            encode(MessageKind.READ_DATA, msg.address, data=bytes(msg.count + 4)))
    elif case == "timeout":
        bench.answer = lambda msg: None

    async def script(ctx):
        if case == "unexpected":
            bench.to_chip.append(encode(MessageKind.READ_DATA, bench.base, data=bytes(8)))
        else:
            await _read_job(ctx, bench, bench.base, 64, 1)
        await ctx.tick().until(bench.reader.error != 0)
        assert ctx.get(bench.reader.error) == code
        # Nothing was delivered after the error, and a flush clears it.
        ctx.set(bench.reader.flush, 1)
        await ctx.tick()
        ctx.set(bench.reader.flush, 0)
        await ctx.tick().until(bench.reader.idle)
        assert ctx.get(bench.reader.error) == 0

    bench.run(script, cycles=20_000)
    assert not bench.delivered


def test_writes_and_registers():
    seed = base_seed()
    print(f"seed {seed}")
    bench = Bench(seed)
    rng = random.Random(seed + 2)
    jobs = [(rng.getrandbits(32), rng.randbytes(rng.randint(1, 400))) for _ in range(8)]
    registers = [(rng.randint(0, 1), 4 * rng.randrange(1024), rng.getrandbits(32)) for _ in range(20)]
    bench.to_chip += [encode(MessageKind.REG_WRITE if w else MessageKind.REG_READ, off, v if w else 0)
                      for w, off, v in registers]
    # Malformed: dropped, counted, nothing passed on.
    bench.to_chip += [bytes([0x40]) + bytes(11), encode(MessageKind.REG_READ, 0x1000),
                      encode(MessageKind.REG_WRITE, 8, 1) + bytes(4), bytes(8)]

    async def script(ctx):
        writer = bench.writer
        for addr, data in jobs:
            ctx.set(writer.job.payload.addr, addr)
            ctx.set(writer.job.payload.length, len(data))
            ctx.set(writer.job.valid, 1)
            await ctx.tick().until(writer.job.ready)
            ctx.set(writer.job.valid, 0)
            for i in range(0, len(data), 4):
                while bench.idle():
                    await ctx.tick()
                chunk = data[i:i + 4]
                ctx.set(writer.data.payload.data, int.from_bytes(chunk, "little"))
                ctx.set(writer.data.payload.count, len(chunk))
                ctx.set(writer.data.payload.last, i + 4 >= len(data))
                ctx.set(writer.data.valid, 1)
                await ctx.tick().until(writer.data.ready)
                ctx.set(writer.data.valid, 0)
        await ctx.tick().until(writer.idle)
        messages = sum(-(-len(data) // CONFIG.max_payload) for _, data in jobs) + \
            sum(not w for w, _, _ in registers)
        while bench.to_chip or len(bench.from_chip) < messages:
            await ctx.tick()
        await ctx.tick().repeat(50)

    bench.run(script, cycles=60_000)
    writes = [msg for msg in bench.from_chip if msg.kind == MessageKind.WRITE]
    expected = []
    for addr, data in jobs:
        for i in range(0, len(data), CONFIG.max_payload):
            expected.append(((addr + i) & 0xFFFFFFFF, data[i:i + CONFIG.max_payload]))
    assert [(msg.address, msg.data) for msg in writes] == expected
    assert bench.accesses == [(w, off >> 2, v if w else 0) for w, off, v in registers]
    values = [(msg.address, msg.value) for msg in bench.from_chip if msg.kind == MessageKind.REG_VALUE]
    assert values == [(off, (off >> 2) * 3) for w, off, _ in registers if not w]
    assert bench.malformed == 4


def test_job_counts_hold_the_chips_longest_jobs():
    """The up5k chip's narrow reader and writer count a job's bytes in the
    bits its longest jobs need (`HostInterface._narrow_job_bits`): a
    program job of the fetcher's chunk, a weight fill of the whole weight
    memory, an RHM or WHM of the whole unified buffer, an MSI's 4 bytes."""
    from tpu.config import UP5K_PROFILE
    from tpu.hdl.host_interface import Channel, HostInterface
    cfg = UP5K_PROFILE
    chip = HostInterface(cfg)
    # Elaborated whole, so that no block made on the way is left unused.
    fragment = Fragment.get(chip, None)
    reader, writer, fetcher = (fragment.find_subfragment(name).origins[0]
                               for name in ("reader", "writer", "fetcher"))
    longest = {Channel.PROGRAM: fetcher.max_job_bytes,
               Channel.RHM: cfg.ub_rows * cfg.rows,
               Channel.WEIGHTS: cfg.weight_mem_tiles * cfg.tile_bytes}
    bits = chip._narrow_job_bits(fetcher)
    for channel, length in longest.items():
        assert length < 2 ** bits[channel], channel
        assert length < 2 ** reader._length_bits, channel
    assert max(cfg.ub_rows * cfg.rows, 4) < 2 ** writer._length_bits
