"""cocotb testbench: the `SerialChip` on its UART pins, driven by the driver's
`SerialLink` over cocotbext-uart (`tpu.sim.host.serial_host`).

``check`` runs a driver check (``TPU_HOST_CHECK``, ``module:function``) over
the serial framing, with frames spoilt at the rates ``TPU_SERIAL_FRAME_RATE``
(to the chip) and ``TPU_SERIAL_BYTE_RATE`` (from it); ``damaged_frames``
sends frames that are damaged or cut short and checks none of them acts;
``status_pins`` checks the LED pins against STATUS; ``bad_messages``
(``narrow_host``) sends messages that are not well formed, read answers
without a read and bad answers to a read.
"""

import os
import pickle
import time

import cocotb
from cocotb.triggers import RisingEdge, Timer

from ...driver.narrow_messages import MessageKind, encode as encode_message
from ...driver.serial_framing import Kind, encode_frame
from ...driver.tlp_bytes import memory_write
from ...host_registers import Control, HostError, Status, register_map
from ...isa import Halt, Rhm, Rw
from ..harness import config_from_env
from ..host.serial_host import open_serial_link
from .tb_host import _load


def _seed():
    return int(os.environ.get("TPU_SEED", "1"))


# Bounds in simulated time, so that a stuck link fails instead of running on:
# the longest check measured (faults) takes 7.4 ms.
@cocotb.test(timeout_time=20, timeout_unit="ms")
async def check(dut):
    """The checks ``TPU_HOST_CHECK`` names (comma-separated), one after the
    other on one device; the result is the last one's."""
    from ...driver import Device
    config = config_from_env()
    seed = _seed()
    targets = os.environ["TPU_HOST_CHECK"].split(",")
    frame_rate = float(os.environ.get("TPU_SERIAL_FRAME_RATE", "0"))
    byte_rate = float(os.environ.get("TPU_SERIAL_BYTE_RATE", "0"))
    link = await open_serial_link(dut, config, seed=seed, frame_rate=frame_rate, byte_rate=byte_rate)
    cocotb.start_soon(_progress(dut, link))
    device = await Device.open(link, config)
    for target in targets:
        began, wall = link.time(), time.monotonic()
        result = await _load(target)(device)
        dut._log.info(f"{target} passed over the serial link (seed {seed}) in "
                      f"{(link.time() - began) * 1e6:.0f} us simulated, {time.monotonic() - wall:.1f} s")
    faults = getattr(link.transport, "faults", {})
    dut._log.info(f"link: {link.stats}; injected: {faults}")
    if frame_rate or byte_rate:
        # The noise struck, and the link recovered by sending again.
        assert sum(faults.values()) > 0, f"no fault was injected (seed {seed})"
        assert link.stats["resent"] > 0 or link.stats["naks_sent"] > 0, link.stats
    if os.environ.get("TPU_HOST_RESULT"):
        with open(os.environ["TPU_HOST_RESULT"], "wb") as file:
            pickle.dump(result, file)


async def _progress(dut, link, every_us=500):
    """Log the link's counts now and then: a slow run shows where it is."""
    while True:
        await Timer(every_us, "us")
        dut._log.info(f"link at {link.time() * 1e6:.0f} us: {link.stats}")


async def _quiet(link, seconds=20e-6):
    """Let the link serve the wire for a while."""
    await link.sleep(seconds)


@cocotb.test(timeout_time=8, timeout_unit="ms")
async def damaged_frames(dut):
    """A write that would change PROG_LEN, and a START, arrive damaged (a
    flipped bit, a lost byte, cut short, a wrong CRC, a bad length) or
    between garbage: the chip NAKs what it can see is damaged, acts on none
    of them, and the link goes on working."""
    from ...driver import Device
    config = config_from_env()
    link = await open_serial_link(dut, config, seed=_seed())
    device = await Device.open(link, config)
    regs = register_map(config)
    prog_len = regs["PROG_LEN"].offset
    await device.write_register("PROG_LEN", 5)
    bad_before = await device.read_register("BAD_REQUESTS")
    seq = link._tx_seq            # the sequence bit the chip takes next

    def frame(offset, value):
        return bytearray(encode_frame(Kind.TLP, seq, memory_write(offset, value.to_bytes(4, "little"))))

    start = frame(regs["CONTROL"].offset, int(Control.START))
    flipped = frame(prog_len, 7)
    flipped[-6] ^= 0x01           # a payload bit: only the CRC tells
    wrong_crc = frame(prog_len, 7)
    wrong_crc[-1] ^= 0xFF
    too_long = bytearray(encode_frame(Kind.TLP, seq, memory_write(prog_len, bytes(4 * 40))))
    lost = frame(prog_len, 7)
    del lost[9]
    # (what, bytes, whether the chip can tell it is damaged: it NAKs; a
    # frame cut short it cannot, until the next SOF; None: either).
    cases = [("flipped payload bit", flipped, True), ("wrong CRC", wrong_crc, True),
             ("longer than the chip's buffer", too_long, True),
             ("lost byte", lost, None), ("START cut short", start[:-2], False),
             ("START cut short, then garbage", start[:-1] + b"\x12\x34\x56", None)]
    for note, data, nak in cases:
        naks = link.stats["naks_received"]
        link.transport.write(data)
        await _quiet(link)
        if nak is not None:
            assert link.stats["naks_received"] == naks + nak, f"{note}: NAKs {link.stats}"
        got = await device.read_register("PROG_LEN")
        assert got == 5, f"{note}: PROG_LEN is {got}: a damaged frame acted"
        status = Status(await device.read_register("STATUS"))
        assert not status & (Status.BUSY | Status.ERROR), f"{note}: STATUS {status!r}"
        assert await device.read_register("BAD_REQUESTS") == bad_before, f"{note}: a request arrived"
    assert dut.link_error.value == 1, "the link-error LED is off after damaged frames"

    # A repeat of a frame already taken (as when the chip's ACK is lost) is
    # acknowledged again and not passed on again: a write of part of a word,
    # which BAR0 drops and counts, counts once.
    seq = link._tx_seq
    partial = encode_frame(Kind.TLP, seq, memory_write(prog_len, (9).to_bytes(4, "little"),
                                                        first_be=0x1))
    acks = link.stats["acks_received"]
    link.transport.write(partial)
    await _quiet(link)
    link.transport.write(partial)
    await _quiet(link)
    assert link.stats["acks_received"] == acks + 2, link.stats
    link._tx_seq ^= 1             # the chip took it once: the next frame has the other bit
    assert await device.read_register("BAD_REQUESTS") == bad_before + 1
    assert await device.read_register("PROG_LEN") == 5

    # An ACK that answers no frame in flight frees nothing: the previous
    # frame's ACK again, then a stale one twice (the other sequence bit,
    # both times), while the chip waits on its answer to a read. The host
    # takes the answer but holds back its own ACK; the chip must send the
    # frame again, which the host then acknowledges.
    on_frame = link._on_frame
    wrong_acks = [1, 2]

    def answer_with_wrong_acks(frame):
        if frame is not None and frame.kind == Kind.TLP and wrong_acks and frame.seq == link._rx_expected:
            for _ in range(wrong_acks.pop(0)):
                link.transport.write(encode_frame(Kind.ACK, frame.seq ^ 1))
            link._rx_expected = frame.seq ^ 1
            link._on_tlp(frame.payload)
            return
        on_frame(frame)

    link._on_frame = answer_with_wrong_acks
    repeats = link.stats["repeats"]
    assert await device.read_register("PROG_LEN") == 5
    assert await device.read_register("BAD_REQUESTS") == bad_before + 1
    for _ in range(30):             # the chip's retransmit timeout, at most
        if link.stats["repeats"] == repeats + 2:
            break
        await _quiet(link, 50e-6)
    link._on_frame = on_frame
    assert not wrong_acks and link.stats["repeats"] == repeats + 2, \
        f"a wrong ACK freed the chip's frame: {link.stats}"
    assert await device.read_register("PROG_LEN") == 5
    for _ in range(10):
        await RisingEdge(dut.clk)


def _pins(dut):
    return {"busy": int(dut.busy.value), "halted": int(dut.halted.value), "error": int(dut.error.value)}


def _status_bits(status):
    return {"busy": int(bool(status & Status.BUSY)), "halted": int(bool(status & Status.HALTED)),
            "error": int(bool(status & Status.ERROR))}


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def status_pins(dut):
    """The busy, halted and error pins (the board's LEDs) show STATUS's bits:
    idle, after a program halted, and after one stopped with an error."""
    from ...driver import Device
    config = config_from_env()
    link = await open_serial_link(dut, config, seed=_seed())
    device = await Device.open(link, config)

    async def check(when, expected):
        status = Status(await device.read_register("STATUS"))
        assert _status_bits(status) == expected, f"{when}: STATUS {status!r}"
        assert _pins(dut) == expected, f"{when}: pins {_pins(dut)}, STATUS {status!r}"

    await check("idle", {"busy": 0, "halted": 0, "error": 0})
    result = await device.run([Halt()])
    assert result.halted, result
    await check("after HALT", {"busy": 0, "halted": 1, "error": 0})
    # Two tiles from the last one: a weight range fault. Polled here, since
    # the driver's wait would abort the chip and clear the error.
    await device.start([Rw(config.weight_mem_tiles - 1, 2), Halt()])
    for _ in range(20):
        if Status(await device.read_register("STATUS")) & Status.ERROR:
            break
    await check("after a fault", {"busy": 0, "halted": 0, "error": 1})


async def _stopped_with(device, code, what, timeout=2e-4):
    """The chip stops with `code` in ERROR_CODE and DMA_ERROR; ABORT clears it."""
    link = device.link
    deadline = link.time() + timeout
    while not Status(await device.read_register("STATUS")) & Status.ERROR:
        assert link.time() < deadline, f"{what}: no error"
    regs = {name: await device.read_register(name) for name in ("ERROR_CODE", "DMA_ERROR")}
    assert regs == {"ERROR_CODE": code, "DMA_ERROR": code}, f"{what}: {regs}"
    await device.abort()
    assert await device.read_register("ERROR_CODE") == 0, f"{what}: ABORT left the error"


@cocotb.test(timeout_time=10, timeout_unit="ms")
async def bad_messages(dut):
    """``narrow_host``: a message that is not well formed is dropped whole
    and counted in BAD_REQUESTS (its frame was good, so it is acknowledged);
    one shorter than a header is NAKed by the bridge; a read answer with no
    read outstanding is CPL_UNEXPECTED, a bad answer to a read
    CPL_MALFORMED, READ_ERROR CPL_STATUS, as for TLPs; the link goes on."""
    import random
    from ...driver import Device
    config = config_from_env()
    assert config.narrow_host, "bad_messages is the narrow host protocol's test"
    seed = _seed()
    rng = random.Random(seed)
    link = await open_serial_link(dut, config, seed=seed)
    device = await Device.open(link, config)
    regs = register_map(config)
    prog_len = regs["PROG_LEN"].offset
    await device.write_register("PROG_LEN", 5)
    bad = await device.read_register("BAD_REQUESTS")
    good = encode_message(MessageKind.REG_WRITE, prog_len, 7)
    cases = [
        ("an unknown kind byte", bytes([0x40]) + good[1:]),
        ("a kind only the chip sends", encode_message(MessageKind.REG_VALUE, prog_len, 7)),
        ("a WRITE from the host", encode_message(MessageKind.WRITE, 0x10000, data=b"abcd")),
        ("a reserved byte set", good[:1] + b"\x01" + good[2:]),
        ("a register write with a count", good[:3] + b"\x04" + good[4:]),
        ("a register write with a data word", good + bytes(4)),
        ("a register read with a data word", encode_message(MessageKind.REG_READ, prog_len) + bytes(4)),
        ("an offset past BAR0", encode_message(MessageKind.REG_WRITE, 0x1000 + prog_len, 7)),
        ("an offset inside a word", encode_message(MessageKind.REG_WRITE, prog_len + 2, 7)),
        ("a READ_ERROR with a data word", encode_message(MessageKind.READ_ERROR, 0x10000) + bytes(4)),
    ]
    rng.shuffle(cases)
    for n, (note, raw) in enumerate(cases, 1):
        acks = link.stats["acks_received"]
        await link._send(raw, link.read_timeout)
        assert link.stats["acks_received"] == acks + 1, f"{note}: {link.stats}"
        assert await device.read_register("PROG_LEN") == 5, f"{note}: it acted"
        assert await device.read_register("BAD_REQUESTS") == bad + n, f"{note}: not counted"
        status = Status(await device.read_register("STATUS"))
        assert not status & (Status.BUSY | Status.ERROR), f"{note}: STATUS {status!r}"

    # Shorter than a header: the bridge refuses the frame (NAK), as any of
    # the wrong length.
    naks = link.stats["naks_received"]
    link.transport.write(encode_frame(Kind.TLP, link._tx_seq, good[:8]))
    await _quiet(link)
    assert link.stats["naks_received"] == naks + 1, f"a short message: {link.stats}"
    assert await device.read_register("PROG_LEN") == 5

    # Answers with no read outstanding.
    for kind, data in ((MessageKind.READ_DATA, rng.randbytes(4)), (MessageKind.READ_ERROR, b"")):
        await link._send(encode_message(kind, 0x10000, data=data), link.read_timeout)
        await _stopped_with(device, HostError.CPL_UNEXPECTED, f"a {kind.name} without a read")

    # Bad answers to an RHM's read: the host's answer replaced once.
    answer = link._answer_read_request

    def spoilt(make):
        def answer_once(start, nbytes):
            link._answer_read_request = answer
            link._queue.append(make(start, nbytes))
        return answer_once

    buffer = device.alloc(4 * config.rows, 64)
    bad_answers = [
        ("more bytes than asked for", HostError.CPL_MALFORMED,
         lambda a, n: encode_message(MessageKind.READ_DATA, a, data=bytes(n + 4))),
        ("a first piece not whole words", HostError.CPL_MALFORMED,
         lambda a, n: encode_message(MessageKind.READ_DATA, a, data=bytes(n - 1))),
        ("a count of zero", HostError.CPL_MALFORMED,
         lambda a, n: encode_message(MessageKind.READ_DATA, a, data=bytes(4))[:2] + bytes(2) +
         encode_message(MessageKind.READ_DATA, a, data=bytes(4))[4:]),
        ("fewer data words than its count", HostError.CPL_MALFORMED,
         lambda a, n: encode_message(MessageKind.READ_DATA, a, data=bytes(n))[:-4]),
        ("more data words than its count", HostError.CPL_MALFORMED,
         lambda a, n: encode_message(MessageKind.READ_DATA, a, data=bytes(n)) + bytes(4)),
        ("READ_ERROR", HostError.CPL_STATUS, lambda a, n: encode_message(MessageKind.READ_ERROR, a)),
    ]
    for note, code, make in bad_answers:
        link._answer_read_request = spoilt(make)
        await device.start([Rhm(ub=0, rows=4, host=buffer.addr), Halt()])
        await _stopped_with(device, code, note)
        assert link._answer_read_request == answer, f"{note}: the chip asked for no read"

    # The link and the chip still work.
    result = await device.run([Rhm(ub=0, rows=4, host=buffer.addr), Halt()])
    assert result.halted, result
