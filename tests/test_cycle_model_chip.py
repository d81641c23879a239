"""The cycle model behind the host link (`HostLink`) against the whole chip's RTL:
compiled programs run through `tpu.driver` with a deterministic host, counter for
counter, on Icarus and Verilator."""

import pytest

from tpu.bench.common import dense_graph, random_feed
from tpu.compiler.backend import compile_graph
from tpu.config import TPUConfig
from tpu.sim.models.cycle_model import HostLink, _rhm_link_end, estimate_cycles
from tpu.sim.models.link_model import LinkTiming


CONFIG = TPUConfig()

# (K, N, batch, host latency): the RTL's cycles, measured, and what each exercises.
CASES = {
    # 12 instructions (one fetch read), RHMs of 256 and 72 bytes, a 128-byte WHM
    "gemm 16x16x8": (16, 8, 16, 0, 326),
    # 65 instructions (five fetch reads interleaved with RHMs), 512-byte RHMs,
    # WHMs of two 256-byte writes each
    "gemm 64x64x24": (64, 24, 64, 0, 2428),
    # 154 instructions: fetch reads that must go on tx before a WHM's writes
    "gemm 11x64x64": (64, 64, 11, 0, 2249),
    # every read 200 cycles late
    "gemm 16x16x8, host latency 200": (16, 8, 16, 200, 923),
    "gemm 11x64x64, host latency 200": (64, 64, 11, 200, 3045),
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
