"""The few TLPs a host exchanges with the chip, as PCI Express bytes, in plain Python.

A serial link carries each TLP as its PCI Express byte sequence: the header
bytes in specification order (byte 0 is Fmt/Type), then the payload bytes in
address order (docs/tlp.md, docs/serial_link.md). The host needs memory
reads and writes (BAR0 accesses; the chip's DMA and MSI writes) and
completions; nothing here depends on the simulation stack, so a board's
host runs it as it is.
"""

from dataclasses import dataclass


__all__ = ["MRD_32", "MRD_64", "MWR_32", "MWR_64", "CPL", "CPLD", "CPL_SC", "CPL_UR", "Tlp",
           "memory_read", "memory_write", "completion", "parse", "byte_range"]

MRD_32, MRD_64, MWR_32, MWR_64 = 0x00, 0x20, 0x40, 0x60
CPL, CPLD = 0x0A, 0x4A
CPL_SC, CPL_UR = 0, 1


@dataclass
class Tlp:
    """A parsed memory request or completion (fields not of its kind are 0)."""
    fmt_type: int
    length: int             # in words (1024 for a Length field of 0)
    requester_id: int = 0
    tag: int = 0
    first_be: int = 0
    last_be: int = 0
    address: int = 0
    completer_id: int = 0
    status: int = 0
    byte_count: int = 0     # 4096 for a field of 0
    lower_address: int = 0
    payload: bytes = b""
    ep: bool = False

    @property
    def is_completion(self):
        return self.fmt_type & 0xBE == CPL

    @property
    def is_read(self):
        return self.fmt_type in (MRD_32, MRD_64)

    @property
    def is_write(self):
        return self.fmt_type in (MWR_32, MWR_64)


def _dw0(fmt_type, length):
    return bytes((fmt_type, 0, (length >> 8) & 0x3, length & 0xFF))


def _address(fmt_type, address):
    if fmt_type & 0x20:
        return (address >> 32).to_bytes(4, "big") + (address & 0xFFFF_FFFC).to_bytes(4, "big")
    return (address & 0xFFFF_FFFC).to_bytes(4, "big")


def memory_read(address, words, *, requester_id=0, tag=0, first_be=0xF, last_be=None):
    """The bytes of an MRd of `words` words at `address` (a 4-word header
    above 4 GiB)."""
    fmt = MRD_64 if address >> 32 else MRD_32
    last_be = (0xF if words > 1 else 0) if last_be is None else last_be
    return (_dw0(fmt, words) + requester_id.to_bytes(2, "big") +
            bytes((tag, last_be << 4 | first_be)) + _address(fmt, address))


def memory_write(address, data, *, requester_id=0, tag=0, first_be=0xF, last_be=None):
    """The bytes of an MWr of `data` (whole words) at `address`."""
    if not data or len(data) % 4:
        raise ValueError(f"a memory write carries whole words, not {len(data)} bytes")
    words = len(data) // 4
    fmt = MWR_64 if address >> 32 else MWR_32
    last_be = (0xF if words > 1 else 0) if last_be is None else last_be
    return (_dw0(fmt, words) + requester_id.to_bytes(2, "big") +
            bytes((tag, last_be << 4 | first_be)) + _address(fmt, address) + bytes(data))


def completion(*, requester_id, tag, completer_id=0, status=CPL_SC, byte_count, lower_address,
               data=b""):
    """The bytes of a CplD (with `data`, whole words) or a Cpl (without)."""
    fmt = CPLD if data else CPL
    return (_dw0(fmt, len(data) // 4) + completer_id.to_bytes(2, "big") +
            bytes((status << 5 | (byte_count >> 8) & 0xF, byte_count & 0xFF)) +
            requester_id.to_bytes(2, "big") + bytes((tag, lower_address & 0x7F)) + bytes(data))


def parse(raw):
    """The `Tlp` of a packet's bytes; ValueError for what is not a whole
    memory request or completion."""
    raw = bytes(raw)
    if len(raw) < 12:
        raise ValueError(f"a TLP of {len(raw)} bytes is shorter than its header")
    fmt_type = raw[0]
    length = (raw[2] & 0x3) << 8 | raw[3] or 1024
    header = 16 if fmt_type & 0x20 else 12
    has_data = bool(fmt_type & 0x40)
    payload = raw[header:]
    if has_data and len(payload) != 4 * length or not has_data and payload:
        raise ValueError(f"TLP 0x{fmt_type:02x} of Length {length} has {len(payload)} payload bytes")
    tlp = Tlp(fmt_type=fmt_type, length=length if has_data or fmt_type & 0xBE != CPL else 0,
              payload=payload, ep=bool(raw[2] & 0x40))
    if tlp.is_completion:
        tlp.completer_id = int.from_bytes(raw[4:6], "big")
        tlp.status = raw[6] >> 5
        tlp.byte_count = ((raw[6] & 0xF) << 8 | raw[7]) or 4096
        tlp.requester_id = int.from_bytes(raw[8:10], "big")
        tlp.tag = raw[10]
        tlp.lower_address = raw[11] & 0x7F
    elif fmt_type in (MRD_32, MRD_64, MWR_32, MWR_64):
        tlp.requester_id = int.from_bytes(raw[4:6], "big")
        tlp.tag = raw[6]
        tlp.last_be, tlp.first_be = raw[7] >> 4, raw[7] & 0xF
        if header == 16:
            tlp.address = int.from_bytes(raw[8:12], "big") << 32 | int.from_bytes(raw[12:16], "big") & ~3
        else:
            tlp.address = int.from_bytes(raw[8:12], "big") & ~3
    else:
        raise ValueError(f"TLP type 0x{fmt_type:02x} is neither a memory request nor a completion")
    return tlp


def byte_range(tlp):
    """``(first byte address, bytes)`` a memory request covers, from its
    address, Length and byte enables."""
    first = tlp.first_be
    if not first:
        return tlp.address, 0
    start = tlp.address + (first & -first).bit_length() - 1
    if tlp.length == 1:
        end = tlp.address + first.bit_length()
    else:
        end = tlp.address + 4 * (tlp.length - 1) + tlp.last_be.bit_length()
    return start, end - start
