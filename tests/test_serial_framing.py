"""The serial framing and the host's TLP bytes, in plain Python."""

import random

import pytest
from cocotbext.pcie.core.tlp import Tlp as PcieTlp

from conftest import base_seed
from tpu.driver.serial_framing import ESC, SOF, Deframer, Frame, Kind, crc16, encode_frame
from tpu.driver.tlp_bytes import (CPL_UR, byte_range, completion, memory_read, memory_write,
                                  parse)


def test_crc16_check_value():
    # The catalogued check value of CRC-16/CCITT-FALSE.
    assert crc16(b"123456789") == 0x29B1


def test_frames_round_trip_and_stuffing():
    seed = base_seed()
    print(f"seed {seed}")
    rng = random.Random(seed)
    deframer = Deframer()
    sent, wire = [], b""
    for _ in range(50):
        kind = rng.choice(list(Kind))
        payload = rng.randbytes(rng.randint(12, 80)) if kind == Kind.TLP else b""
        frame = Frame(kind, rng.getrandbits(1), payload)
        encoded = encode_frame(*frame)
        assert SOF not in encoded[1:], "SOF inside a frame"
        sent.append(frame)
        wire += encoded
    # Any cut of the stream into reads gives the same frames.
    got, pos = [], 0
    while pos < len(wire):
        step = rng.randint(1, 40)
        got += deframer.feed(wire[pos:pos + step])
        pos += step
    assert got == sent


def test_deframer_resynchronises():
    """Garbage, a lost byte, a flipped bit and a frame cut short cost only
    their own frame."""
    good = [encode_frame(Kind.TLP, n & 1, bytes(range(n, n + 16))) for n in range(6)]
    lost = good[1][:5] + good[1][6:]
    flipped = bytearray(good[3])
    flipped[8] ^= 0x04
    stream = (b"\x00\xff" + ESC.to_bytes() + good[0] + lost + good[2] + bytes(flipped) +
              good[4][:9] + good[5])
    deframer = Deframer()
    frames = deframer.feed(stream)
    assert [f.payload[0] if f else None for f in frames] == [0, 2, None, 5]
    assert deframer.damaged == 1


def test_tlp_bytes_match_cocotbext_pcie():
    """Our TLP bytes are what an independent PCIe model packs and unpacks."""
    rng = random.Random(base_seed())
    for address in (0x40, 0xFFFF_FFFC, 0x1_2345_6788):
        words = rng.randint(1, 8)
        raw = memory_read(address, words, requester_id=0x0100, tag=7)
        theirs = PcieTlp.unpack(raw)
        assert theirs.address == address and theirs.length == words and theirs.tag == 7
        assert bytes(theirs.pack()) == raw
        data = rng.randbytes(4 * words)
        raw = memory_write(address, data, requester_id=0x0100)
        theirs = PcieTlp.unpack(raw)
        assert bytes(theirs.get_data()) == data and theirs.address == address
        ours = parse(raw)
        assert ours.is_write and ours.address == address and ours.payload == data
    raw = completion(requester_id=0x0100, tag=3, byte_count=10, lower_address=0x46,
                     data=bytes(range(12)))
    theirs = PcieTlp.unpack(raw)
    assert (theirs.byte_count, theirs.lower_address, theirs.tag, int(theirs.requester_id)) == \
        (10, 0x46, 3, 0x0100)
    cpl = parse(completion(requester_id=1, tag=2, status=CPL_UR, byte_count=0, lower_address=0))
    assert cpl.is_completion and cpl.status == CPL_UR and cpl.byte_count == 4096 and not cpl.payload


def test_byte_range():
    tlp = parse(memory_read(0x1000, 3, first_be=0b1100, last_be=0b0011))
    assert byte_range(tlp) == (0x1002, 8)
    tlp = parse(memory_read(0x1000, 1, first_be=0b0110))
    assert byte_range(tlp) == (0x1001, 2)


def test_bad_input():
    with pytest.raises(ValueError, match="whole words"):
        memory_write(0, b"abc")
    with pytest.raises(ValueError, match="shorter than its header"):
        parse(b"\x40\x00")
    with pytest.raises(ValueError, match="16-bit length"):
        encode_frame(Kind.TLP, 0, bytes(1 << 16))


class _SilentTransport:
    """A line nobody answers, on a clock that jumps ahead when waited on."""

    def __init__(self):
        self.now = 0.0
        self.written = b""

    def write(self, data):
        self.written += bytes(data)

    async def read(self, timeout):
        self.now += timeout
        return b""

    def time(self):
        return self.now

    async def sleep(self, seconds):
        self.now += seconds


def test_serial_link_without_a_chip():
    """No answer to SYNC: a one-line LinkError after the retries, each a SYNC frame."""
    import asyncio
    from tpu import TPUConfig
    from tpu.driver.serial_link import LinkError, SerialLink
    transport = _SilentTransport()
    link = SerialLink(transport, TPUConfig(), retries=3)
    with pytest.raises(LinkError, match="no answer from a chip"):
        asyncio.run(link.read32(0))
    assert Deframer().feed(transport.written) == [Frame(Kind.SYNC, 0)] * 4
    with pytest.raises(ValueError, match="not a register offset"):
        asyncio.run(link.read32(2))


def test_serial_backend_bad_port():
    from tpu import TPUConfig
    from tpu.driver import run
    from tpu.driver.serial_link import LinkError

    async def main(device):
        return None

    with pytest.raises(LinkError, match="cannot open serial port /dev/ttyNOPE"):
        run(main, backend="serial", config=TPUConfig(), port="/dev/ttyNOPE")
