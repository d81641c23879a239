# amaranth: UnusedElaboratable=no
"""`SerialPort` alone, in Amaranth's simulator: its constructor's checks and
defaults, a frame on the UART line through to the link stream and its ACK
back, and the link-error LED held for `led_hold` cycles after a damaged
frame."""

import gc
import warnings

import pytest
from amaranth.hdl import Fragment, UnusedElaboratable
from amaranth.sim import Simulator

from tpu import TPUConfig
from tpu.driver.serial_framing import Deframer, Frame, Kind, encode_frame
from tpu.driver.tlp_bytes import memory_write
from tpu.hdl.serial_chip import SerialChip, max_tlp_words, retransmit_cycles
from tpu.hdl.serial_matrix_part import BRIDGE_WORDS, SerialMatrixPart, part_retransmit_cycles
from tpu.hdl.serial_port import SerialPort, frame_retransmit_cycles
from tpu.hdl.verilog import port_map


GOOD = {"link_dw": 1, "max_words": 5, "divisor": 4, "retransmit": 500, "led_hold": 3}


@pytest.mark.parametrize("changes, message", [
    ({"divisor": 3}, "the UART divisor .* at least 4, not 3"),
    ({"divisor": 4.0}, "the UART divisor .* not 4.0"),
    ({"link_dw": 3}, "link_dw must be 1, 2, 4 or 8, not 3"),
    ({"max_words": 3}, "max_words must be an int from 4 to 16383, not 3"),
    ({"max_words": "5", "retransmit": None}, "max_words must be an int from 4 to 16383, not '5'"),
    ({"retransmit": 0}, "retransmit_cycles must be a positive int, not 0"),
    ({"led_hold": 0}, "led_hold must be a positive int below 2\\*\\*32, not 0"),
    ({"led_hold": 2**32}, "led_hold must be a positive int below 2\\*\\*32, not 4294967296"),
])
def test_bad_parameters_are_named(changes, message):
    with pytest.raises(ValueError, match=message):
        SerialPort(**{**GOOD, **changes})


def test_default_retransmit_is_four_longest_frames():
    port = SerialPort(link_dw=1, max_words=5, divisor=8)
    assert port.retransmit == frame_retransmit_cycles(5, 8) == 4 * (6 + 4 * 5) * 10 * 8
    assert frame_retransmit_cycles(5, 8, 100) == port.retransmit + 100
    config = TPUConfig(rows=2, cols=2)
    assert retransmit_cycles(config, 8, 7) == frame_retransmit_cycles(max_tlp_words(config), 8, 7)
    assert part_retransmit_cycles(8, 7) == frame_retransmit_cycles(BRIDGE_WORDS, 8, 7)


def test_the_chip_and_the_part_check_their_port():
    with pytest.raises(ValueError, match="not 2"):
        SerialChip(TPUConfig(rows=2, cols=2), divisor=2)
    with pytest.raises(ValueError, match="led_hold must be a positive int below 2\\*\\*32, not -1"):
        SerialMatrixPart(TPUConfig(rows=2, cols=2, acc_rows=16, ub_rows=32, weight_mem_tiles=4,
                                   weight_fifo_tiles=1), led_hold=-1)


def test_a_top_read_but_never_elaborated_leaves_no_unused_port():
    """`port_map` reads a top's signature without elaborating it (and
    silences the top); the `SerialPort` inside must not then warn that it
    was never used."""
    Fragment.get(SerialPort(**GOOD), None)      # warnings of unused designs are on after one elaboration
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        port_map(SerialChip(TPUConfig(rows=2, cols=2)))
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, UnusedElaboratable)], \
        [str(w.message) for w in caught]


def _bits(data, divisor):
    """The UART line for `data`: start bit, 8 data bits LSB first, stop bit."""
    for byte in data:
        for bit in [0] + [byte >> i & 1 for i in range(8)] + [1]:
            yield from [bit] * divisor


def _bytes(line, divisor):
    """Bytes on a sampled UART line (each bit read in its middle)."""
    out, i = bytearray(), 0
    while i < len(line):
        if line[i] == 0 and i + 10 * divisor <= len(line):
            out.append(sum(line[i + divisor // 2 + (k + 1) * divisor] << k for k in range(8)))
            i += 10 * divisor - 1
        i += 1
    return bytes(out)


def test_frame_through_and_led_hold():
    """A good TLP frame comes out on `tlp_out` as its words and is ACKed on
    `tx`; a damaged one lights `link_error` for exactly `led_hold` cycles."""
    divisor, led_hold = 4, 37
    dut = SerialPort(link_dw=1, max_words=5, divisor=divisor, led_hold=led_hold)
    tlp = memory_write(0x14, (0x7E7D0102).to_bytes(4, "little"))
    damaged = bytearray(encode_frame(Kind.TLP, 1, tlp))
    damaged[5] ^= 0x04
    line = list(_bits(encode_frame(Kind.TLP, 0, tlp), divisor)) + [1] * 400 + \
        list(_bits(damaged, divisor)) + [1] * 400
    words, tx, lit = [], [], []

    async def bench(ctx):
        ctx.set(dut.tlp_out.ready, 1)
        for bit in line:
            ctx.set(dut.rx, bit)
            await ctx.tick()
            if ctx.get(dut.tlp_out.valid):
                words.append(ctx.get(dut.tlp_out.payload.data))
            tx.append(ctx.get(dut.tx))
            lit.append(ctx.get(dut.link_error))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    header = [int.from_bytes(tlp[i:i + 4], "big") for i in range(0, 12, 4)]
    assert words == header + [0x7E7D0102], [hex(w) for w in words]
    assert Deframer().feed(_bytes(tx, divisor)) == [Frame(Kind.ACK, 0), Frame(Kind.NAK, 0)]
    assert sum(lit) == led_hold, f"link_error lit {sum(lit)} cycles, not {led_hold}"
    first = lit.index(1)
    assert lit[first:first + led_hold] == [1] * led_hold, "link_error went off early"
    assert first > len(line) - 400 - divisor * 10, "link_error lit before the damaged frame ended"


def test_led_lights_the_cycle_after_a_damaged_frame(monkeypatch):
    """`link_error` lights in the cycle after the bridge flags a damaged
    frame (`bad_frame`, seen inside the port) and stays lit `led_hold` cycles."""
    import tpu.hdl.serial_port as serial_port
    bridges = []

    class SeenBridge(serial_port.SerialBridge):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            bridges.append(self)

    monkeypatch.setattr(serial_port, "SerialBridge", SeenBridge)
    divisor, led_hold = 4, 5
    dut = SerialPort(link_dw=1, max_words=5, divisor=divisor, led_hold=led_hold)
    damaged = bytearray(encode_frame(Kind.TLP, 0, memory_write(0x14, bytes(4))))
    damaged[6] ^= 0x10
    line = list(_bits(damaged, divisor)) + [1] * 200
    bad, lit = [], []

    async def bench(ctx):
        ctx.set(dut.tlp_out.ready, 1)
        for bit in line:
            ctx.set(dut.rx, bit)
            await ctx.tick()
            bad.append(ctx.get(bridges[0].bad_frame))
            lit.append(ctx.get(dut.link_error))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert sum(bad) == 1, f"the bridge flagged {sum(bad)} damaged frames, not 1"
    flagged = bad.index(1)
    assert lit[:flagged + 1] == [0] * (flagged + 1), "link_error lit before the frame was flagged"
    assert lit[flagged + 1:flagged + 2 + led_hold] == [1] * led_hold + [0], \
        f"link_error after the flag at cycle {flagged}: {lit[flagged + 1:flagged + 3 + led_hold]}"
