"""The narrow host protocol's messages, in plain Python (docs/serial_link.md,
"The narrow host protocol").

With ``TPUConfig.narrow_host`` the chip behind a UART speaks these
messages instead of TLPs, in the same frames (`tpu.driver.serial_framing`).
A message is a 3-word header, then data words:

    word 0: kind (bits 31:24), zero (bits 23:16), count (bits 15:0)
    word 1: address (a BAR0 byte offset, or a host address)
    word 2: value (a register's value, else zero)
    then ceil(count / 4) data words (READ_DATA and WRITE only)

Header words go most significant byte first, data words least significant
byte first (the bytes in address order), as a TLP's header and payload do,
so the frame bridge carries them unchanged. The data's first byte is the
byte at the address: no alignment, no byte enables.

This module is the host's half and the tests' reference: `encode` builds a
message's bytes and `parse` checks and splits them, with a `ValueError`
naming what is wrong.
"""

import enum
from typing import NamedTuple


__all__ = ["MessageKind", "Message", "HEADER_BYTES", "encode", "parse"]

HEADER_BYTES = 12


class MessageKind(enum.IntEnum):
    """Byte 0 of a message (bit 5 clear: the bridge's header is 3 words)."""
    REG_WRITE = 0x11    #: host to chip: write `value` to the register at `address`
    REG_READ = 0x12     #: host to chip: read the register at `address`
    REG_VALUE = 0x13    #: chip to host: the answer to a REG_READ (`address`, `value`)
    READ_REQ = 0x14     #: chip to host: send `count` bytes of host memory from `address`
    READ_DATA = 0x15    #: host to chip: the next `count` bytes the read asked for
    READ_ERROR = 0x16   #: host to chip: the read lies outside host memory
    WRITE = 0x17        #: chip to host: `count` bytes to host memory at `address`


#: Kinds that carry data words.
_WITH_DATA = (MessageKind.READ_DATA, MessageKind.WRITE)
#: Kinds with a byte count: their data's, or the bytes a READ_REQ asks for.
_COUNTED = (*_WITH_DATA, MessageKind.READ_REQ)


class Message(NamedTuple):
    kind: MessageKind
    address: int = 0
    value: int = 0
    data: bytes = b""
    count: int = 0


def encode(kind, address=0, value=0, data=b"", count=None):
    """The bytes of one message (a frame's payload); `count` is a
    READ_REQ's (the others' is their data's length, or 0)."""
    kind = MessageKind(kind)
    if data and kind not in _WITH_DATA:
        raise ValueError(f"a {kind.name} message carries no data, not {len(data)} bytes")
    if count is None:
        count = len(data)
    elif kind != MessageKind.READ_REQ:
        raise ValueError(f"only a READ_REQ message's count is given, not a {kind.name}'s")
    if kind in _COUNTED and not 1 <= count < 1 << 16:
        raise ValueError(f"a {kind.name} message counts 1 to 65535 bytes, not {count}")
    if not 0 <= address < 1 << 32 or not 0 <= value < 1 << 32:
        raise ValueError(f"a message's address and value are 32-bit, not 0x{address:x} and 0x{value:x}")
    header = (int(kind) << 24 | count).to_bytes(4, "big") + address.to_bytes(4, "big") + \
        value.to_bytes(4, "big")
    return header + bytes(data) + bytes(-len(data) % 4)


def parse(raw):
    """A `Message` from a frame's payload; `ValueError` if it is not one."""
    raw = bytes(raw)
    if len(raw) < HEADER_BYTES or len(raw) % 4:
        raise ValueError(f"a message is a 12-byte header and whole words, not {len(raw)} bytes")
    try:
        kind = MessageKind(raw[0])
    except ValueError:
        raise ValueError(f"unknown message kind 0x{raw[0]:02x}") from None
    if raw[1]:
        raise ValueError(f"a {kind.name} message's byte 1 must be zero, not 0x{raw[1]:02x}")
    count = int.from_bytes(raw[2:4], "big")
    address = int.from_bytes(raw[4:8], "big")
    value = int.from_bytes(raw[8:12], "big")
    words = (count + 3) // 4 if kind in _WITH_DATA else 0
    if kind in _COUNTED and count == 0 or kind not in _COUNTED and count:
        raise ValueError(f"a {kind.name} message with a count of {count}")
    if len(raw) != HEADER_BYTES + 4 * words:
        raise ValueError(f"a {kind.name} message of {count} bytes is {HEADER_BYTES + 4 * words} "
                         f"bytes long, not {len(raw)}")
    return Message(kind, address, value, raw[HEADER_BYTES:HEADER_BYTES + 4 * words][:count], count)
