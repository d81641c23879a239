"""cocotb testbench: the DMA reader and writer against a model of host memory,
and the byte gearboxes.

The host model checks every request the DUT sends (the split rules, byte
enables, formats, tags), answers reads with completions split at random
read-completion or word boundaries, reordered between tags and delayed at
random, and applies writes to a model memory. Every stream sees random idle
and back-pressure; the seed replays a run.
"""

import json
import os
import random
from collections import deque

import cocotb
from amaranth.lib import data
from cocotb.triggers import RisingEdge

from ...hdl.byte_gearbox import ByteBeat
from ...hdl.dma_read import read_job
from ...hdl.dma_write import write_job
from ...hdl.tlp import CplStatus, FmtType, TlpBeat, TlpHeader
from ...host_registers import HostError
from ..tops.dma_top import GEARBOX_SIZES, SHIFTER_SIZES, WHOLE_SHIFTER_SIZES
from ..harness import config_from_env
from ..host.streams import CycleLoop, StreamSource, pack_fields, start_clock_and_reset


REQUESTER_ID = 0xBEEF
# Host memory: one region low, one across the 4 GiB line (64-bit requests).
REGIONS = [(0x0001_2000, 0x6000), (0xFFFF_E000, 0x4000)]


def unpack_fields(layout, word):
    """The fields of an Amaranth StructLayout packed in `word`, as a dict."""
    out = {}
    for name, field in layout:
        value = (word >> field.offset) & ((1 << field.width) - 1)
        if isinstance(field.shape, data.StructLayout):
            value = unpack_fields(field.shape, value)
        out[name] = value
    return out


def pack_tlp(link_dw, header, words=(), last=True):
    return pack_fields(TlpBeat(link_dw), {
        "header": pack_fields(TlpHeader, header),
        "data": sum(w << (32 * i) for i, w in enumerate(words)),
        "words": len(words),
        "last": int(last),
    })


def byte_beats(data_bytes, width, **extra):
    """A job's bytes as packed byte-stream beats."""
    layout = ByteBeat(width, **{k: 2 for k in extra})
    beats = []
    for i in range(0, len(data_bytes), width):
        chunk = data_bytes[i:i + width]
        beats.append(pack_fields(layout, {"data": int.from_bytes(chunk, "little"), "count": len(chunk),
                                          "last": int(i + width >= len(data_bytes)), **extra}))
    return beats


def be_bytes(first_be, last_be, dwords):
    """The byte lanes a request's byte enables select, as offsets from its
    word-aligned address; checks they follow the PCIe rules."""
    def contiguous(be):
        return be != 0 and (be >> (be & -be).bit_length() - 1) & ((be >> (be & -be).bit_length() - 1) + 1) == 0
    if dwords == 1:
        assert last_be == 0 and contiguous(first_be), f"1-word BEs {first_be:x}/{last_be:x}"
        lanes = [i for i in range(4) if first_be >> i & 1]
    else:
        assert first_be in (0b1111, 0b1110, 0b1100, 0b1000), f"first BE {first_be:04b}"
        assert last_be in (0b0001, 0b0011, 0b0111, 0b1111), f"last BE {last_be:04b}"
        lanes = [i for i in range(4) if first_be >> i & 1] + list(range(4, 4 * dwords - 4)) + \
                [4 * (dwords - 1) + i for i in range(4) if last_be >> i & 1]
    return lanes[0], lanes[-1]


class Pins:
    """Drives plain inputs at the loop's drive phase: set `values[name]`."""

    def __init__(self, dut, **values):
        self.dut = dut
        self.values = dict(values)

    def drive(self, cycle):
        for name, value in self.values.items():
            getattr(self.dut, name).value = value

    def sample(self, cycle):
        pass


class HostMemory:
    def __init__(self, rng):
        self.regions = [(base, bytearray(rng.randbytes(size))) for base, size in REGIONS]

    def region_of(self, addr, length=1):
        for base, mem in self.regions:
            if base <= addr and addr + length <= base + len(mem):
                return base, mem
        raise AssertionError(f"{addr:#x}+{length} is outside host memory")

    def read(self, addr, length):
        base, mem = self.region_of(addr, length)
        return bytes(mem[addr - base:addr - base + length])

    def write(self, addr, value):
        base, mem = self.region_of(addr, len(value))
        mem[addr - base:addr - base + len(value)] = value

    def snapshot(self):
        return [bytes(mem) for _, mem in self.regions]

    def random_job(self, rng, max_len):
        base, mem = rng.choice(self.regions)
        length = rng.choice([rng.randint(1, 16), rng.randint(1, 300), rng.randint(1, max_len)])
        if rng.random() < 0.3:   # near a 4 KiB line or the 4 GiB line
            line = rng.choice([a for a in range(base + 4096, base + len(mem), 4096)])
            addr = line - rng.randint(0, min(length, 64))
        else:
            addr = base + rng.randint(0, len(mem) - length)
        addr = max(base, min(addr, base + len(mem) - length))
        return addr, length


def request_span(cfg, hdr, kind):
    """(first byte, last byte) of a request header; checks its form."""
    dwords = hdr["length"] or 1024
    first, last = be_bytes(hdr["first_be"], hdr["last_be"], dwords)
    addr = hdr["address"]
    assert addr & 3 == 0
    lo, hi = addr + first, addr + last
    fmt32, fmt64 = (FmtType.MRD_32, FmtType.MRD_64) if kind == "read" else (FmtType.MWR_32, FmtType.MWR_64)
    assert hdr["fmt_type"] == (fmt32 if hi < 1 << 32 else fmt64), \
        f"fmt {hdr['fmt_type']:#x} for bytes {lo:#x}..{hi:#x}"
    assert hdr["requester_id"] == REQUESTER_ID
    assert hdr["tc"] == 0 and hdr["attr"] == 0 and hdr["th"] == 0 and hdr["td"] == 0 and hdr["ep"] == 0
    assert lo >> 12 == hi >> 12, f"request {lo:#x}..{hi:#x} crosses 4 KiB"
    return lo, hi


class JobTracker:
    """Checks that requests cover the jobs' bytes in order, cut exactly at
    every `unit`-aligned address."""

    def __init__(self, unit):
        self.unit = unit
        self.jobs = deque()
        self.next = None
        self.end = None
        self.aborted = None

    def add(self, addr, length):
        self.jobs.append((addr, length))

    def abort(self):
        """The DUT was flushed: its current job may still send one request
        it had prepared."""
        self.aborted = (self.next, self.end) if self.next is not None else None
        self.next = None
        self.jobs.clear()

    def take(self, lo, hi):
        if self.aborted is not None:
            if lo == self.aborted[0]:
                self.aborted = None
                return False
            self.aborted = None
        if self.next is None:
            assert self.jobs, f"request {lo:#x}..{hi:#x} with no job"
            addr, length = self.jobs.popleft()
            self.next, self.end = addr, addr + length
        assert lo == self.next, f"request starts at {lo:#x}, expected {self.next:#x}"
        want = min(self.end, (lo // self.unit + 1) * self.unit) - 1
        assert hi == want, f"request {lo:#x}..{hi:#x}, expected to end at {want:#x}"
        self.next = hi + 1
        job_done = self.next == self.end
        if job_done:
            self.next = None
        return job_done


class ReadHost:
    """Answers the reader's requests from `memory`."""

    def __init__(self, dut, cfg, memory, rng, *, stall=0.0, idle=0.0, max_delay=20, reorder=True,
                 split=True):
        self.dut, self.cfg, self.mem, self.rng = dut, cfg, memory, rng
        self.stall, self.idle, self.max_delay = stall, idle, max_delay
        self.reorder, self.split = reorder, split
        self.tracker = JobTracker(cfg.max_read_request)
        self.pending = {}            # tag -> deque of [ready cycle, beats]
        self.requests = []           # (cycle, tag, lo, hi)
        self.sending = deque()       # beats of the completion being sent
        self.fault = None            # (kind, request index) to spoil
        self.fault_done = None       # cycle the fault went out
        self.dropped = set()         # tags the host will never answer
        self.inject = deque()        # extra completions to send, as beat lists
        self.ready_seen_low = False
        dut.rd_request__ready.value = 0
        dut.rd_completion__valid.value = 0

    @property
    def quiet(self):
        return not self.sending and not self.inject and not any(self.pending.values())

    def outstanding(self):
        return {t for t, q in self.pending.items() if q} | self.dropped

    def completions(self, tag, lo, hi, fault):
        """Beat lists of the completions answering bytes lo..hi."""
        out = []
        p = lo
        while p <= hi:
            if self.split:
                choice = self.rng.random()
                if choice < 0.3:
                    cut = (p // 64 + 1) * 64
                elif choice < 0.6:
                    cut = (p // 128 + 1) * 128
                else:
                    cut = (p // 4 + self.rng.randint(1, 40)) * 4
            else:
                cut = hi + 1
            cut = min(cut, hi + 1)
            base = p & ~3
            words = (cut - base + 3) // 4
            raw = bytearray(self.rng.randbytes(4 * words))
            raw[p - base:cut - base] = self.mem.read(p, cut - p)
            payload = [int.from_bytes(raw[4 * i:4 * i + 4], "little") for i in range(words)]
            header = {"fmt_type": FmtType.CPLD, "length": words & 0x3FF, "requester_id": REQUESTER_ID,
                      "tag": tag, "completer_id": 0x0100, "status": CplStatus.SC,
                      "byte_count": (hi + 1 - p) & 0xFFF, "lower_address": p & 0x7F}
            out.append((header, payload, cut > hi))
            p = cut
        if fault is not None:
            out = self.spoil(fault, out)
        return [self.beats(h, pl) for h, pl, _ in out]

    def spoil(self, kind, cpls):
        """Turn one completion of `cpls` bad and drop those after it."""
        i = len(cpls) - 1 if kind == "malformed_long" else self.rng.randrange(len(cpls))
        header, payload, final = cpls[i]
        header = dict(header)
        if kind == "status":
            header.update(fmt_type=FmtType.CPL, length=0, status=self.rng.choice([CplStatus.UR, CplStatus.CA]))
            payload = []
        elif kind == "malformed_bc":
            header["byte_count"] = (header["byte_count"] + self.rng.choice([-4, -1, 1, 4])) & 0xFFF
        elif kind == "malformed_la":
            header["lower_address"] = (header["lower_address"] + self.rng.choice([1, 4, 64])) & 0x7F
        elif kind == "malformed_long":
            header["length"] += 1
            payload = payload + [0xDEADBEEF]
        elif kind == "malformed_words":
            payload = payload + [0x12345678] if self.rng.random() < 0.5 or len(payload) == 1 else payload[:-1]
        elif kind == "malformed_nodata":
            header.update(fmt_type=FmtType.CPL, length=0)
            payload = []
        return cpls[:i] + [(header, payload, final)]

    def beats(self, header, payload):
        link = self.cfg.link_dw
        if not payload:
            return [pack_tlp(link, header)]
        return [pack_tlp(link, header, payload[i:i + link], i + link >= len(payload))
                for i in range(0, len(payload), link)]

    def drive(self, cycle):
        self.dut.rd_request__ready.value = int(self.rng.random() >= self.stall)
        if not self.sending and self.rng.random() >= self.idle:
            if self.inject:
                self.sending.extend(self.inject.popleft())
            else:
                ready = [t for t, q in self.pending.items() if q and q[0][0] <= cycle]
                if ready:
                    tag = self.rng.choice(ready) if self.reorder else \
                        min(ready, key=lambda t: self.pending[t][0][0])
                    _, beats = self.pending[tag].popleft()
                    self.sending.extend(beats)
        if self.sending and self.rng.random() >= self.idle:
            self.dut.rd_completion__payload.value = self.sending[0]
            self.dut.rd_completion__valid.value = 1
        else:
            self.dut.rd_completion__valid.value = 0

    def sample(self, cycle):
        if int(self.dut.rd_completion__valid.value):
            if not int(self.dut.rd_completion__ready.value):
                self.ready_seen_low = True
            else:
                self.sending.popleft()
        if not (int(self.dut.rd_request__valid.value) and int(self.dut.rd_request__ready.value)):
            return
        beat = unpack_fields(TlpBeat(self.cfg.link_dw), self.dut.rd_request__payload.value.to_unsigned())
        hdr = beat["header"]
        assert beat["words"] == 0 and beat["last"] == 1, "a read request carries no payload"
        lo, hi = request_span(self.cfg, hdr, "read")
        assert hi - lo < self.cfg.max_read_request
        tag = hdr["tag"]
        assert tag < self.cfg.read_tags, f"tag {tag}"
        assert tag not in self.outstanding(), f"tag {tag} reused while outstanding"
        self.tracker.take(lo, hi)
        self.requests.append((cycle, tag, lo, hi))
        fault = None
        if self.fault is not None and self.fault[1] == len(self.requests) - 1:
            fault = self.fault[0]
            self.fault_done = cycle
            if fault == "drop":
                self.dropped.add(tag)
                return
        delay = cycle + 1 + self.rng.randint(0, self.max_delay)
        self.pending.setdefault(tag, deque())
        for beats in self.completions(tag, lo, hi, fault):
            self.pending[tag].append([delay, beats])
            delay += self.rng.randint(0, self.max_delay // 4)


class DataSink:
    """Takes the reader's bytes, checks beat form and job boundaries."""

    def __init__(self, dut, cfg, rng, stall):
        self.dut, self.cfg, self.rng, self.stall = dut, cfg, rng, stall
        self.jobs = deque()          # (addr, length, channel) expected
        self.got = bytearray()       # bytes of the current job
        self.done = 0
        self.cycles = []
        self.after_error = 0
        dut.rd_data__ready.value = 0

    def drive(self, cycle):
        self.dut.rd_data__ready.value = int(self.rng.random() >= self.stall)

    def sample(self, cycle):
        if int(self.dut.rd_error.value) and int(self.dut.rd_data__valid.value):
            self.after_error += 1
        if not (int(self.dut.rd_data__valid.value) and int(self.dut.rd_data__ready.value)):
            return
        beat = unpack_fields(ByteBeat(4 * self.cfg.link_dw, channel=2),
                             self.dut.rd_data__payload.value.to_unsigned())
        assert self.jobs, "data beat with no job"
        addr, length, channel, want = self.jobs[0]
        assert beat["channel"] == channel, f"channel {beat['channel']}, expected {channel}"
        width = 4 * self.cfg.link_dw
        assert beat["count"] == width or beat["last"], f"short beat {beat['count']} not last"
        self.got += beat["data"].to_bytes(width, "little")[:beat["count"]]
        n = len(self.got)
        assert self.got == want[:n], \
            f"job {addr:#x}+{length}: bytes differ at {next(i for i in range(n) if self.got[i] != want[i])}"
        assert bool(beat["last"]) == (n == length), f"last={beat['last']} after {n} of {length} bytes"
        self.cycles.append(cycle)
        if beat["last"]:
            self.jobs.popleft()
            self.got = bytearray()
            self.done += 1

    def flush(self):
        self.jobs.clear()
        self.got = bytearray()


class WriteSink:
    """Takes the writer's TLPs, checks them and applies them to `memory`."""

    def __init__(self, dut, cfg, memory, rng, stall):
        self.dut, self.cfg, self.mem, self.rng, self.stall = dut, cfg, memory, rng, stall
        self.tracker = JobTracker(cfg.max_payload)
        self.packet = []
        self.jobs_done = 0
        self.tlps = 0
        self.cycles = []
        self.written = []            # (lo, hi) of every TLP
        dut.wr_request__ready.value = 0

    def drive(self, cycle):
        self.dut.wr_request__ready.value = int(self.rng.random() >= self.stall)

    def sample(self, cycle):
        if not (int(self.dut.wr_request__valid.value) and int(self.dut.wr_request__ready.value)):
            return
        link = self.cfg.link_dw
        beat = unpack_fields(TlpBeat(link), self.dut.wr_request__payload.value.to_unsigned())
        self.cycles.append(cycle)
        if self.packet:
            assert beat["header"] == self.packet[0]["header"], "header changed inside a TLP"
        self.packet.append(beat)
        if not beat["last"]:
            assert beat["words"] == link, f"{beat['words']} words in a beat that is not last"
            return
        packet, self.packet = self.packet, []
        hdr = packet[0]["header"]
        dwords = hdr["length"] or 1024
        assert sum(b["words"] for b in packet) == dwords, "payload length differs from the header"
        assert all(b["words"] >= 1 for b in packet)
        lo, hi = request_span(self.cfg, hdr, "write")
        assert hi - lo < self.cfg.max_payload
        payload = b"".join(b["data"].to_bytes(4 * link, "little")[:4 * b["words"]] for b in packet)
        base = hdr["address"]
        self.mem.write(lo, payload[lo - base:hi + 1 - base])
        self.written.append((lo, hi))
        self.tlps += 1
        if self.tracker.take(lo, hi):
            self.jobs_done += 1


async def _setup(dut):
    cfg = config_from_env()
    seed = int(os.environ.get("TPU_SEED", "0"))
    dut._log.info("config %s, seed %d", cfg, seed)
    rng = random.Random(seed)
    for name in ("rd_job__valid", "wr_job__valid", "wr_data__valid", "rd_flush", "wr_flush"):
        getattr(dut, name).value = 0
    dut.requester_id.value = REQUESTER_ID
    await start_clock_and_reset(dut)
    return cfg, seed, rng


def _report(key, value):
    path = os.environ.get("TPU_DMA_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({key: value}) + "\n")


def _read_job(cfg, memory, host, sink, source, addr, length, channel):
    host.tracker.add(addr, length)
    sink.jobs.append((addr, length, channel, memory.read(addr, length)))
    job = {"addr": addr, "length": length, "channel": channel}
    source.send(pack_fields(read_job(cfg.host_addr_bits), job))


@cocotb.test()
async def reads(dut):
    """Random jobs against a host that splits, reorders and delays."""
    cfg, seed, rng = await _setup(dut)
    memory = HostMemory(rng)
    host = ReadHost(dut, cfg, memory, rng, stall=rng.choice([0, 0.3]), idle=rng.choice([0, 0.3]),
                    max_delay=rng.choice([0, 5, 40]))
    sink = DataSink(dut, cfg, rng, stall=rng.choice([0, 0.2, 0.6]))
    source = StreamSource(dut, "rd_job", idle=rng.choice([0, 0.5]), rng=rng)
    loop = CycleLoop(dut.clk, sources=[source, host, sink])
    jobs = 24
    total = 0
    for _ in range(jobs):
        addr, length = memory.random_job(rng, 3000)
        total += length
        _read_job(cfg, memory, host, sink, source, addr, length, rng.randrange(4))
    await loop.run_until(lambda: sink.done == jobs, timeout=60 * total // (cfg.link_dw * 4) + 20000,
                         what=f"{jobs} read jobs")
    for _ in range(20):
        await loop.step()
    assert int(dut.rd_error.value) == 0, f"error {int(dut.rd_error.value)} [seed {seed}]"
    assert host.quiet and not host.ready_seen_low
    assert int(dut.rd_idle.value) == 1
    # Tags go round all of 0..read_tags-1: one left out still works, but
    # with fewer reads in flight.
    tags = [tag for _, tag, _, _ in host.requests]
    assert tags == [i % cfg.read_tags for i in range(len(tags))], \
        f"tags in the order {tags[:20]}... [seed {seed}]"
    dut._log.info("%d jobs, %d bytes, %d requests", jobs, total, len(host.requests))


@cocotb.test()
async def read_errors(dut):
    """Each error, then flush and a good job; and a flush with reads in flight."""
    cfg, seed, rng = await _setup(dut)
    memory = HostMemory(rng)
    host = ReadHost(dut, cfg, memory, rng, stall=0.2, idle=0.2, max_delay=10)
    sink = DataSink(dut, cfg, rng, stall=0.3)
    source = StreamSource(dut, "rd_job", rng=rng)
    pins = Pins(dut, rd_flush=0)
    loop = CycleLoop(dut.clk, sources=[pins, source, host, sink])
    kinds = ["status", "unexpected", "malformed_bc", "malformed_la", "malformed_long",
             "malformed_words", "malformed_nodata", "drop", "flush"]
    rng.shuffle(kinds)
    expected = {"status": HostError.CPL_STATUS, "unexpected": HostError.CPL_UNEXPECTED,
                "drop": HostError.CPL_TIMEOUT, "flush": 0}
    mrr = cfg.max_read_request

    async def good_job():
        addr, length = memory.random_job(rng, 2000)
        _read_job(cfg, memory, host, sink, source, addr, length, rng.randrange(4))
        done = sink.done + 1
        await loop.run_until(lambda: sink.done == done, timeout=40000, what="a job after flush")
        assert int(dut.rd_error.value) == 0, f"error {int(dut.rd_error.value)} after flush [seed {seed}]"

    for kind in kinds:
        dut._log.info("case %s", kind)
        want = expected.get(kind, HostError.CPL_MALFORMED)
        base = len(host.requests)
        addr, length = memory.random_job(rng, 3000)
        length = max(length, 3 * mrr)
        addr = min(addr, memory.region_of(addr)[0] + len(memory.region_of(addr)[1]) - length)
        requests = (addr + length - 1) // mrr - addr // mrr + 1
        if kind == "unexpected":
            tag = rng.choice([rng.randrange(cfg.read_tags), cfg.read_tags + rng.randrange(200 - cfg.read_tags)])
            words = rng.randint(0, 9)
            header = {"fmt_type": FmtType.CPLD if words else FmtType.CPL, "length": words, "tag": tag,
                      "byte_count": 4 * words, "lower_address": 0}
            host.inject.append(host.beats(header, [rng.getrandbits(32) for _ in range(words)]))
            if tag < cfg.read_tags:
                # A tag the reader could be using is unexpected only while it
                # is not in flight: send it before the job asks for anything.
                # With the tag in flight, the same completion is malformed.
                await loop.run_until(lambda: host.quiet, timeout=1000, what="the injected completion")
        elif kind != "flush":
            host.fault = (kind, base + rng.randrange(requests))
        _read_job(cfg, memory, host, sink, source, addr, length, rng.randrange(4))
        if kind == "flush":
            await loop.run_until(lambda: len(host.requests) > base + 1, timeout=5000, what="requests")
            for _ in range(rng.randint(0, 20)):
                await loop.step()
            assert int(dut.rd_error.value) == 0
        else:
            await loop.run_until(lambda: int(dut.rd_error.value) != 0,
                                 timeout=cfg.cpl_timeout + 20000, what=f"error for {kind}")
            error = int(dut.rd_error.value)
            assert error == want, f"{kind}: error {error}, expected {int(want)} [seed {seed}]"
            # The reader takes everything the host still sends and stays quiet.
            await loop.run_until(lambda: host.quiet, timeout=20000, what="the host to finish")
            for _ in range(50):
                await loop.step()
            assert int(dut.rd_error.value) == want, "error code changed"
        # Bytes delivered so far were checked against memory as they came.
        assert sink.after_error == 0, f"{kind}: data offered after the error [seed {seed}]"
        assert not host.ready_seen_low, "completion input not ready"
        pins.values["rd_flush"] = 1
        await loop.step()
        pins.values["rd_flush"] = 0
        await loop.step()   # the flush takes effect at the edge that starts this cycle
        source.queue.clear()
        host.tracker.abort()
        host.fault = None
        sink.flush()
        assert int(dut.rd_error.value) == 0, "flush did not clear the error"
        if kind == "drop":
            # The dropped tag times out silently now; let it.
            host.dropped.clear()
        await good_job()
        _report("read_error", kind)
    await loop.run_until(lambda: host.quiet, timeout=20000, what="the host to finish")
    await loop.run_until(lambda: int(dut.rd_idle.value) == 1, timeout=cfg.cpl_timeout + 100, what="idle")
    assert int(dut.rd_error.value) == 0


@cocotb.test()
async def writes(dut):
    """Random write jobs; memory must end up as if each job were applied."""
    cfg, seed, rng = await _setup(dut)
    memory = HostMemory(rng)
    expected = HostMemory(random.Random(0))
    expected.regions = [(base, bytearray(mem)) for base, mem in memory.regions]
    width = 4 * cfg.link_dw
    sink = WriteSink(dut, cfg, memory, rng, stall=rng.choice([0, 0.3, 0.6]))
    jobs_src = StreamSource(dut, "wr_job", idle=rng.choice([0, 0.5]), rng=rng)
    data_src = StreamSource(dut, "wr_data", idle=rng.choice([0, 0.2, 0.6]), rng=rng)
    pins = Pins(dut, wr_flush=0)
    loop = CycleLoop(dut.clk, sources=[pins, jobs_src, data_src, sink])
    jobs = 24
    total = 0
    for _ in range(jobs):
        addr, length = memory.random_job(rng, 3000)
        total += length
        value = rng.randbytes(length)
        expected.write(addr, value)
        sink.tracker.add(addr, length)
        jobs_src.send(pack_fields(write_job(cfg.host_addr_bits), {"addr": addr, "length": length}))
        for beat in byte_beats(value, width):
            data_src.send(beat)
    await loop.run_until(lambda: sink.jobs_done == jobs, timeout=40 * total // width + 20000,
                         what=f"{jobs} write jobs")
    for _ in range(20):
        await loop.step()
    assert not sink.packet and data_src.done
    assert int(dut.wr_idle.value) == 1
    assert memory.snapshot() == expected.snapshot(), f"memory differs [seed {seed}]"

    # Flush in the middle of jobs: no truncated TLP, nothing written outside
    # the job, and the next job is exact.
    for _ in range(4):
        before = memory.snapshot()
        addr, length = memory.random_job(rng, 3000)
        length = max(length, 3 * cfg.max_payload)
        base, region = memory.region_of(addr)
        addr = min(addr, base + len(region) - length)
        value = rng.randbytes(length)
        sink.tracker.add(addr, length)
        jobs_src.send(pack_fields(write_job(cfg.host_addr_bits), {"addr": addr, "length": length}))
        for beat in byte_beats(value, width):
            data_src.send(beat)
        # Flush only once the job is in: a job taken after the flush is
        # a new job.
        await loop.run_until(lambda: jobs_src.done, timeout=1000, what="the job to be taken")
        for _ in range(rng.randint(0, length // width)):
            await loop.step()
        pins.values["wr_flush"] = 1
        await loop.step()
        pins.values["wr_flush"] = 0
        # The producer is flushed by the same abort.
        data_src.queue.clear()
        data_src._current = None
        await loop.run_until(lambda: int(dut.wr_idle.value) == 1 and not sink.packet, timeout=2000,
                             what="the writer to stop")
        sink.tracker.abort()
        for (rbase, _), old, new in zip(memory.regions, before, memory.snapshot()):
            for i in range(len(old)):
                if old[i] != new[i]:
                    a = rbase + i
                    assert addr <= a < addr + length, f"flushed job wrote {a:#x} [seed {seed}]"
                    assert new[i] in (value[a - addr], 0), f"garbage at {a:#x} [seed {seed}]"
        addr, length = memory.random_job(rng, 2000)
        value = rng.randbytes(length)
        sink.tracker.add(addr, length)
        expected = memory.snapshot()
        jobs_src.send(pack_fields(write_job(cfg.host_addr_bits), {"addr": addr, "length": length}))
        for beat in byte_beats(value, width):
            data_src.send(beat)
        done = sink.jobs_done + 1
        await loop.run_until(lambda: sink.jobs_done == done, timeout=20000, what="a job after flush")
        memory_after = HostMemory(random.Random(0))
        memory_after.regions = [(b, bytearray(m)) for (b, _), m in zip(memory.regions, expected)]
        memory_after.write(addr, value)
        assert memory.snapshot() == memory_after.snapshot(), f"write after flush wrong [seed {seed}]"


@cocotb.test()
async def throughput(dut):
    """Long reads and writes with no idle or back-pressure: bytes per cycle."""
    cfg, seed, rng = await _setup(dut)
    memory = HostMemory(rng)
    width = 4 * cfg.link_dw
    base, region = memory.regions[0]
    length = 16384
    results = {}
    for split in (False, True):
        await RisingEdge(dut.clk)
        host = ReadHost(dut, cfg, memory, rng, max_delay=0, reorder=False, split=False)
        if split:
            # Completions at every 64-byte line, as many root complexes send.
            host.split = True
            host.rng = _Fixed64()
        sink = DataSink(dut, cfg, rng, stall=0)
        source = StreamSource(dut, "rd_job", rng=rng)
        loop = CycleLoop(dut.clk, sources=[source, host, sink])
        _read_job(cfg, memory, host, sink, source, base, length, 1)
        await loop.run_until(lambda: sink.done == 1, timeout=100 * length, what="the long read")
        start = source.accepted[0]
        span = sink.cycles[-1] - start + 1
        steady = sink.cycles[-1] - sink.cycles[0] + 1
        key = f"read{'_rcb64' if split else ''}"
        results[key] = {"bytes": length, "cycles": span, "bytes_per_cycle": round(length / span, 3),
                        "first_data_after": sink.cycles[0] - start,
                        "steady_bytes_per_cycle": round(length / steady, 3)}
        dut._log.info("%s: %s", key, results[key])
        for _ in range(10):
            await loop.step()

    await RisingEdge(dut.clk)
    sink = WriteSink(dut, cfg, memory, rng, stall=0)
    jobs_src = StreamSource(dut, "wr_job", rng=rng)
    data_src = StreamSource(dut, "wr_data", rng=rng)
    loop = CycleLoop(dut.clk, sources=[jobs_src, data_src, sink])
    for addr in (base, base + 1):
        sink.cycles = []
        value = rng.randbytes(length)
        sink.tracker.add(addr, length)
        jobs_src.send(pack_fields(write_job(cfg.host_addr_bits), {"addr": addr, "length": length}))
        for beat in byte_beats(value, width):
            data_src.send(beat)
        done = sink.jobs_done + 1
        await loop.run_until(lambda: sink.jobs_done == done, timeout=100 * length, what="the long write")
        start = jobs_src.accepted[-1]
        beats = len(sink.cycles)
        span = sink.cycles[-1] - start + 1
        steady = sink.cycles[-1] - sink.cycles[0] + 1
        key = f"write_offset{addr - base}"
        results[key] = {"bytes": length, "cycles": span, "bytes_per_cycle": round(length / span, 3),
                        "beats": beats, "steady_cycles": steady}
        dut._log.info("%s: %s", key, results[key])
        # Every TLP beat follows the previous one in the next cycle.
        assert steady == beats, f"{beats} beats took {steady} cycles [seed {seed}]"
        assert memory.read(addr, length) == value
    _report(f"{cfg.link_dw}dw-mrr{cfg.max_read_request}-mps{cfg.max_payload}-tags{cfg.read_tags}",
            results)


class _Fixed64(random.Random):
    """Makes `ReadHost.completions` cut at every 64-byte line."""

    def random(self):
        return 0.0


class GearboxSink:
    """Takes one gearbox's output; checks beats against the jobs sent."""

    def __init__(self, dut, n, width, rng, stall):
        self.valid = getattr(dut, f"g{n}_o__valid")
        self.readyp = getattr(dut, f"g{n}_o__ready")
        self.payload = getattr(dut, f"g{n}_o__payload")
        self.width, self.rng, self.stall = width, rng, stall
        self.jobs = deque()
        self.got = bytearray()
        self.done = 0
        self.beats = []
        self.readyp.value = 0

    def drive(self, cycle):
        self.readyp.value = int(self.rng.random() >= self.stall)

    def sample(self, cycle):
        if not (int(self.valid.value) and int(self.readyp.value)):
            return
        beat = unpack_fields(ByteBeat(self.width), self.payload.value.to_unsigned())
        want = self.jobs[0]
        assert beat["count"] == self.width or beat["last"], "short beat not last"
        assert beat["count"] >= 1
        self.got += beat["data"].to_bytes(self.width, "little")[:beat["count"]]
        assert self.got == want[:len(self.got)], "bytes differ"
        assert bool(beat["last"]) == (len(self.got) == len(want))
        self.beats.append(cycle)
        if beat["last"]:
            self.jobs.popleft()
            self.got = bytearray()
            self.done += 1


@cocotb.test()
async def gearboxes(dut):
    """Every gearbox and beat shifter of the top: random jobs, idle and
    back-pressure, then a timed run with neither. A shifter's jobs are whole
    beats of its narrower side (of its output, with ``whole``), as it requires."""
    seed = int(os.environ.get("TPU_SEED", "0"))
    rng = random.Random(seed)
    sizes = GEARBOX_SIZES + SHIFTER_SIZES + WHOLE_SHIFTER_SIZES
    for n in range(len(sizes)):
        getattr(dut, f"g{n}_i__valid").value = 0
    await start_clock_and_reset(dut)
    for timed in (False, True):
        await RisingEdge(dut.clk)
        sources, sinks = [], []
        for n, (a, b) in enumerate(sizes):
            # The byte multiple a job's length must be.
            if n < len(GEARBOX_SIZES):
                unit = 1
            elif n < len(GEARBOX_SIZES) + len(SHIFTER_SIZES):
                unit = min(a, b)
            else:
                unit = b
            idle = 0 if timed else rng.choice([0, 0.3, 0.7])
            stall = 0 if timed else rng.choice([0, 0.3, 0.7])
            source = StreamSource(dut, f"g{n}_i", idle=idle, rng=rng)
            sink = GearboxSink(dut, n, b, rng, stall)
            jobs = 1 if timed else 12
            for _ in range(jobs):
                length = 64 * 40 if timed else rng.choice([1, rng.randint(1, 16), rng.randint(1, 400)])
                length = unit * -(-length // unit)
                value = rng.randbytes(length)
                sink.jobs.append(value)
                for beat in byte_beats(value, a):
                    source.send(beat)
            sources.append(source)
            sinks.append(sink)
        loop = CycleLoop(dut.clk, sources=sources + sinks)
        await loop.run_until(lambda: all(not s.jobs for s in sinks), timeout=100000, what="the jobs")
        if timed:
            for (a, b), source, sink in zip(sizes, sources, sinks):
                cycles = sink.beats[-1] - source.accepted[0] + 1
                ideal = 64 * 40 // min(a, b)
                dut._log.info("%d -> %d bytes: %d bytes in %d cycles (ideal %d)", a, b, 64 * 40, cycles, ideal)
                # One beat per cycle on the narrower side, after a two-cycle fill.
                assert cycles <= ideal + 2, f"{a} -> {b}: {cycles} cycles, ideal {ideal}"


class _TwoPartHost(ReadHost):
    """Answers each request with two completions: the first ends exactly on a
    data-row boundary `cut` bytes in; the second waits in `held` until the
    test sends it."""

    def __init__(self, dut, cfg, memory, rng, *, cut):
        super().__init__(dut, cfg, memory, rng, max_delay=0, reorder=False, split=False)
        self.cut = cut
        self.held = []

    def _completion(self, tag, p, cut, hi):
        base = p & ~3
        words = (cut - base + 3) // 4
        raw = bytearray(4 * words)
        raw[p - base:cut - base] = self.mem.read(p, cut - p)
        payload = [int.from_bytes(raw[4 * i:4 * i + 4], "little") for i in range(words)]
        header = {"fmt_type": FmtType.CPLD, "length": words & 0x3FF, "requester_id": REQUESTER_ID,
                  "tag": tag, "completer_id": 0x0100, "status": CplStatus.SC,
                  "byte_count": (hi + 1 - p) & 0xFFF, "lower_address": p & 0x7F}
        return self.beats(header, payload)

    def completions(self, tag, lo, hi, fault):
        self.held.append(self._completion(tag, lo + self.cut, hi + 1, hi))
        return [self._completion(tag, lo, lo + self.cut, hi)]


@cocotb.test()
async def early_delivery(dut):
    """A row is delivered as soon as its last byte has arrived, also when a
    completion ends exactly at the row's end and the rest of the request is
    late: data right is not enough, the latency must be right too."""
    cfg, seed, rng = await _setup(dut)
    beat = 4 * cfg.link_dw
    mrr = cfg.max_read_request
    length = min(mrr, cfg.max_payload)      # one request; each completion fits max_payload
    memory = HostMemory(rng)
    for rows in (1, 2, length // beat - 1):
        await RisingEdge(dut.clk)        # out of the read-only phase
        cut = rows * beat
        host = _TwoPartHost(dut, cfg, memory, rng, cut=cut)
        sink = DataSink(dut, cfg, rng, stall=0.0)
        source = StreamSource(dut, "rd_job", rng=rng)
        loop = CycleLoop(dut.clk, sources=[source, host, sink])
        base = memory.regions[0][0]
        addr = base + mrr * rng.randrange(1, 8)      # at the start of a request
        _read_job(cfg, memory, host, sink, source, addr, length, rng.randrange(4))
        await loop.run_until(lambda: host.held and host.quiet, timeout=2000,
                             what="the first completion")
        # Well past the reader's pipeline, the rest still held back.
        for _ in range(40):
            await loop.step()
        delivered = sum(1 for _ in sink.cycles) * beat
        assert delivered >= cut, (f"{delivered} bytes delivered of the {cut} that arrived in a "
                                  f"completion ending on a row boundary [seed {seed}]")
        host.inject.append(host.held.pop())
        await loop.run_until(lambda: sink.done == 1, timeout=4000, what="the rest of the job")
        await loop.run_until(lambda: int(dut.rd_idle.value) == 1, timeout=200, what="idle")
    assert int(dut.rd_error.value) == 0


@cocotb.test()
async def issue_at_handover(dut):
    """A job's first request issued in the very cycle delivery finishes the
    previous request's last row: the head moves on to a tag whose place in
    its slot is being worked out that cycle, so its first row must come from
    the request, not from the slot's registers (still the slot's last use).
    A two-job pair is run again and again with the second job held back one
    cycle more each time, from its request going out long before the first
    job's last byte to well after it, so one run hits the cycle whatever the
    reader's latency; each second job starts on a row other than the one
    its tag's previous request started on."""
    cfg, seed, rng = await _setup(dut)
    beat = 4 * cfg.link_dw
    mrr = cfg.max_read_request
    memory = HostMemory(rng)
    host = ReadHost(dut, cfg, memory, rng, max_delay=0, reorder=False, split=False)
    sink = DataSink(dut, cfg, rng, stall=0.0)
    source = StreamSource(dut, "rd_job", rng=rng)
    loop = CycleLoop(dut.clk, sources=[source, host, sink])

    def previous_row(tag):
        """The first row of `tag`'s last request (0, the reset value, if none)."""
        for _, t, lo, _ in reversed(host.requests):
            if t == tag:
                return lo % mrr // beat
        return 0

    def place(row, lane, longest):
        base, mem = rng.choice(memory.regions)
        block = base + mrr * rng.randrange(len(mem) // mrr - 2)
        off = row * beat + lane
        return block + off, rng.randint(1, longest(mrr - off))

    trials = 0
    for _ in range(3):
        # The first job: one request, a few rows, the same in every run of the sweep.
        a_addr, a_len = place(rng.randrange(mrr // beat), rng.randrange(beat), lambda room: min(room, 6 * beat))
        diffs = []
        delay = 0
        while not diffs or diffs[-1] < 4:
            await loop.run_until(lambda: int(dut.rd_idle.value) == 1 and source.done, timeout=200,
                                 what="idle between runs")
            done, requests = sink.done, len(host.requests)
            b_tag = (requests + 1) % cfg.read_tags
            stale = previous_row(b_tag)
            b_row = rng.choice([r for r in range(mrr // beat) if r != stale])
            b_addr, b_len = place(b_row, rng.randrange(beat), lambda room: min(room + mrr, 3 * mrr))
            _read_job(cfg, memory, host, sink, source, a_addr, a_len, rng.randrange(4))
            start = loop.cycle
            a_end = None
            while sink.done < done + 2:
                if loop.cycle - start == delay:
                    _read_job(cfg, memory, host, sink, source, b_addr, b_len, rng.randrange(4))
                if loop.cycle - start > 400 + 4 * delay:
                    raise AssertionError(f"run with delay {delay} did not finish [seed {seed}]")
                await loop.step()
                if a_end is None and sink.done == done + 1:
                    a_end = loop.cycle
            assert int(dut.rd_error.value) == 0, f"error {int(dut.rd_error.value)} [seed {seed}]"
            b_issued, tag = host.requests[requests + 1][:2]
            assert tag == b_tag, f"the second job went out with tag {tag}, expected {b_tag}"
            diffs.append(b_issued - a_end)
            delay += 1
            trials += 1
        # Every offset between the second job's request and the first job's
        # last beat from well before to well after was run (the first few
        # delays alike: the second job waits for the first's request).
        assert diffs[0] < -1 and sorted(set(diffs)) == list(range(diffs[0], diffs[-1] + 1)), \
            f"offsets {diffs} [seed {seed}]"
    await loop.run_until(lambda: int(dut.rd_idle.value) == 1, timeout=200, what="idle")
    assert host.quiet and int(dut.rd_error.value) == 0
    dut._log.info("%d runs", trials)
