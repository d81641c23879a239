"""cocotbext-pcie `Tlp` objects <-> link-stream beats and `TlpHeader` dicts.

The link format (hdl/tlp.py, docs/tlp.md) carries a TLP as 32-bit words:
header words with header byte 0 in bits 31:24, payload words with payload
byte 0 in bits 7:0. `Tlp.pack()` gives the header big-endian and the
payload in address order, so header words are read big-endian and payload
words little-endian.

A beat is a `Beat` ``(data, keep, last)``: word ``i`` of ``data`` in bits
``32*i+31 .. 32*i``, ``keep`` bit ``i`` set when word ``i`` is valid. The
functions taking beats also accept plain tuples in that order and dicts with
those keys.
"""

import struct
from typing import NamedTuple

from cocotbext.pcie.core.tlp import CplStatus, Tlp, TlpAt, TlpAttr, TlpFmt, TlpTc, TlpType
from cocotbext.pcie.core.utils import PcieId


__all__ = ["Beat", "pack_link_beat", "unpack_link_beat", "HEADER_FIELDS", "tlp_to_words", "words_to_tlp", "words_to_beats", "beats_to_words",
           "tlp_to_beats", "beats_to_tlp", "header_from_tlp", "tlp_from_header", "header_dw",
           "packed_link_beats"]


class Beat(NamedTuple):
    """One link-stream beat."""
    data: int
    keep: int
    last: bool


def pack_link_beat(beat, link_dw):
    """The link stream's payload bits of `beat`, as `tpu.hdl.tlp.LinkBeat`
    lays them out: ``data``, then ``keep``, then ``last``. Plain integer
    arithmetic, so that the host side needs no Amaranth (its import is most
    of a simulation's start) and packs a beat in a few operations."""
    data, keep, last = beat
    return ((data & ((1 << 32 * link_dw) - 1)) | (keep & ((1 << link_dw) - 1)) << 32 * link_dw
            | (int(last) & 1) << 33 * link_dw)


def unpack_link_beat(word, link_dw):
    """The `Beat` in the link stream's payload bits `word` (`pack_link_beat`)."""
    return Beat(word & ((1 << 32 * link_dw) - 1), word >> 32 * link_dw & ((1 << link_dw) - 1),
                word >> 33 * link_dw & 1)


#: The fields of `tpu.hdl.tlp.TlpHeader`, in layout order.
HEADER_FIELDS = ("fmt_type", "tc", "attr", "th", "td", "ep", "at", "length", "requester_id", "tag",
                 "last_be", "first_be", "address", "completer_id", "status", "bcm", "byte_count",
                 "lower_address")

_COMPLETIONS = {TlpType.CPL, TlpType.CPL_DATA, TlpType.CPL_LOCKED, TlpType.CPL_LOCKED_DATA}
_CONFIG = {TlpType.CFG_READ_0, TlpType.CFG_WRITE_0, TlpType.CFG_READ_1, TlpType.CFG_WRITE_1}


def header_dw(word0):
    """Header length in words of the TLP whose first header word is `word0`."""
    return 4 if word0 >> 29 & 1 else 3


def tlp_to_words(tlp, *, digest=None):
    """The link words of `tlp`; `digest` (an int) is appended as a TD digest
    word, which `tlp.td` should then announce."""
    raw = bytes(tlp.pack())
    size = tlp.get_header_size()
    payload = len(raw) - size
    if payload % 4:
        raise ValueError(f"payload of {payload} bytes is not whole words")
    words = [*struct.unpack_from(f">{size // 4}I", raw), *struct.unpack_from(f"<{payload // 4}I", raw, size)]
    if digest is not None:
        words.append(digest & 0xFFFF_FFFF)
    return words


def words_to_tlp(words):
    """The `Tlp` of a packet's link words. A TD digest word is dropped."""
    if not words:
        raise ValueError("no words")
    size = header_dw(words[0])
    raw = b"".join(w.to_bytes(4, "big") for w in words[:size])
    raw += b"".join(w.to_bytes(4, "little") for w in words[size:])
    tlp = Tlp.unpack(raw)
    if tlp.td:
        tlp.data = tlp.data[:-4]
    return tlp


def words_to_beats(words, link_dw):
    """Pack a packet's words `link_dw` to a beat."""
    beats = []
    for start in range(0, max(len(words), 1), link_dw):
        chunk = words[start:start + link_dw]
        beats.append(Beat(data=sum(w << (32 * i) for i, w in enumerate(chunk)),
                          keep=(1 << len(chunk)) - 1,
                          last=start + link_dw >= len(words)))
    return beats


def packed_link_beats(words, link_dw):
    """`pack_link_beat` of each of `words_to_beats(words, link_dw)`, made from
    the words' bytes at once: the simulated host drives a packet's beats with
    one integer each, and a 512-byte completion has 64 of them on a
    two-word link."""
    n = len(words)
    raw = struct.pack(f"<{n}I", *words)
    keep_at, last_at = 32 * link_dw, 33 * link_dw
    packed = []
    for start in range(0, max(n, 1), link_dw):
        count = min(link_dw, n - start)
        packed.append(int.from_bytes(raw[4 * start:4 * (start + count)], "little")
                      | ((1 << count) - 1) << keep_at | (start + link_dw >= n) << last_at)
    return packed


def beats_to_words(beats):
    """The words of a packet's beats, as `keep` marks them."""
    words = []
    for beat in beats:
        data, keep = (beat["data"], beat["keep"]) if isinstance(beat, dict) else tuple(beat)[:2]
        i = 0
        while keep >> i:
            if keep >> i & 1:
                words.append(data >> (32 * i) & 0xFFFF_FFFF)
            i += 1
    return words


def tlp_to_beats(tlp, link_dw, *, digest=None):
    """The link beats of `tlp` on a `link_dw`-word link."""
    return words_to_beats(tlp_to_words(tlp, digest=digest), link_dw)


def beats_to_tlp(beats):
    """The `Tlp` carried by one packet's link beats."""
    return words_to_tlp(beats_to_words(beats))


def header_from_tlp(tlp):
    """The `TlpHeader` fields (a dict) the chip sees for `tlp`.

    Read from the `Tlp` object's attributes, not from its packed bits. Raises
    ValueError for what `TlpHeader` cannot carry: 10-bit tags, LN, processing
    hints, message TLPs.
    """
    if tlp.tag > 0xFF or tlp.ln or tlp.ph:
        raise ValueError(f"TlpHeader has no room for 10-bit tags, LN or PH: {tlp!r}")
    header = dict.fromkeys(HEADER_FIELDS, 0)
    header.update(
        fmt_type=(int(tlp.fmt) << 5) | tlp.type,
        tc=int(tlp.tc), attr=int(tlp.attr), th=int(bool(tlp.th)), td=int(bool(tlp.td)),
        ep=int(bool(tlp.ep)), at=int(tlp.at), length=tlp.length & 0x3FF, tag=tlp.tag,
        requester_id=int(tlp.requester_id))
    kind = tlp.fmt_type
    if kind in _COMPLETIONS:
        header.update(completer_id=int(tlp.completer_id), status=int(tlp.status),
                      bcm=int(bool(tlp.bcm)), byte_count=tlp.byte_count & 0xFFF,
                      lower_address=tlp.lower_address & 0x7F)
    elif kind in _CONFIG:
        # The third word (completer ID and register) travels in `address`.
        header.update(first_be=tlp.first_be, last_be=tlp.last_be,
                      address=int(tlp.completer_id) << 16 | tlp.address & 0xFFC)
    elif tlp.fmt in (TlpFmt.THREE_DW, TlpFmt.THREE_DW_DATA, TlpFmt.FOUR_DW, TlpFmt.FOUR_DW_DATA):
        mask = 0xFFFF_FFFF_FFFF_FFFC if tlp.fmt in (TlpFmt.FOUR_DW, TlpFmt.FOUR_DW_DATA) else 0xFFFF_FFFC
        header.update(first_be=tlp.first_be, last_be=tlp.last_be, address=tlp.address & mask)
    else:
        raise ValueError(f"not a request or completion: {tlp!r}")
    return header


def tlp_from_header(header, payload=b""):
    """A `Tlp` with the fields of a `TlpHeader` dict and `payload` (bytes)."""
    tlp = Tlp()
    tlp.fmt_type = TlpType((header["fmt_type"] >> 5, header["fmt_type"] & 0x1F))
    tlp.tc = TlpTc(header["tc"])
    tlp.attr = TlpAttr(header["attr"])
    tlp.th = bool(header["th"])
    tlp.td = bool(header["td"])
    tlp.ep = bool(header["ep"])
    tlp.at = TlpAt(header["at"])
    tlp.tag = header["tag"]
    tlp.requester_id = PcieId.from_int(header["requester_id"])
    # As cocotbext-pcie reads Length: 0 means 1024 except where it is reserved.
    reserved_length = tlp.fmt_type in (TlpType.CPL, TlpType.CPL_LOCKED)
    tlp.length = header["length"] or (0 if reserved_length else 1024)
    if tlp.fmt_type in _COMPLETIONS:
        tlp.completer_id = PcieId.from_int(header["completer_id"])
        tlp.status = CplStatus(header["status"])
        tlp.bcm = bool(header["bcm"])
        tlp.byte_count = header["byte_count"] or 4096
        tlp.lower_address = header["lower_address"]
    else:
        tlp.first_be = header["first_be"]
        tlp.last_be = header["last_be"]
        if tlp.fmt_type in _CONFIG:
            tlp.completer_id = PcieId.from_int(header["address"] >> 16 & 0xFFFF)
            tlp.address = header["address"] & 0xFFC
        else:
            tlp.address = header["address"]
    tlp.data = bytearray(payload)
    return tlp
