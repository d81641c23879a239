"""The narrow host protocol's messages in plain Python (`tpu.driver.narrow_messages`)."""

import random

import pytest

from conftest import base_seed
from tpu.driver.narrow_messages import HEADER_BYTES, Message, MessageKind, encode, parse


def test_header_layout():
    raw = encode(MessageKind.WRITE, 0x12345678, data=b"\x01\x02\x03\x04\x05")
    # Header words most significant byte first, data in address order, zero-padded.
    assert raw == bytes([0x17, 0, 0, 5, 0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0,
                         1, 2, 3, 4, 5, 0, 0, 0])
    assert encode(MessageKind.REG_WRITE, 0x40, 0xA1B2C3D4) == \
        bytes([0x11, 0, 0, 0, 0, 0, 0, 0x40, 0xA1, 0xB2, 0xC3, 0xD4])
    assert encode(MessageKind.READ_REQ, 0x10000, count=128)[:4] == bytes([0x14, 0, 0, 128])


def test_round_trip_random():
    seed = base_seed()
    print(f"seed {seed}")
    rng = random.Random(seed)
    for _ in range(200):
        kind = rng.choice(list(MessageKind))
        address, value = rng.getrandbits(32), 0
        data, count = b"", None
        if kind in (MessageKind.READ_DATA, MessageKind.WRITE):
            data = rng.randbytes(rng.randint(1, 300))
        elif kind == MessageKind.READ_REQ:
            count = rng.randint(1, 4096)
        elif kind in (MessageKind.REG_WRITE, MessageKind.REG_VALUE):
            value = rng.getrandbits(32)
        raw = encode(kind, address, value, data, count)
        assert len(raw) % 4 == 0 and len(raw) >= HEADER_BYTES
        assert parse(raw) == Message(kind, address, value, data, count or len(data))


@pytest.mark.parametrize("raw, error", [
    (b"\x11\0\0\0" + bytes(4), "a message is a 12-byte header and whole words, not 8 bytes"),
    (bytes([0x40, 0, 0, 4]) + bytes(12), "unknown message kind 0x40"),
    (bytes([0x11, 1, 0, 0]) + bytes(8), "a REG_WRITE message's byte 1 must be zero, not 0x01"),
    (bytes([0x12, 0, 0, 4]) + bytes(8), "a REG_READ message with a count of 4"),
    (bytes([0x15, 0, 0, 0]) + bytes(8), "a READ_DATA message with a count of 0"),
    (bytes([0x15, 0, 0, 5]) + bytes(12), "a READ_DATA message of 5 bytes is 20 bytes long, not 16"),
    (bytes([0x11, 0, 0, 0]) + bytes(12), "a REG_WRITE message of 0 bytes is 12 bytes long, not 16"),
    (bytes([0x14, 0, 0, 8]) + bytes(12), "a READ_REQ message of 8 bytes is 12 bytes long, not 16"),
])
def test_malformed_named(raw, error):
    with pytest.raises(ValueError, match=error):
        parse(raw)


def test_encode_refuses():
    with pytest.raises(ValueError, match="a REG_READ message carries no data"):
        encode(MessageKind.REG_READ, 0, data=b"x")
    with pytest.raises(ValueError, match="a WRITE message counts 1 to 65535 bytes, not 0"):
        encode(MessageKind.WRITE, 0)
    with pytest.raises(ValueError, match="only a READ_REQ message's count is given"):
        encode(MessageKind.WRITE, 0, data=b"x", count=1)
    with pytest.raises(ValueError, match="32-bit"):
        encode(MessageKind.REG_READ, 1 << 32)
