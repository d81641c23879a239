"""cocotb testbench: TLP receiver looped back into the TLP transmitter.

TLPs are built and packed by cocotbext-pcie, so the header bit positions are
checked against an independent implementation: the parsed header on the
receiver's output must equal the fields of the `Tlp` object, and what the
transmitter sends must unpack to the same `Tlp`. Malformed packets are mixed
in and must be dropped and reported without disturbing their neighbours.
"""

import os
import random

import cocotb
from cocotb.triggers import FallingEdge
from amaranth.lib import data
from cocotbext.pcie.core.tlp import CplStatus, Tlp, TlpAt, TlpAttr, TlpTc, TlpType
from cocotbext.pcie.core.utils import PcieId

from ...hdl.tlp import LinkBeat, TlpBeat
from ...hdl.tlp_rx import RxError
from ..harness import config_from_env
from ..host.streams import CycleLoop, StreamSource, pack_fields, start_clock_and_reset
from ..host.tlp_link import Beat, beats_to_tlp, header_dw, header_from_tlp, tlp_to_words, words_to_beats


def unpack_fields(layout, value):
    """The fields of a StructLayout value as a dict, nested layouts as dicts."""
    out = {}
    for name, field in layout:
        v = value >> field.offset & ((1 << field.width) - 1)
        shape = field.shape
        out[name] = unpack_fields(shape, v) if isinstance(shape, data.StructLayout) else v
    return out


class LinkSink:
    """Takes beats from ``o``, not ready with probability `stall`."""

    def __init__(self, dut, link_dw, stall, rng):
        self.dut, self.stall, self.rng = dut, stall, rng
        self.layout = LinkBeat(link_dw)
        self.beats = []
        self.cycles = []
        dut.o__ready.value = 0

    def drive(self, cycle):
        self.dut.o__ready.value = int(self.rng.random() >= self.stall)

    def sample(self, cycle):
        if int(self.dut.o__valid.value) and int(self.dut.o__ready.value):
            self.beats.append(unpack_fields(self.layout, self.dut.o__payload.value.to_unsigned()))
            self.cycles.append(cycle)

    def packets(self):
        packets, rest = _split(self.beats)
        assert not rest, f"{rest} beats after the last packet"
        return packets

    def complete(self):
        return len(_split(self.beats)[0])


class Watch:
    """Records the parsed stream's transfers and the malformed reports."""

    def __init__(self, dut, link_dw):
        self.dut = dut
        self.layout = TlpBeat(link_dw)
        self.beats = []
        self.reasons = []

    def __call__(self, cycle):
        dut = self.dut
        if int(dut.mon_valid.value) and int(dut.mon_ready.value):
            self.beats.append(unpack_fields(self.layout, dut.mon_payload.value.to_unsigned()))
        if int(dut.malformed.value):
            self.reasons.append(RxError(int(dut.malformed_reason.value)))

    def packets(self):
        packets, rest = _split(self.beats)
        assert not rest, f"{rest} beats after the last packet"
        return packets

    def complete(self):
        return len(_split(self.beats)[0])


def _split(beats):
    """The complete packets among `beats`, and how many beats follow them."""
    packets, current = [], []
    for beat in beats:
        current.append(beat)
        if beat["last"]:
            packets.append(current)
            current = []
    return packets, len(current)


def random_tlp(rng, max_words, kind=None, length=None):
    """A random memory request or completion; `length` fixes the payload or
    read length in words."""
    kind = kind or rng.choice(["mrd32", "mrd64", "mwr32", "mwr64", "cpl", "cpld", "cpl", "cpld",
                               "mwr32", "cfgrd", "cfgwr"])
    tlp = Tlp()
    tlp.fmt_type = {
        "mrd32": TlpType.MEM_READ, "mrd64": TlpType.MEM_READ_64,
        "mwr32": TlpType.MEM_WRITE, "mwr64": TlpType.MEM_WRITE_64,
        "cpl": TlpType.CPL, "cpld": TlpType.CPL_DATA,
        "cfgrd": TlpType.CFG_READ_0, "cfgwr": TlpType.CFG_WRITE_0,
    }[kind]
    tlp.tc = TlpTc(rng.randrange(8))
    tlp.attr = TlpAttr(rng.randrange(8))
    tlp.th = rng.random() < 0.2
    tlp.ep = rng.random() < 0.2
    tlp.at = TlpAt(rng.randrange(3))
    tlp.requester_id = PcieId.from_int(rng.randrange(1 << 16))
    tlp.tag = rng.randrange(256)
    words = length if length is not None else rng.randint(1, max_words)
    if kind in ("cpl", "cpld"):
        tlp.completer_id = PcieId.from_int(rng.randrange(1 << 16))
        tlp.status = rng.choice(list(CplStatus))
        tlp.bcm = rng.random() < 0.3
        tlp.byte_count = rng.randint(1, 4096)
        tlp.lower_address = rng.randrange(128)
        if kind == "cpl":
            # Length is reserved in a completion without data.
            tlp.length = rng.choice([0, 0, 0, rng.randrange(1024)])
    else:
        tlp.first_be = rng.randrange(16)
        tlp.last_be = rng.randrange(16)
        if kind.startswith("cfg"):
            tlp.completer_id = PcieId.from_int(rng.randrange(1 << 16))
            tlp.address = rng.randrange(1 << 12) & ~3
            tlp.length = words = 1
        elif kind.endswith("64"):
            tlp.address = rng.randrange(1 << 64) & ~3
        else:
            tlp.address = rng.randrange(1 << 32) & ~3
        if kind.startswith("mrd"):
            tlp.length = length if length is not None else rng.choice([rng.randint(1, 1024), 1024])
    if kind in ("mwr32", "mwr64", "cpld", "cfgwr"):
        tlp.length = words
        tlp.data = bytearray(rng.randbytes(4 * words))
    return tlp


def malformed_words(rng, max_words, link_dw):
    """(link words or beats, the reason the receiver must give)."""
    case = rng.choice(["short", "length", "unexpected", "oversize", "bad_keep", "no_digest"])
    if case == "short":
        tlp = random_tlp(rng, max_words)
        words = tlp_to_words(tlp)
        return words[:rng.randrange(header_dw(words[0]))], RxError.SHORT
    if case == "length":
        tlp = random_tlp(rng, max_words, kind=rng.choice(["mwr32", "mwr64", "cpld"]))
        words = tlp_to_words(tlp)
        if rng.random() < 0.5:
            return words[:len(words) - rng.randint(1, tlp.length)], RxError.LENGTH
        return words + [rng.randrange(1 << 32) for _ in range(rng.randint(2, 9))], RxError.LENGTH
    if case == "no_digest":
        tlp = random_tlp(rng, max_words)
        tlp.td = True
        return tlp_to_words(tlp), RxError.LENGTH
    if case == "unexpected":
        tlp = random_tlp(rng, max_words, kind=rng.choice(["mrd32", "mrd64", "cpl"]))
        extra = [rng.randrange(1 << 32) for _ in range(rng.randint(1, 9))]
        return tlp_to_words(tlp) + extra, RxError.UNEXPECTED_PAYLOAD
    if case == "oversize":
        tlp = random_tlp(rng, max_words, kind=rng.choice(["mwr32", "mwr64", "cpld"]),
                         length=min(max_words + rng.randint(1, 8), 1024))
        if max_words < 1024 and rng.random() < 0.3:
            tlp.length = 1024  # a Length field of 0, with far less data than that
        return tlp_to_words(tlp), RxError.OVERSIZE
    # A short beat before the last one.
    tlp = random_tlp(rng, max_words, kind=rng.choice(["mwr32", "mwr64", "cpld"]),
                     length=rng.randint(max(1, link_dw), max_words))
    beats = words_to_beats(tlp_to_words(tlp), link_dw)
    victim = rng.randrange(len(beats) - 1)
    beats[victim] = beats[victim]._replace(keep=beats[victim].keep >> (1 + rng.randrange(link_dw)))
    return beats, RxError.BAD_KEEP


async def _setup(dut, *, idle, stall, rng):
    cfg = config_from_env()
    dut.i__valid.value = 0
    dut.rx_only.value = 0
    await start_clock_and_reset(dut)
    source = StreamSource(dut, "i", idle=idle, rng=rng)
    sink = LinkSink(dut, cfg.link_dw, stall, rng)
    watch = Watch(dut, cfg.link_dw)
    loop = CycleLoop(dut.clk, sources=[source, sink], monitors=[watch])
    return cfg, source, sink, watch, loop


def _send(source, beats, link_dw):
    layout = LinkBeat(link_dw)
    for beat in beats:
        source.send(pack_fields(layout, beat._asdict()))
    return len(beats)


def _payload_words(tlp):
    raw = bytes(tlp.data)
    return [int.from_bytes(raw[i:i + 4], "little") for i in range(0, len(raw), 4)]


def _check_parsed(cfg, seed, good, parsed):
    """The parsed stream carried `good`, in order, header on every beat."""
    L = cfg.link_dw
    assert len(parsed) == len(good), f"{len(parsed)} parsed packets, expected {len(good)} [seed {seed}]"
    for n, (tlp, beats) in enumerate(zip(good, parsed)):
        where = f"parsed packet {n} ({tlp.fmt_type.name}) [seed {seed}]"
        want = header_from_tlp(tlp)
        for b, beat in enumerate(beats):
            assert beat["header"] == want, f"{where} beat {b}: header {beat['header']} != {want}"
        payload = _payload_words(tlp) if tlp.has_data() else []
        if payload:
            assert [b["words"] for b in beats[:-1]] == [L] * (len(beats) - 1), \
                f"{where}: beat word counts {[b['words'] for b in beats]}"
            assert len(beats) == -(-len(payload) // L), f"{where}: {len(beats)} beats"
        else:
            assert len(beats) == 1 and beats[0]["words"] == 0, f"{where}: header-only as {beats}"
        got = []
        for beat in beats:
            got += [beat["data"] >> (32 * i) & 0xFFFF_FFFF for i in range(beat["words"])]
        assert got == payload, f"{where}: payload {got} != {payload}"


def _check_sent(cfg, seed, good, sent):
    """The link output carried `good` again, in order, without digests."""
    L = cfg.link_dw
    assert len(sent) == len(good), f"{len(sent)} sent packets, expected {len(good)} [seed {seed}]"
    for n, (tlp, out) in enumerate(zip(good, sent)):
        where = f"sent packet {n} ({tlp.fmt_type.name}) [seed {seed}]"
        total = header_dw(tlp_to_words(tlp)[0]) + (len(tlp.data) // 4 if tlp.has_data() else 0)
        assert len(out) == -(-total // L), f"{where}: sent in {len(out)} beats"
        full = (1 << L) - 1
        assert all(b["keep"] == full for b in out[:-1]), f"{where}: keep {[b['keep'] for b in out]}"
        expect = Tlp(tlp)
        expect.td = False  # the transmitter never appends a digest
        expect.th = tlp.th
        got = beats_to_tlp(out)
        assert got == expect, f"{where}: sent {got!r}, expected {expect!r}"
        assert header_from_tlp(got) == header_from_tlp(expect), f"{where}: sent {got!r}"


def _seed():
    return int(os.environ.get("TPU_SEED", "0"))


@cocotb.test()
async def random_traffic(dut):
    """Random TLPs and malformed packets, random idle and back-pressure."""
    seed = _seed()
    rng = random.Random(seed)
    idle, stall = rng.choice([0.0, 0.3, 0.6]), rng.choice([0.0, 0.3, 0.7])
    cfg, source, sink, watch, loop = await _setup(dut, idle=idle, stall=stall, rng=rng)
    L, max_words = cfg.link_dw, cfg.max_payload // 4
    dut._log.info("link_dw %d, seed %d, idle %.1f, stall %.1f", L, seed, idle, stall)
    good, reasons = [], []
    for _ in range(rng.randint(40, 70)):
        if rng.random() < 0.25:
            item, reason = malformed_words(rng, max_words, L)
            beats = item if item and isinstance(item[0], Beat) else words_to_beats(item, L)
            _send(source, beats, L)
            reasons.append(reason)
        else:
            tlp = random_tlp(rng, max_words)
            digest = None
            if rng.random() < 0.15:
                tlp.td = True
                digest = rng.randrange(1 << 32)
            _send(source, words_to_beats(tlp_to_words(tlp, digest=digest), L), L)
            good.append(tlp)
    await loop.run_until(lambda: source.done and len(watch.reasons) == len(reasons)
                         and sum(b["last"] for b in sink.beats) >= len(good),
                         timeout=100000, what=f"{len(good)} TLPs")
    for _ in range(20):
        await loop.step()
    assert watch.reasons == reasons, \
        f"malformed reports {watch.reasons}, expected {reasons} [seed {seed}]"
    _check_parsed(cfg, seed, good, watch.packets())
    _check_sent(cfg, seed, good, sink.packets())


@cocotb.test()
async def throughput(dut):
    """Back-to-back packets without back-pressure move one beat per cycle."""
    seed = _seed()
    rng = random.Random(seed)
    cfg, source, sink, watch, loop = await _setup(dut, idle=0.0, stall=0.0, rng=rng)
    L, max_words = cfg.link_dw, cfg.max_payload // 4
    dut._log.info("link_dw %d, seed %d", L, seed)
    good = []
    shapes = [("mrd32", 1), ("mrd64", 1), ("cpl", None), ("mwr32", 1), ("mwr64", 1), ("cpld", 3),
              ("mwr32", L + 1), ("mwr64", max_words), ("cpld", rng.randint(1, max_words))]
    for kind, length in shapes:
        tlps = [random_tlp(rng, max_words, kind=kind, length=length) for _ in range(6)]
        first_in, first_out = len(source.accepted), len(sink.beats)
        sizes = [_send(source, words_to_beats(tlp_to_words(tlp), L), L) for tlp in tlps]
        first_last = first_in + sizes[0] - 1
        good += tlps
        await loop.run_until(lambda: sum(b["last"] for b in sink.beats) >= len(good),
                             timeout=20000, what=f"a burst of {kind}")
        accepted = source.accepted[first_in:]
        out = sink.cycles[first_out:]
        where = f"{kind} x{length} [seed {seed}]"
        # The input never stalls, and with every packet the same size the
        # output follows without a gap, three cycles behind the receiver's
        # store-and-forward (commit, then the buffer read).
        assert accepted[-1] - accepted[0] == len(accepted) - 1, f"{where}: input took {accepted}"
        assert out[-1] - out[0] == len(out) - 1, f"{where}: output in cycles {out}"
        assert out[0] - source.accepted[first_last] == 3, \
            f"{where}: first beat out {out[0] - source.accepted[first_last]} cycles after the packet's last"
        for _ in range(5):
            await loop.step()

    _check_parsed(cfg, seed, good, watch.packets())
    _check_sent(cfg, seed, good, sink.packets())

    # Mixed sizes into the receiver alone, its output never stalled: it takes
    # a beat every cycle. (Looped back, the transmitter's header beats hold
    # the receiver's output, and a run of small packets behind a large one
    # fills its header queue.)
    await FallingEdge(dut.clk)
    dut.rx_only.value = 1
    parsed_before = len(watch.packets())
    tlps = [random_tlp(rng, max_words) for _ in range(60)]
    first_in = len(source.accepted)
    for tlp in tlps:
        _send(source, words_to_beats(tlp_to_words(tlp), L), L)
    await loop.run_until(lambda: watch.complete() >= parsed_before + len(tlps),
                         timeout=100000, what="a mixed burst")
    accepted = source.accepted[first_in:]
    assert accepted[-1] - accepted[0] == len(accepted) - 1, \
        f"mixed: input took {accepted[-1] - accepted[0] + 1} cycles for {len(accepted)} beats [seed {seed}]"
    for _ in range(10):
        await loop.step()
    _check_parsed(cfg, seed, tlps, watch.packets()[parsed_before:])
    assert not watch.reasons


@cocotb.test()
async def header_burst(dut):
    """A long burst of header-only packets (reads and completions without
    data) against an output held off for long stretches: the receiver's
    header queue fills and flow control must hold the link, never drop or
    merge a packet. Then a large write behind them."""
    seed = _seed()
    rng = random.Random(seed)
    cfg, source, sink, watch, loop = await _setup(dut, idle=0.0, stall=0.95, rng=rng)
    L, max_words = cfg.link_dw, cfg.max_payload // 4
    dut._log.info("link_dw %d, seed %d", L, seed)
    good = [random_tlp(rng, max_words, kind=rng.choice(["mrd32", "mrd64", "cpl"]), length=1)
            for _ in range(120)]
    good.append(random_tlp(rng, max_words, kind="mwr64", length=max_words))
    for tlp in good:
        _send(source, words_to_beats(tlp_to_words(tlp), L), L)
    await loop.run_until(lambda: source.done, timeout=20000, what="the burst to go in")
    sink.stall = 0.5
    await loop.run_until(lambda: sum(b["last"] for b in sink.beats) >= len(good),
                         timeout=20000, what=f"{len(good)} TLPs out")
    for _ in range(20):
        await loop.step()
    assert not watch.reasons, f"packets reported malformed: {watch.reasons} [seed {seed}]"
    _check_parsed(cfg, seed, good, watch.packets())
    _check_sent(cfg, seed, good, sink.packets())
