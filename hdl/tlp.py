"""Transaction-layer packets: the header formats and the streams that carry them.

Two stream formats, both documented in docs/host_interface.md:

* The **link** stream (`LinkBeat`) is what a PCIe hard block's transaction
  interface carries: a TLP as consecutive 32-bit words, header first, packed
  ``link_dw`` words per beat, ``keep`` marking the valid words (contiguous
  from word 0) and ``last`` the final beat. Header words hold their fields at
  the bit positions the PCI Express specification gives them (byte 0 of the
  header in bits 31:24 of word 0); payload words hold their bytes in address
  order from bit 0 (byte 0 of the payload in bits 7:0), as Xilinx's 7-series
  TLP interface does.
* The **parsed** stream (`TlpBeat`) is what the chip's units exchange: every
  beat carries the decoded `TlpHeader` of its packet and up to ``link_dw``
  payload words starting at word 0, so no unit deals with header offsets.
  A packet without payload is one beat with ``words == 0``.
"""

import enum

from amaranth.lib import data, stream


__all__ = ["FmtType", "CplStatus", "TlpHeader", "TlpBeat", "LinkBeat",
           "tlp_stream", "link_stream", "has_data", "is_4dw"]


class FmtType(enum.IntEnum):
    """The Fmt[2:0] and Type[4:0] fields of header byte 0, as one byte."""
    MRD_32 = 0x00
    MRD_64 = 0x20
    MRDLK_32 = 0x01
    MRDLK_64 = 0x21
    MWR_32 = 0x40
    MWR_64 = 0x60
    IORD = 0x02
    IOWR = 0x42
    CFGRD0 = 0x04
    CFGWR0 = 0x44
    CFGRD1 = 0x05
    CFGWR1 = 0x45
    CPL = 0x0A
    CPLD = 0x4A
    CPLLK = 0x0B
    CPLDLK = 0x4B


class CplStatus(enum.IntEnum):
    """Completion status (PCIe base specification, table 2-34)."""
    SC = 0   #: successful completion
    UR = 1   #: unsupported request
    CRS = 2  #: configuration request retry
    CA = 4   #: completer abort


def has_data(fmt_type):
    """Whether a TLP of this Fmt/Type carries a payload (Fmt bit 6)."""
    return fmt_type[6]


def is_4dw(fmt_type):
    """Whether a TLP of this Fmt/Type has a 4-word header (Fmt bit 5)."""
    return fmt_type[5]


#: Every header field of memory requests and completions. ``length`` is in
#: words, 0 meaning 1024; ``address`` is a byte address whose two low bits are
#: zero. Request-only and completion-only fields are zero where they do not
#: apply.
TlpHeader = data.StructLayout({
    "fmt_type":      8,
    "tc":            3,
    "attr":          3,   # {ID-based ordering, relaxed ordering, no snoop}
    "th":            1,
    "td":            1,
    "ep":            1,
    "at":            2,
    "length":        10,
    "requester_id":  16,
    "tag":           8,
    "last_be":       4,
    "first_be":      4,
    "address":       64,
    "completer_id":  16,
    "status":        3,
    "bcm":           1,
    "byte_count":    12,  # 0 means 4096
    "lower_address": 7,
})


def TlpBeat(link_dw):
    """One beat of the parsed stream: the packet's header and up to
    `link_dw` payload words from word 0."""
    return data.StructLayout({
        "header": TlpHeader,
        "data":   32 * link_dw,
        "words":  range(link_dw + 1),
        "last":   1,
    })


def LinkBeat(link_dw):
    """One beat of the link stream."""
    return data.StructLayout({
        "data": 32 * link_dw,
        "keep": link_dw,
        "last": 1,
    })


def tlp_stream(link_dw):
    return stream.Signature(TlpBeat(link_dw))


def link_stream(link_dw):
    return stream.Signature(LinkBeat(link_dw))
