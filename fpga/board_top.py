"""The whole chip on a board: `SerialChip` on the board's FTDI UART, with LEDs.

The chip's clock is the board's default (`BOARD_CLOCK_HZ`) or what the
caller asks for. On the iCEBreaker it is the 12 MHz oscillator by default
(no routed result of the chip there yet), and any other clock is made by
the iCE40's PLL from it (`tpu.fpga.ice40_pll`, ``SB_PLL40_PAD`` on the
oscillator's pin); the chip is held in reset until the PLL locks and
15 us more (the iCE40's block RAMs read zeros for about 3 us after
configuration, as Amaranth's own iCE40 clock domain allows). On the ULX3S
the ECP5's PLL makes the chip clock (by default below the chip's routed
Fmax: `tpu.fpga.routed_clocks`) from the 25 MHz oscillator
(`tpu.fpga.ecp5_pll`), and the chip is held in reset (the ECP5's global
set/reset, as Amaranth's own clock domain does it) until the PLL locks.
The UART divisor is the chip clock over the baud rate, rounded. The LEDs
(docs/fpga.md):

==========  ===========================  =============================
signal      iCEBreaker                   ULX3S
==========  ===========================  =============================
busy        break-off PMOD LED 2         LED 1
halted      green LED (and PMOD LED 3)   LED 2
error       red LED (and PMOD LED 4)     LED 3
link error  PMOD LED 5                   LED 4
heartbeat   PMOD LED 6                   LED 0
==========  ===========================  =============================

`link error` lights for about a second after a frame from the host arrived
damaged; `heartbeat` blinks at 1 to 2 Hz while the clock runs.
"""

from amaranth import *
from amaranth.build import ResourceError
from amaranth.lib import io

from ..hdl.serial_chip import SerialChip, retransmit_cycles
from .ecp5_pll import ECP5PLL, ecp5_pll_outputs, ecp5_pll_settings
from .ice40_pll import ICE40PLL, ICE40PLLSettings, LockReset, ice40_pll_outputs, ice40_pll_settings
from .routed_clocks import MARGIN, MATRIX_PART_ROUTED, fastest_clock_within, latest_routed


__all__ = ["BoardChip", "BoardTop", "BOARD_LEDS", "BOARD_OSCILLATOR_HZ", "BOARD_CLOCK_HZ", "board_clock",
           "board_clocks", "default_clock_hz", "heartbeat_bits", "matrix_part_clock_hz", "serial_options",
           "uart_divisor"]

#: board -> the frequency of its oscillator (the platform's default clock)
BOARD_OSCILLATOR_HZ = {"icebreaker": 12e6, "ulx3s-85f": 25e6}

#: boards whose top makes the chip clock with a PLL -> the function that
#: sets the PLL up, (oscillator Hz, chip clock Hz) -> settings
_PLLS = {"ulx3s-85f": ecp5_pll_settings, "icebreaker": ice40_pll_settings}

#: boards whose top has a PLL -> the function listing what it makes from
#: the oscillator (Hz, ascending)
_PLL_OUTPUTS = {"ulx3s-85f": ecp5_pll_outputs, "icebreaker": ice40_pll_outputs}


def board_clocks(board):
    """Every chip clock (Hz) `board`'s top makes: its oscillator and, with a
    PLL, the PLL's outputs."""
    oscillator = BOARD_OSCILLATOR_HZ[board]
    outputs = _PLL_OUTPUTS[board](oscillator) if board in _PLL_OUTPUTS else []
    return [float(oscillator), *outputs]


def default_clock_hz(board, profile=None):
    """The chip clock `board`'s top gets unless told (Hz): the fastest it
    makes at or below the slowest routed Fmax of the latest recorded builds
    of `profile` (of the board's chips without a profile when `profile` has
    none: the up5k profile is the small chip's) less `MARGIN`
    (`tpu.fpga.routed_clocks`); the oscillator rather than the PLL when both
    make it. The board's oscillator when nothing is recorded (the
    iCEBreaker: its chip has not been routed yet). A clock one of those
    builds was asked for and met, when faster, is the default instead: a
    build of that tree at that clock is the same netlist, target and seed,
    which nextpnr places and routes the same way, so the margin for a new
    placement is not needed."""
    routed = latest_routed(board, profile) or latest_routed(board, None)
    clock = _clock_below(board, routed[0] if routed else None)
    met = [r.target_mhz * 1e6 for r in routed if r.fmax_mhz >= r.target_mhz]
    # Targets are recorded as rounded MHz: match them to what the top makes.
    made = [hz for hz in board_clocks(board) if any(abs(hz - target) < 1e3 for target in met)]
    return max([clock, *made])


def matrix_part_clock_hz(board):
    """The clock `board`'s matrix part (`tpu build --top matrix`) gets unless
    told (Hz): the fastest the board makes at or below its latest routed
    Fmax less `MARGIN` (`tpu.fpga.routed_clocks.MATRIX_PART_ROUTED`), the
    oscillator when it makes that or nothing is recorded."""
    return _clock_below(board, MATRIX_PART_ROUTED.get(board))


def _clock_below(board, routed):
    """The fastest clock `board` makes at or below `routed`'s Fmax less
    `MARGIN` (Hz): the oscillator rather than the PLL when both make it, and
    when `routed` is None."""
    oscillator = float(BOARD_OSCILLATOR_HZ[board])
    if routed is None:
        return oscillator
    limit = routed.fmax_mhz * 1e6 * (1 - MARGIN)
    best = fastest_clock_within(board_clocks(board), limit)
    if best is None:
        raise ValueError(f"the {board} top makes no clock at or below {limit / 1e6:g} MHz")
    return oscillator if abs(best - oscillator) < 1 else best


#: board -> the chip clock it gets unless told (a profile's own default is
#: `default_clock_hz(board, profile)`): chosen from the routed results of
#: `tpu.fpga.routed_clocks` with a margin. On the ULX3S 18.75 MHz, below what
#: the 2x2 chip reached after routing (19.89 MHz against a 20 MHz target,
#: 20.73 against 18.75: docs/fpga.md); on the iCEBreaker its oscillator.
BOARD_CLOCK_HZ = {board: default_clock_hz(board) for board in BOARD_OSCILLATOR_HZ}

#: board -> {signal: [LED resource numbers]} (``led`` resources of the platform)
BOARD_LEDS = {
    "icebreaker": {"halted": [1, 3], "error": [0, 4], "busy": [2], "link_error": [5],
                   "heartbeat": [6]},
    "ulx3s-85f": {"heartbeat": [0], "busy": [1], "halted": [2], "error": [3], "link_error": [4]},
}


def uart_divisor(clock_hz, baudrate):
    """Clock cycles per UART bit, or ValueError when the rate is more than
    2% off what the clock can make (or needs fewer than 4 cycles a bit)."""
    divisor = round(clock_hz / baudrate)
    if divisor < 4:
        raise ValueError(f"{baudrate:g} baud is too fast for a {clock_hz / 1e6:g} MHz clock: "
                         f"the UART needs at least 4 clock cycles a bit")
    error = abs(clock_hz / divisor - baudrate) / baudrate
    if error > 0.02:
        raise ValueError(f"{baudrate:g} baud is {100 * error:.1f}% off what a {clock_hz / 1e6:g} MHz "
                         f"clock makes (divisor {divisor}); choose another baud rate")
    return divisor


def board_clock(board, clock_hz=None):
    """(the chip clock in Hz, the PLL settings or None) for `board` asked to
    run at `clock_hz` (None: the board's default), or ValueError (one line)
    for a clock the board cannot make. The clock is what the PLL makes, which
    may differ from `clock_hz` by up to its tolerance (the ECP5's 0.1%,
    the iCE40's 1%)."""
    if board not in BOARD_LEDS:
        raise ValueError(f"unknown board {board!r}: choose one of {', '.join(BOARD_LEDS)}")
    oscillator = BOARD_OSCILLATOR_HZ[board]
    if clock_hz is None:
        clock_hz = BOARD_CLOCK_HZ[board]
    if isinstance(clock_hz, bool) or not isinstance(clock_hz, (int, float)) or not clock_hz > 0:
        raise ValueError(f"the chip clock must be a positive number of Hz, not {clock_hz!r}")
    if clock_hz == oscillator:
        return float(oscillator), None
    if board not in _PLLS:
        raise ValueError(f"the {board} top runs the chip from its {oscillator / 1e6:g} MHz "
                         f"oscillator, not {clock_hz / 1e6:g} MHz: it has no PLL")
    settings = _PLLS[board](oscillator, clock_hz)
    return settings.output_hz, settings


def heartbeat_bits(clock_hz):
    """The width of the heartbeat's free-running counter at `clock_hz`: its
    top bit turns every ``2 ** (bits - 1)`` cycles, between a quarter and
    half a second, so the LED blinks at 1 to 2 Hz."""
    return max(2, int(clock_hz).bit_length() - 1)


def connect_board_io(m, platform, board, chip, clock_hz, signals):
    """Put `chip`'s ``rx`` and ``tx`` on `board`'s FTDI UART and `signals`
    (LED name -> signal) with a heartbeat blinking at 1 to 2 Hz (`heartbeat_bits`)
    on its LEDs (`BOARD_LEDS`); an LED whose signal is not given, or whose
    pin the platform lacks, is left off."""
    uart = platform.request("uart", 0, dir="-")
    m.submodules.rx = rx = io.Buffer("i", uart.rx)
    m.submodules.tx = tx = io.Buffer("o", uart.tx)
    m.d.comb += [chip.rx.eq(rx.i), tx.o.eq(chip.tx)]

    # A free-running counter whose top bit blinks: one carry chain, no
    # compare-and-reload (a 24-bit down counter reloaded at zero was the
    # iCEBreaker matrix part's critical path, 55 ns).
    heartbeat = Signal(heartbeat_bits(clock_hz))
    m.d.sync += heartbeat.eq(heartbeat + 1)
    signals = {**signals, "heartbeat": heartbeat[-1]}
    for name, leds in BOARD_LEDS[board].items():
        if name not in signals:
            continue
        for n in leds:
            try:
                pin = platform.request("led", n, dir="-")
            except ResourceError:
                continue            # e.g. the iCEBreaker's break-off PMOD is not fitted
            m.submodules[f"led_{n}"] = buffer = io.Buffer("o", pin)
            m.d.comb += buffer.o.eq(signals[name])


def serial_options(clock_hz, baudrate, retransmit):
    """The ``divisor``, ``retransmit`` and ``led_hold`` of a `SerialTop` on a
    board at `clock_hz` and `baudrate` (`uart_divisor`); `retransmit(divisor,
    host_latency_cycles)` is the top's rule for the cycles before a frame
    goes again. The link-error LED stays on for a second."""
    divisor = uart_divisor(clock_hz, baudrate)
    # A host's round trip through USB and the OS: allow 50 ms.
    return {"divisor": divisor, "retransmit": retransmit(divisor, int(0.05 * clock_hz)),
            "led_hold": int(clock_hz)}


class BoardTop(Elaboratable):
    """A `SerialTop` made by `make_top(config, divisor=..., retransmit=...,
    led_hold=...)` on `board`'s UART and LEDs, at `baudrate`, with a clock
    of `clock_hz` (from the PLL of settings `pll`, or the oscillator when
    None): what `BoardChip` and `BoardMatrixPart` share. `retransmit(divisor,
    host_latency_cycles)` gives the cycles before a frame goes again.

    ``chip`` is the top; ``serial_options`` the ``divisor``, ``retransmit``
    and ``led_hold`` it was made with (`serial_options`); each of ``busy``, ``halted``,
    ``error`` and ``link_error`` it has lights its LEDs (`BOARD_LEDS`).
    """

    def __init__(self, board, config, make_top, retransmit, *, clock_hz, baudrate, pll=None):
        if board not in BOARD_LEDS:
            raise ValueError(f"unknown board {board!r}: choose one of {', '.join(BOARD_LEDS)}")
        self.board = board
        self.config = config
        self.clock_hz = clock_hz
        self.baudrate = baudrate
        self.pll = pll
        self.serial_options = serial_options(clock_hz, baudrate, retransmit)
        self.chip = make_top(config, **self.serial_options)

    def elaborate(self, platform):
        m = Module()
        if self.pll is not None:
            self._clock_from_pll(m, platform)
        m.submodules.chip = chip = self.chip
        members = chip.signature.members
        connect_board_io(m, platform, self.board, chip, self.clock_hz,
                         {name: getattr(chip, name) for name in ("busy", "halted", "error", "link_error")
                          if name in members})
        return m

    def _clock_from_pll(self, m, platform):
        if isinstance(self.pll, ICE40PLLSettings):
            self._clock_from_ice40_pll(m, platform)
        else:
            self._clock_from_ecp5_pll(m, platform)

    def _clock_from_ice40_pll(self, m, platform):
        # The sync domain, driven by the PLL, as Amaranth's iCE40 platform
        # makes it from the oscillator: in reset until 15 us after the PLL
        # has locked (its LOCK brought into the PLL's clock by two
        # flip-flops), and again should it lose lock.
        clk_pin = platform.request(platform.default_clk, dir="-")
        m.submodules.pll = pll = ICE40PLL(self.pll, clk_pin.io)
        m.domains.por = ClockDomain("por", reset_less=True, local=True)
        m.d.comb += ClockSignal("por").eq(pll.clk_out)
        m.submodules.lock_reset = lock = DomainRenamer("por")(LockReset(int(15e-6 * self.clock_hz)))
        m.d.comb += lock.locked.eq(pll.locked)
        m.domains.sync = sync = ClockDomain("sync")
        m.d.comb += [sync.clk.eq(pll.clk_out), sync.rst.eq(~lock.ready)]
        platform.add_clock_constraint(sync.clk, self.clock_hz)

    def _clock_from_ecp5_pll(self, m, platform):
        # The sync domain, driven by the PLL, as Amaranth's ECP5 platform makes
        # it from the oscillator: reset-less, every flip-flop held by the
        # global set/reset (SGSR) until two cycles after the PLL has locked.
        clk_pin = platform.request(platform.default_clk, dir="-")
        m.submodules.clk_buf = clk_buf = io.Buffer("i", clk_pin)
        m.submodules.pll = pll = ECP5PLL(self.pll)
        m.d.comb += pll.clk_in.eq(clk_buf.i)
        locked0, locked1 = Signal(), Signal()
        m.submodules += [
            Instance("FD1S3AX", p_GSR="DISABLED", i_CK=pll.clk_out, i_D=pll.locked, o_Q=locked0),
            Instance("FD1S3AX", p_GSR="DISABLED", i_CK=pll.clk_out, i_D=locked0, o_Q=locked1),
            Instance("SGSR", i_CLK=pll.clk_out, i_GSR=locked1),
        ]
        m.domains.sync = ClockDomain("sync", reset_less=True)
        m.d.comb += ClockSignal("sync").eq(pll.clk_out)


class BoardChip(BoardTop):
    """`SerialChip(config)` on `board`'s UART and LEDs, at `baudrate`, with
    a chip clock of `clock_hz` (None: `BOARD_CLOCK_HZ`; `board_clock`).
    ``clock_hz`` is the clock as made, ``pll`` the PLL settings or None."""

    def __init__(self, board, config, *, clock_hz=None, baudrate=115200):
        clock_hz, pll = board_clock(board, clock_hz)
        super().__init__(board, config, SerialChip,
                         lambda divisor, latency: retransmit_cycles(config, divisor, latency),
                         clock_hz=clock_hz, baudrate=baudrate, pll=pll)
