"""The serial link's framing, in plain Python (docs/serial_link.md).

The chip's TLPs travel over a UART byte stream in frames; the RTL bridge
(``hdl/serial_bridge.py``) and the host (`tpu.driver.serial_link`) speak the
same format, and this module is the host's half and the tests' reference:

    frame = SOF  stuffed(ctrl  len_hi  len_lo  payload[len]  crc_hi  crc_lo)

* ``SOF`` (0x7E) starts every frame; it never occurs inside one, so a
  receiver that lost its place (garbage, a dropped byte) is back in step at
  the next SOF.
* Inside a frame 0x7E and 0x7D are sent as ``ESC`` (0x7D) followed by the
  byte XOR 0x20 (HDLC byte stuffing).
* ``ctrl``: the frame's `Kind` in bits 7:4, its sequence bit in bit 0.
* ``len``: payload bytes, big-endian: a TLP's bytes for `Kind.TLP`, 0 for
  the others.
* ``crc``: CRC-16/CCITT-FALSE (polynomial 0x1021, initial value 0xFFFF, no
  reflection, no final XOR) of ctrl, len and payload, unstuffed, sent
  big-endian, so the CRC of a whole good body is 0.
"""

import enum
from typing import NamedTuple


__all__ = ["SOF", "ESC", "Kind", "Frame", "crc16", "crc16_byte", "encode_frame", "Deframer",
           "MAX_HEADER_BYTES"]

SOF = 0x7E
ESC = 0x7D
MAX_HEADER_BYTES = 16     # a 4-word TLP header


class Kind(enum.IntEnum):
    """What a frame carries (``ctrl`` bits 7:4)."""
    TLP = 1     #: a TLP; the receiver answers ACK(seq) once it has taken it
    ACK = 2     #: the TLP frame with this sequence bit arrived (or was a repeat)
    NAK = 3     #: a frame arrived damaged: send the unacknowledged TLP frame again
    SYNC = 4    #: host to chip: expect sequence bit 0 next; the chip answers SYNC


class Frame(NamedTuple):
    kind: int
    seq: int
    payload: bytes = b""


def crc16_byte(crc, byte):
    """CRC-16/CCITT-FALSE `crc` advanced by one byte."""
    crc ^= byte << 8
    for _ in range(8):
        crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
    return crc & 0xFFFF


def crc16(data, crc=0xFFFF):
    """CRC-16/CCITT-FALSE of `data` (``crc16(b"123456789") == 0x29B1``)."""
    for byte in data:
        crc = crc16_byte(crc, byte)
    return crc


def _stuff(body):
    out = bytearray()
    for byte in body:
        if byte in (SOF, ESC):
            out += bytes((ESC, byte ^ 0x20))
        else:
            out.append(byte)
    return bytes(out)


def encode_frame(kind, seq=0, payload=b""):
    """The bytes on the wire of one frame."""
    if not 0 <= len(payload) < 1 << 16:
        raise ValueError(f"a frame payload of {len(payload)} bytes does not fit its 16-bit length")
    body = bytes((int(kind) << 4 | (seq & 1), len(payload) >> 8, len(payload) & 0xFF)) + bytes(payload)
    crc = crc16(body)
    return bytes((SOF,)) + _stuff(body + bytes((crc >> 8, crc & 0xFF)))


class Deframer:
    """Bytes in, frames out: ``feed(data)`` returns the `Frame`s completed,
    and None for each frame that arrived damaged (bad CRC, bad length or
    unknown kind). Bytes before the first SOF and frames cut short by the
    next SOF are dropped without a trace; `dropped` counts them, and
    `damaged` the frames returned as None."""

    def __init__(self, max_payload=MAX_HEADER_BYTES + 4096):
        self.max_payload = max_payload
        self._body = None       # bytes of the frame in progress, or None while hunting
        self._escape = False
        self.dropped = 0
        self.damaged = 0

    def feed(self, data):
        frames = []
        for byte in data:
            if byte == SOF:
                if self._body:
                    self.dropped += 1
                self._body, self._escape = bytearray(), False
                continue
            if self._body is None:
                continue
            if byte == ESC:
                self._escape = True
                continue
            if self._escape:
                byte ^= 0x20
                self._escape = False
            self._body.append(byte)
            body = self._body
            if len(body) == 3:
                length = body[1] << 8 | body[2]
                if length > self.max_payload:
                    frames.append(self._damaged())
                    continue
            if len(body) >= 5 and len(body) == 5 + (body[1] << 8 | body[2]):
                frames.append(self._finish(bytes(body)))
        return frames

    def _damaged(self):
        self._body = None
        self.damaged += 1
        return None

    def _finish(self, body):
        self._body = None
        kind, length = body[0] >> 4, len(body) - 5
        if crc16(body) != 0 or kind not in Kind.__members__.values() or body[0] & 0x0E or \
                (kind == Kind.TLP) != (length > 0):
            self.damaged += 1
            return None
        return Frame(Kind(kind), body[0] & 1, body[3:-2])
