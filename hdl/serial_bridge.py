"""The chip's TLP streams over a UART byte stream, in frames (docs/serial_link.md).

`SerialBridge` sits between a UART and the host interface's link streams.
Both directions use the frame format of `tpu.driver.serial_framing`: SOF,
then byte-stuffed ctrl, length, payload and CRC-16/CCITT. Each direction is
stop-and-wait with one sequence bit:

* From the host: a frame is stored whole and its CRC checked before any
  byte of it reaches the chip, so a damaged frame is never executed; it is
  answered with NAK. A good TLP frame with the expected sequence bit goes
  to the chip, and only then is it acknowledged (ACK): the host sends no
  next TLP before, which is the flow control. A repeat (our ACK was lost)
  is acknowledged again and dropped. SOF restarts the receiver wherever it
  is, so garbage or a lost byte costs one frame, which the host sends again.
* To the host: a TLP from the chip is stored, sent, and kept until the host
  acknowledges it; a NAK, or no ACK within `retransmit_cycles`, sends it
  again.
"""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..driver.serial_framing import ESC, SOF, Kind
from .lfsr import LfsrTimer
from .tlp import link_stream


__all__ = ["SerialBridge", "check_bridge_parameters", "crc16_next"]


def _crc16_matrix():
    """For each bit of CRC-16/CCITT after one byte: the mask of the inputs
    (bits 0-15: the CRC before, bits 16-23: the byte) whose XOR it is."""
    masks = [1 << i for i in range(16)]
    for j in range(8):
        masks[8 + j] ^= 1 << (16 + j)
    for _ in range(8):
        top = masks[15]
        masks = [0] + masks[:15]
        for i in range(16):
            if 0x1021 >> i & 1:
                masks[i] ^= top
    return masks


_CRC16 = _crc16_matrix()


def crc16_next(crc, byte):
    """CRC-16/CCITT-FALSE `crc` (16 bits) advanced by `byte` (8 bits): a
    single level of XORs."""
    inputs = Cat(crc, byte)
    return Cat(*(Cat(*(inputs[k] for k in range(24) if mask >> k & 1)).xor() for mask in _CRC16))


def check_bridge_parameters(*, link_dw, max_words, retransmit_cycles):
    """ValueError (one line) naming the first of `SerialBridge`'s parameters
    that is out of range."""
    if link_dw not in (1, 2, 4, 8):
        raise ValueError(f"link_dw must be 1, 2, 4 or 8, not {link_dw!r}")
    if not isinstance(max_words, int) or not 4 <= max_words <= 0x3FFF:
        raise ValueError(f"max_words must be an int from 4 to 16383, not {max_words!r}")
    if not isinstance(retransmit_cycles, int) or retransmit_cycles < 1:
        raise ValueError(f"retransmit_cycles must be a positive int, not {retransmit_cycles!r}")


class SerialBridge(wiring.Component):
    """Frames between UART bytes and link-stream TLPs; see the module docstring.

    Parameters
    ----------
    link_dw : int
        Words per beat of the link streams.
    max_words : int
        Longest TLP in either direction, in words (header and payload): the
        depth of each frame buffer.
    retransmit_cycles : int
        Cycles without an ACK before a TLP frame is sent again.
    small : bool
        The form for the narrow host protocol (``narrow_host``) on a
        one-word link: every message has a 3-word header, so no TLP's
        header length is looked at; the chip's words go into the buffer as
        they come and each direction's bytes are taken from the block RAM's
        own output register instead of a word register beside it.

    Members
    -------
    rx_byte : In(stream of 8 bits, always ready)
        Bytes from the UART receiver.
    rx_error : In(1)
        The UART receiver dropped a byte (bad stop bit): the frame is lost.
    tx_byte : Out(stream of 8 bits)
        Bytes to the UART transmitter.
    tlp_out : Out(link_stream(link_dw))
        TLPs from the host, to the chip's ``rx``.
    tlp_in : In(link_stream(link_dw))
        TLPs from the chip's ``tx``, to the host.
    bad_frame : Out(1)
        Pulses for each frame from the host refused as damaged.
    """

    def __init__(self, *, link_dw, max_words, retransmit_cycles, small=False):
        check_bridge_parameters(link_dw=link_dw, max_words=max_words, retransmit_cycles=retransmit_cycles)
        if small and link_dw != 1:
            raise ValueError(f"the small bridge is for a one-word link, not link_dw {link_dw}")
        self._small = small
        self._dw = link_dw
        self._max_words = max_words
        self._retransmit = retransmit_cycles
        super().__init__({
            "rx_byte":   In(stream.Signature(8, always_ready=True)),
            "rx_error":  In(1),
            "tx_byte":   Out(stream.Signature(8)),
            "tlp_out":   Out(link_stream(link_dw)),
            "tlp_in":    In(link_stream(link_dw)),
            "bad_frame": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        dw, depth = self._dw, self._max_words
        small = self._small

        # Requests for control frames, raised by the receiving side and taken
        # by the sender. The sender's clears come first in this function, so
        # a request raised in the cycle one is taken survives.
        ack_req = Signal()
        ack_seq = Signal()
        nak_req = Signal()
        sync_req = Signal()
        # What the host said about our TLP frame (one-cycle pulses).
        ack_in = Signal()
        ack_in_seq = Signal()
        nak_in = Signal()

        m.submodules.rx_mem = rx_mem = Memory(shape=32, depth=depth, init=[])
        m.submodules.tx_mem = tx_mem = Memory(shape=32, depth=depth, init=[])
        # The small form writes a byte from the host into its lane of the
        # word as it comes (the block RAM's write mask), not into a word
        # register first.
        if small:
            rx_wr, rx_rd = rx_mem.write_port(granularity=8), rx_mem.read_port()
        else:
            rx_wr, rx_rd = rx_mem.write_port(), rx_mem.read_port()
        tx_wr, tx_rd = tx_mem.write_port(), tx_mem.read_port()

        # ---- To the host: capture a TLP from the chip --------------------------
        tx_full = Signal()          # a whole TLP is in tx_mem
        tx_words = Signal(range(depth + 1))
        tx_seq = Signal()
        tx_sent = Signal()          # sent, waiting for its ACK
        acked = Signal()            # its ACK came; freed once no byte of it is left to send
        sending_data = Signal()
        if small:
            # No carry chain for a count of a few hundred thousand cycles.
            lfsr = LfsrTimer(self._retransmit + 1)
            timer = Signal(lfsr.width, init=lfsr.start)
        else:
            timer = Signal(range(self._retransmit + 1))

        if small:
            self._capture_words(m, tx_wr, tx_full, tx_words)
        else:
            self._capture_beats(m, tx_wr, tx_full, tx_words)

        # ---- Bytes out: control frames first, then the TLP frame ---------------
        # The sender works out each byte of a frame into `o_byte`, a register
        # the stuffer reads, so no path runs from the sender's state through
        # the byte's choice into the stuffing and the CRC in one cycle: the
        # UART takes a byte in ten bit times, so the register costs nothing.
        # The CRC takes in each byte as the stuffer takes it (`o_fold`).
        o_valid = Signal()
        o_byte = Signal(8)
        o_sof = Signal()            # the byte is SOF, not to be stuffed
        o_fold = Signal()           # the byte is in the frame's CRC
        o_taken = Signal()
        free = ~o_valid | o_taken
        g_ctrl = Signal(8)
        if not small:
            g_len = Signal(16)
        g_data = Signal()
        if small:
            # The frame's words stay in the buffer, counted, until it is freed.
            g_len = Mux(g_data, tx_words << 2, 0)
        g_crc = Signal(16)
        g_idx = Signal(range(depth + 1))
        g_byte_no = Signal(2)
        if not small:
            g_word = Signal(32)
            g_hdr4 = Signal()
        g_big = Signal()            # g_word is a header word: most significant byte first
        g_last_word = Signal()      # g_word is the frame's last

        def offer(byte, *, sof=0, fold=1):
            return [o_valid.eq(1), o_byte.eq(byte), o_sof.eq(sof), o_fold.eq(fold)]

        with m.If(o_taken):
            m.d.sync += o_valid.eq(0)
            with m.If(o_fold):
                m.d.sync += g_crc.eq(crc16_next(g_crc, o_byte))
        m.d.comb += tx_rd.addr.eq(g_idx)
        if small:
            m.d.comb += tx_rd.en.eq(0)
        with m.FSM(name="sender"):
            with m.State("IDLE"):
                with m.If(sync_req):
                    m.d.sync += [sync_req.eq(0), g_ctrl.eq(Kind.SYNC << 4), g_data.eq(0)]
                    m.next = "SOF"
                with m.Elif(nak_req):
                    m.d.sync += [nak_req.eq(0), g_ctrl.eq(Kind.NAK << 4), g_data.eq(0)]
                    m.next = "SOF"
                with m.Elif(ack_req):
                    m.d.sync += [ack_req.eq(0), g_ctrl.eq(Kind.ACK << 4 | ack_seq), g_data.eq(0)]
                    m.next = "SOF"
                with m.Elif(tx_full & ~tx_sent & ~acked):
                    m.d.sync += [g_ctrl.eq(Kind.TLP << 4 | tx_seq), g_data.eq(1),
                                 sending_data.eq(1)]
                    m.next = "SOF"
            with m.State("SOF"):
                # The byte before is the last frame's CRC, not folded.
                with m.If(free):
                    m.d.sync += [*offer(SOF, sof=1, fold=0), g_crc.eq(0xFFFF),
                                 *([] if small else [g_len.eq(Mux(g_data, tx_words << 2, 0))])]
                    m.next = "CTRL"
            with m.State("CTRL"):
                with m.If(free):
                    m.d.sync += offer(g_ctrl)
                    m.next = "LEN_HI"
            with m.State("LEN_HI"):
                with m.If(free):
                    m.d.sync += offer(g_len[8:])
                    m.next = "LEN_LO"
            with m.State("LEN_LO"):
                with m.If(free):
                    m.d.sync += [*offer(g_len[:8]), g_idx.eq(0)]
                    with m.If(g_data):
                        m.next = "READ"
                    with m.Else():
                        m.next = "CRC_HI"
            with m.State("READ"):
                # tx_mem's read port answers a cycle after its address.
                if small:
                    # ... and then holds the word while its bytes go.
                    m.d.comb += tx_rd.en.eq(1)
                m.next = "LOAD"
            with m.State("LOAD"):
                # Header words go most significant byte first (PCIe byte
                # order), payload words least significant first (address order).
                if small:
                    # A message's header is 3 words.
                    m.d.sync += [g_byte_no.eq(0), g_big.eq(g_idx < 3),
                                 g_last_word.eq(g_idx + 1 == tx_words)]
                else:
                    # (word 3 is a header word when the first word says so)
                    hdr4 = g_hdr4
                    m.d.sync += [g_word.eq(tx_rd.data), g_byte_no.eq(0),
                                 g_big.eq((g_idx < 3) | ((g_idx == 3) & hdr4)),
                                 g_last_word.eq(g_idx + 1 == tx_words)]
                    with m.If(g_idx == 0):
                        m.d.sync += g_hdr4.eq(tx_rd.data[29])
                m.next = "BYTES"
            with m.State("BYTES"):
                with m.If(free):
                    if small:
                        m.d.sync += [*offer(tx_rd.data.word_select(g_byte_no ^ Mux(g_big, 3, 0), 8)),
                                     g_byte_no.eq(g_byte_no + 1)]
                    else:
                        m.d.sync += [*offer(Mux(g_big, g_word[24:], g_word[:8])),
                                     g_word.eq(Mux(g_big, g_word << 8, g_word >> 8)),
                                     g_byte_no.eq(g_byte_no + 1)]
                    with m.If(g_byte_no == 3):
                        m.d.sync += g_idx.eq(g_idx + 1)
                        with m.If(g_last_word):
                            m.next = "CRC_HI"
                        with m.Else():
                            m.next = "READ"
            with m.State("CRC_HI"):
                # Once the frame's last byte is taken, and so in g_crc.
                with m.If(~o_valid):
                    m.d.sync += offer(g_crc[8:], fold=0)
                    m.next = "CRC_LO"
            with m.State("CRC_LO"):
                with m.If(free):
                    m.d.sync += offer(g_crc[:8], fold=0)
                    with m.If(g_data):
                        m.d.sync += [tx_sent.eq(1), sending_data.eq(0),
                                     timer.eq(lfsr.start if small else self._retransmit)]
                    m.next = "IDLE"

        # Byte stuffing: SOF and ESC inside a frame go as ESC, byte ^ 0x20.
        second = Signal(8)
        second_valid = Signal()
        special = ~o_sof & ((o_byte == SOF) | (o_byte == ESC))
        with m.If(second_valid):
            m.d.comb += [self.tx_byte.valid.eq(1), self.tx_byte.payload.eq(second)]
            with m.If(self.tx_byte.ready):
                m.d.sync += second_valid.eq(0)
        with m.Else():
            m.d.comb += [self.tx_byte.valid.eq(o_valid),
                         self.tx_byte.payload.eq(Mux(special, ESC, o_byte)),
                         o_taken.eq(o_valid & self.tx_byte.ready)]
            with m.If(o_taken & special):
                m.d.sync += [second.eq(o_byte ^ 0x20), second_valid.eq(1)]

        # The TLP frame's fate: ACK frees it (once no byte of it is left to
        # send), NAK or silence sends it again.
        with m.If(tx_sent & ~acked):
            with m.If(nak_in | (timer == (lfsr.last if small else 0))):
                m.d.sync += tx_sent.eq(0)
            with m.Else():
                m.d.sync += timer.eq(lfsr.step(timer) if small else timer - 1)
        with m.If(ack_in & (ack_in_seq == tx_seq) & tx_full & (tx_sent | sending_data)):
            m.d.sync += acked.eq(1)
        with m.If(acked & ~sending_data):
            m.d.sync += [tx_full.eq(0), tx_seq.eq(~tx_seq), acked.eq(0), tx_sent.eq(0)]

        # ---- From the host: frames in --------------------------------------------
        # Unstuffing, into registers (`got`, `val`, `sof`, `err`) the parser
        # reads a cycle later: SOF starts a frame wherever the receiver is.
        # A frame's length and its CRC are judged in the cycle after their
        # last byte (`check`, `judge`), from registers: a byte takes the UART
        # ten bit times, so the decisions cost nothing.
        esc = Signal()
        got = Signal()
        val = Signal(8)
        sof = Signal()
        err = Signal()
        m.d.sync += [got.eq(0), sof.eq(0), err.eq(self.rx_error)]
        with m.If(self.rx_byte.valid):
            with m.If(self.rx_byte.payload == SOF):
                m.d.sync += [sof.eq(1), esc.eq(0)]
            with m.Elif(self.rx_byte.payload == ESC):
                m.d.sync += esc.eq(1)
            with m.Else():
                m.d.sync += [got.eq(1), val.eq(self.rx_byte.payload ^ Mux(esc, 0x20, 0)), esc.eq(0)]

        HUNT, CTRL, LEN_HI, LEN_LO, PAYLOAD, CRC_HI, CRC_LO = range(7)
        pstate = Signal(range(7))
        ctrl = Signal(8)
        length = Signal(16)
        most = 4 * depth
        if small:
            # No payload byte comes before a length past the buffer is refused.
            count = Signal(range(most + 1))
        else:
            count = Signal(16)
            first = Signal()            # the next payload byte is the TLP's first
        final = Signal()            # the next payload byte is the frame's last
        check = Signal()            # the length came in the cycle before
        # The length's high byte against the limits and the control byte's
        # form, worked out as the length's low byte comes in.
        hi_zero = Signal()
        hi_below = Signal()
        hi_at = Signal()
        ctrl_ok = Signal()
        judge = Signal()            # the CRC's last byte came in the cycle before
        crc = Signal(16)
        if not small:
            word = Signal(32)
            hdr4 = Signal()
        rx_full = Signal()          # a checked TLP waits in rx_mem to go to the chip
        rx_last = Signal(range(depth))     # the index of its last word
        rx_seq = Signal()
        expected = Signal()         # sequence bit of the next new TLP frame
        kind = ctrl[4:]
        is_tlp = kind == Kind.TLP
        bad = Signal()
        m.d.comb += self.bad_frame.eq(bad)
        m.d.sync += [check.eq(0), judge.eq(0)]

        with m.If(got):
            m.d.sync += crc.eq(crc16_next(crc, val))
            with m.Switch(pstate):
                with m.Case(CTRL):
                    m.d.sync += [ctrl.eq(val), pstate.eq(LEN_HI)]
                with m.Case(LEN_HI):
                    m.d.sync += [length[8:].eq(val), pstate.eq(LEN_LO),
                                 hi_zero.eq(val == 0), hi_below.eq(val < most >> 8),
                                 hi_at.eq(val == most >> 8),
                                 ctrl_ok.eq((ctrl[1:4] == 0) & (kind >= Kind.TLP) & (kind <= Kind.SYNC))]
                with m.Case(LEN_LO):
                    m.d.sync += [length[:8].eq(val), count.eq(0), *([] if small else [first.eq(1)]),
                                 final.eq(0), check.eq(1)]
                    with m.If(is_tlp & rx_full):
                        # Still passing the last TLP on: the host sends this
                        # one again when no ACK comes.
                        m.d.sync += pstate.eq(HUNT)
                    with m.Elif(is_tlp):
                        m.d.sync += pstate.eq(PAYLOAD)
                    with m.Else():
                        m.d.sync += pstate.eq(CRC_HI)
                with m.Case(PAYLOAD):
                    if small:
                        # A message's header is 3 words: byte k of a header
                        # word is its lane 3 - k, of a data word lane k.
                        lane = count[:2] ^ Mux(count[2:] < 3, 3, 0)
                        m.d.sync += [count.eq(count + 1), final.eq(count + 2 == length)]
                        m.d.comb += [rx_wr.addr.eq(count[2:]), rx_wr.data.eq(val.replicate(4)),
                                     rx_wr.en.eq(Const(1, 4) << lane)]
                    else:
                        big = count[2:] < Mux(Mux(first, val[5], hdr4), 4, 3)
                        new_word = Mux(big, Cat(val, word[:24]), Cat(word[8:], val))
                        m.d.sync += [word.eq(new_word), count.eq(count + 1), first.eq(0),
                                     final.eq(count + 2 == length)]
                        with m.If(first):
                            m.d.sync += hdr4.eq(val[5])
                        m.d.comb += [rx_wr.addr.eq(count[2:]), rx_wr.data.eq(new_word),
                                     rx_wr.en.eq(count[:2] == 3)]
                    with m.If(final):
                        m.d.sync += pstate.eq(CRC_HI)
                with m.Case(CRC_HI):
                    m.d.sync += pstate.eq(CRC_LO)
                with m.Case(CRC_LO):
                    m.d.sync += [pstate.eq(HUNT), judge.eq(1)]
        with m.If(err & (pstate != HUNT)):
            m.d.comb += bad.eq(1)
            m.d.sync += [nak_req.eq(1), pstate.eq(HUNT)]
        with m.If(check):
            # A TLP's length is whole words, at least a 3-word header and at
            # most the buffer (no word is written before this cycle: a word is
            # written with its fourth byte); other kinds are empty.
            lo = length[:8]
            size_ok = Mux(is_tlp, (lo[:2] == 0) & (~hi_zero | (lo >= 12)) &
                          (hi_below | hi_at & (lo <= (most & 0xFF))),
                          hi_zero & (lo == 0))
            with m.If(~size_ok | ~ctrl_ok):
                m.d.comb += bad.eq(1)
                m.d.sync += [nak_req.eq(1), pstate.eq(HUNT)]
        with m.If(judge):
            with m.If(crc != 0):
                m.d.comb += bad.eq(1)
                m.d.sync += nak_req.eq(1)
            with m.Elif(is_tlp):
                with m.If(ctrl[0] == expected):
                    m.d.sync += [rx_full.eq(1), rx_last.eq(length[2:] - 1), rx_seq.eq(ctrl[0]),
                                 expected.eq(~expected)]
                with m.Else():
                    m.d.sync += [ack_req.eq(1), ack_seq.eq(ctrl[0])]
            with m.Elif(kind == Kind.ACK):
                m.d.comb += [ack_in.eq(1), ack_in_seq.eq(ctrl[0])]
            with m.Elif(kind == Kind.NAK):
                m.d.comb += nak_in.eq(1)
            with m.Else():
                m.d.sync += [expected.eq(0), sync_req.eq(1)]
        with m.If(sof):
            m.d.sync += [pstate.eq(CTRL), crc.eq(0xFFFF)]

        # ---- To the chip: the checked TLP, link_dw words a beat ------------------
        ridx = Signal(range(depth + 1))
        slot = Signal(range(dw + 1))
        if small:
            # The read port holds the word it read until the next READ.
            beat_last = Signal()
            f_last = Signal()
            m.d.comb += [rx_rd.addr.eq(ridx), rx_rd.en.eq(0),
                         self.tlp_out.payload.data.eq(rx_rd.data),
                         self.tlp_out.payload.keep.eq(1),
                         self.tlp_out.payload.last.eq(beat_last)]
            self._forward_words(m, rx_rd, ridx, beat_last, f_last, rx_full, rx_last, rx_seq,
                                ack_req, ack_seq)
            return m
        beat_data = Signal(32 * dw)
        beat_keep = Signal(dw)
        beat_last = Signal()
        f_last = Signal()           # the word being read is the TLP's last
        m.d.comb += [rx_rd.addr.eq(ridx),
                     self.tlp_out.payload.data.eq(beat_data),
                     self.tlp_out.payload.keep.eq(beat_keep),
                     self.tlp_out.payload.last.eq(beat_last)]
        with m.FSM(name="forward"):
            with m.State("IDLE"):
                with m.If(rx_full):
                    m.d.sync += [ridx.eq(0), slot.eq(0), beat_keep.eq(0)]
                    m.next = "READ"
            with m.State("READ"):
                m.d.sync += f_last.eq(ridx == rx_last)
                m.next = "PLACE"
            with m.State("PLACE"):
                with m.Switch(slot):
                    for i in range(dw):
                        with m.Case(i):
                            m.d.sync += [beat_data.word_select(i, 32).eq(rx_rd.data),
                                         beat_keep[i].eq(1)]
                m.d.sync += [ridx.eq(ridx + 1), slot.eq(slot + 1)]
                with m.If(f_last | (slot == dw - 1)):
                    m.d.sync += beat_last.eq(f_last)
                    m.next = "SEND"
                with m.Else():
                    m.next = "READ"
            with m.State("SEND"):
                m.d.comb += self.tlp_out.valid.eq(1)
                with m.If(self.tlp_out.ready):
                    m.d.sync += [slot.eq(0), beat_keep.eq(0)]
                    with m.If(beat_last):
                        m.d.sync += [rx_full.eq(0), ack_req.eq(1), ack_seq.eq(rx_seq)]
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "READ"
        return m

    def _capture_words(self, m, tx_wr, tx_full, tx_words):
        # A word from the chip goes into the buffer in the cycle it comes.
        depth = self._max_words
        widx = Signal(range(depth + 1))
        take = self.tlp_in.valid & ~tx_full
        m.d.comb += [self.tlp_in.ready.eq(~tx_full),
                     tx_wr.addr.eq(widx), tx_wr.data.eq(self.tlp_in.payload.data),
                     tx_wr.en.eq(take & (widx < depth))]
        with m.If(take):
            m.d.sync += widx.eq(widx + 1)
            with m.If(self.tlp_in.payload.last):
                m.d.sync += [tx_words.eq(widx + 1), tx_full.eq(1), widx.eq(0)]

    def _capture_beats(self, m, tx_wr, tx_full, tx_words):
        dw, depth = self._dw, self._max_words
        cap_data = Signal(32 * dw)
        cap_keep = Signal(dw)
        cap_last = Signal()
        cap_slot = Signal(range(dw + 1))
        widx = Signal(range(depth + 1))
        with m.FSM(name="capture"):
            with m.State("TAKE"):
                m.d.comb += self.tlp_in.ready.eq(~tx_full)
                with m.If(self.tlp_in.valid & ~tx_full):
                    m.d.sync += [cap_data.eq(self.tlp_in.payload.data),
                                 cap_keep.eq(self.tlp_in.payload.keep),
                                 cap_last.eq(self.tlp_in.payload.last), cap_slot.eq(0)]
                    m.next = "WRITE"
            with m.State("WRITE"):
                # keep is contiguous from word 0: words up to the first clear
                # bit (a one-word link's beat is its one word).
                m.d.comb += [tx_wr.addr.eq(widx), tx_wr.data.eq(cap_data.word_select(cap_slot, 32)),
                             tx_wr.en.eq(widx < depth)]
                m.d.sync += [widx.eq(widx + 1), cap_slot.eq(cap_slot + 1)]
                beat_done = cap_slot == dw - 1
                if dw > 1:
                    beat_done |= ~cap_keep.bit_select(cap_slot + 1, 1)
                with m.If(beat_done):
                    with m.If(cap_last):
                        m.d.sync += [tx_full.eq(1), tx_words.eq(widx + 1), widx.eq(0)]
                    m.next = "TAKE"

    def _forward_words(self, m, rx_rd, ridx, beat_last, f_last, rx_full, rx_last, rx_seq,
                       ack_req, ack_seq):
        # The cycles of the wide form's READ, PLACE and SEND, a word a beat.
        with m.FSM(name="forward"):
            with m.State("IDLE"):
                with m.If(rx_full):
                    m.d.sync += ridx.eq(0)
                    m.next = "READ"
            with m.State("READ"):
                m.d.comb += rx_rd.en.eq(1)
                m.d.sync += f_last.eq(ridx == rx_last)
                m.next = "PLACE"
            with m.State("PLACE"):
                m.d.sync += [ridx.eq(ridx + 1), beat_last.eq(f_last)]
                m.next = "SEND"
            with m.State("SEND"):
                m.d.comb += self.tlp_out.valid.eq(1)
                with m.If(self.tlp_out.ready):
                    with m.If(beat_last):
                        m.d.sync += [rx_full.eq(0), ack_req.eq(1), ack_seq.eq(rx_seq)]
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "READ"
