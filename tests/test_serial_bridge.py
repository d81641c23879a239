"""The UART framing bridge alone, in Amaranth's simulator: frames in become
TLP beats and ACKs, damaged frames NAKs, TLP beats become frames, sent
again until acknowledged."""

import random

import pytest
from amaranth.sim import Simulator

from conftest import base_seed
from tpu.driver.serial_framing import SOF, Deframer, Frame, Kind, _stuff, crc16, encode_frame
from tpu.driver import narrow_messages
from tpu.driver.narrow_messages import MessageKind
from tpu.driver.tlp_bytes import memory_read, memory_write, parse
from tpu.hdl.serial_bridge import SerialBridge

#: The bridge's form for the narrow host protocol, on a one-word link: its
#: tests send narrow messages where the others send TLPs.
SMALL = "small"


def _write(address, data, **tlp):
    """A packet with data: a TLP memory write, or for `SMALL` a narrow WRITE."""
    if tlp.pop("small"):
        return narrow_messages.encode(MessageKind.WRITE, address, data=data)
    return memory_write(address, data, **tlp)


def _read(address, words, **tlp):
    """A packet without: a memory read, or a narrow READ_REQ."""
    if tlp.pop("small"):
        # A value no READ_REQ carries, but the bridge carries any word: its
        # third header word's bytes in order.
        return narrow_messages.encode(MessageKind.READ_REQ, address & 0xFFFFFFFF, value=0x0A0B0C0D,
                                      count=4 * words)
    return memory_read(address, words, **tlp)


def _address(payload, small):
    return (narrow_messages.parse(payload) if small else parse(payload)).address


def _words(raw):
    """Link words of a TLP's bytes: header words big-endian, payload little-endian."""
    header = 16 if raw[0] & 0x20 else 12
    return ([int.from_bytes(raw[i:i + 4], "big") for i in range(0, header, 4)] +
            [int.from_bytes(raw[i:i + 4], "little") for i in range(header, len(raw), 4)])


def _raw(words):
    header = 4 if words[0] >> 29 & 1 else 3
    return (b"".join(w.to_bytes(4, "big") for w in words[:header]) +
            b"".join(w.to_bytes(4, "little") for w in words[header:]))


def _run(dw, script, retransmit=400):
    """Run `script(ctx, io)` against a bridge; `io` sends bytes, collects
    what comes out."""
    small = dw == SMALL
    dw = 1 if small else dw
    dut = SerialBridge(link_dw=dw, max_words=4 + 32, retransmit_cycles=retransmit, small=small)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    out_bytes = bytearray()
    beats = []
    bad = []

    async def collect(ctx):
        ctx.set(dut.tx_byte.ready, 1)
        ctx.set(dut.tlp_out.ready, 1)
        async for _, _, tv, tb, ov, od, ok, ol, b in ctx.tick().sample(
                dut.tx_byte.valid, dut.tx_byte.payload, dut.tlp_out.valid, dut.tlp_out.payload.data,
                dut.tlp_out.payload.keep, dut.tlp_out.payload.last, dut.bad_frame):
            if tv:
                out_bytes.append(tb)
            if ov:
                beats.append((od, ok, ol))
            if b:
                bad.append(1)

    class IO:
        async def send(self, ctx, data, gap=3, then=60):
            """`data` a byte every `gap` + 1 cycles, then `then` idle cycles
            (a host waits for its ACK)."""
            for byte in data:
                ctx.set(dut.rx_byte.valid, 1)
                ctx.set(dut.rx_byte.payload, byte)
                await ctx.tick()
                ctx.set(dut.rx_byte.valid, 0)
                if gap:
                    await ctx.tick().repeat(gap)
            await ctx.tick().repeat(then)

        async def send_tlp(self, ctx, words):
            for i in range(0, len(words), dw):
                chunk = words[i:i + dw]
                ctx.set(dut.tlp_in.payload.data, sum(w << 32 * k for k, w in enumerate(chunk)))
                ctx.set(dut.tlp_in.payload.keep, (1 << len(chunk)) - 1)
                ctx.set(dut.tlp_in.payload.last, i + dw >= len(words))
                ctx.set(dut.tlp_in.valid, 1)
                await ctx.tick().until(dut.tlp_in.ready)
            ctx.set(dut.tlp_in.valid, 0)

        def frames(self):
            return Deframer().feed(bytes(out_bytes))

        def tlps(self):
            """TLPs out to the chip, as words."""
            words, packets = [], []
            for data, keep, last in beats:
                words += [data >> 32 * k & 0xFFFFFFFF for k in range(dw) if keep >> k & 1]
                if last:
                    packets.append(words)
                    words = []
            return packets

        bad_frames = bad

    io = IO()
    async def testbench(ctx):
        await script(ctx, io)

    sim.add_process(collect)
    sim.add_testbench(testbench)
    sim.run()
    return io


@pytest.mark.parametrize("dw", [1, 2, 4, SMALL])
def test_frames_in(dw):
    """Good frames reach the chip once each, ACKed; a repeat is ACKed and
    dropped; a damaged or cut frame is never passed on; garbage between
    frames is skipped; SYNC resets the sequence."""
    rng = random.Random(base_seed())
    small = dw == SMALL
    write = _write(0x40, bytes([0x7E, 0x7D, 3, 4]) * rng.randint(1, 8), small=small)   # bytes to stuff
    read = _read(0x1_2345_6780, 2, tag=5, small=small)

    async def script(ctx, io):
        await io.send(ctx, encode_frame(Kind.SYNC))
        await io.send(ctx, encode_frame(Kind.TLP, 0, write))
        await io.send(ctx, encode_frame(Kind.TLP, 0, write))        # a repeat
        damaged = bytearray(encode_frame(Kind.TLP, 1, read))
        damaged[6] ^= 0x10
        await io.send(ctx, damaged)
        await io.send(ctx, bytes([0x11, 0x22, 0x7D]))                 # garbage
        await io.send(ctx, encode_frame(Kind.TLP, 1, read)[:-3])     # cut short
        await io.send(ctx, encode_frame(Kind.TLP, 1, read))
        await ctx.tick().repeat(200)

    io = _run(dw, script)
    assert [_raw(w) for w in io.tlps()] == [write, read]
    assert io.frames() == [Frame(Kind.SYNC, 0), Frame(Kind.ACK, 0), Frame(Kind.ACK, 0),
                           Frame(Kind.NAK, 0), Frame(Kind.ACK, 1)]
    assert len(io.bad_frames) == 1


def _frame_as_said(ctrl, length, payload):
    """A frame whose control byte and length say what they are told, with a
    good CRC: a well-formed frame of a malformed TLP."""
    body = bytes((ctrl, length >> 8, length & 0xFF)) + bytes(payload)
    crc = crc16(body)
    return bytes((SOF,)) + _stuff(body + bytes((crc >> 8, crc & 0xFF)))


@pytest.mark.parametrize("dw", [1, 4, SMALL])
@pytest.mark.parametrize("gap", [0, 2])
def test_malformed_frames_are_refused(dw, gap):
    """Frames whose length or control byte is wrong, CRC good, bytes back to
    back (a byte a cycle, while the bridge judges the length in the cycle
    after it) or spaced: each is NAKed and flagged and nothing of it reaches
    the chip; a good TLP after them goes through."""
    depth = 4 + 32                          # the bridge's buffer, in words (`_run`)
    write = _write(0x80, bytes(range(16)), small=dw == SMALL)
    rng = random.Random(base_seed())
    tlp = Kind.TLP << 4
    bad = [
        (tlp, 14, bytes(14)),                                   # not whole words
        (tlp, 8, bytes(8)),                                     # shorter than a header
        (tlp, 4 * depth + 4, rng.randbytes(4 * depth + 4)),     # longer than the buffer
        (tlp, 0x100 + 12, rng.randbytes(12)),                   # the high byte alone too long
        (Kind.ACK << 4, 4, bytes(4)),                           # a control frame with a payload
        (tlp | 0x2, len(write), write),                         # a reserved control bit
        (0x60, 0, b""),                                         # no such kind
    ]

    async def script(ctx, io):
        for ctrl, length, payload in bad:
            await io.send(ctx, _frame_as_said(ctrl, length, payload), gap=gap, then=80)
        await io.send(ctx, encode_frame(Kind.TLP, 0, write), gap=gap)
        await ctx.tick().repeat(100)

    io = _run(dw, script)
    assert [_raw(w) for w in io.tlps()] == [write]
    assert io.frames() == [Frame(Kind.NAK, 0)] * len(bad) + [Frame(Kind.ACK, 0)]
    assert len(io.bad_frames) == len(bad)


@pytest.mark.parametrize("dw", [1, 4, SMALL])
def test_frames_out(dw):
    """A TLP from the chip goes out as a frame, again on NAK and on silence,
    and the next one only after the ACK, with the other sequence bit."""
    small = dw == SMALL
    first = _words(_write(0x2000, bytes(range(40)), requester_id=0x100, small=small))
    second = _words(_read(0x1_0000_0000, 16, requester_id=0x100, tag=3, small=small))

    async def script(ctx, io):
        await io.send_tlp(ctx, first)
        await ctx.tick().repeat(50 + 12 * len(first) * 4)
        await io.send(ctx, encode_frame(Kind.NAK))
        await ctx.tick().repeat(1000)       # longer than the retransmit timeout
        await io.send(ctx, encode_frame(Kind.ACK, 0))
        await io.send_tlp(ctx, second)
        await ctx.tick().repeat(300)
        await io.send(ctx, encode_frame(Kind.ACK, 1))
        await ctx.tick().repeat(600)

    io = _run(dw, script, retransmit=400)
    frames = io.frames()
    firsts = [f for f in frames if f.seq == 0]
    assert len(firsts) >= 3, frames            # sent, NAKed, timed out
    assert all(f == Frame(Kind.TLP, 0, _raw(first)) for f in firsts)
    assert frames[-1] == Frame(Kind.TLP, 1, _raw(second)), frames
    assert frames.count(frames[-1]) == 1
    assert _address(frames[-1].payload, small) == (0 if small else 0x1_0000_0000)


@pytest.mark.parametrize("dw", [1, 4, SMALL])
def test_stale_and_repeated_acks(dw):
    """An ACK frees the frame in flight only when it carries that frame's
    sequence bit: a stale ACK (the other bit) while the first frame waits,
    and the previous frame's ACK again while the next is being sent, leave
    the frame to be sent again on silence; its own ACK then frees it."""
    small = dw == SMALL
    first = _words(_write(0x2000, bytes(range(8)), requester_id=0x100, small=small))
    second = _words(_read(0x4000, 16, requester_id=0x100, tag=5, small=small))
    third = _words(_read(0x8000, 4, requester_id=0x100, tag=6, small=small))

    async def script(ctx, io):
        await io.send_tlp(ctx, first)
        await ctx.tick().repeat(50 + 12 * len(first) * 4)
        await io.send(ctx, encode_frame(Kind.ACK, 1))        # stale: answers no frame in flight
        await ctx.tick().repeat(600)                        # longer than the retransmit timeout
        await io.send(ctx, encode_frame(Kind.ACK, 0))
        await io.send_tlp(ctx, second)
        await io.send(ctx, encode_frame(Kind.ACK, 0), gap=1, then=1)    # the first's ACK repeated
        await ctx.tick().repeat(600)
        await io.send(ctx, encode_frame(Kind.ACK, 1))
        await io.send_tlp(ctx, third)
        await ctx.tick().repeat(300)
        await io.send(ctx, encode_frame(Kind.ACK, 0))
        await ctx.tick().repeat(600)

    io = _run(dw, script, retransmit=400)
    frames = [f for f in io.frames() if f.kind == Kind.TLP]
    sent = [(f.seq, _address(f.payload, small)) for f in frames]
    assert sent.count((0, 0x2000)) >= 2, sent      # the stale ACK freed nothing
    assert sent.count((1, 0x4000)) >= 2, sent      # nor did the repeated one
    assert sent[-1] == (0, 0x8000) and sent.count((0, 0x8000)) == 1, sent
    assert [a for _, a in sent] == sorted(a for _, a in sent), sent
    assert frames[-1] == Frame(Kind.TLP, 0, _raw(third))
