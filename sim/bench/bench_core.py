"""cocotb benchmark of the whole core: MXU utilisation and the counter breakdown.

Launched by `tpu.sim.harness.run` (see ``scripts/bench_core.py`` and
``tests/test_core_cycles_rtl.py``). It reuses `tpu.sim.testbenches.tb_core.TB` with a host
that never stalls and an instruction stream that never idles, runs one
benchmark program (`PROGRAMS`), checks what it computed against the golden
chip model, and writes the performance counters, the matrix phase and the
estimate of `tpu.models.cycle_model.estimate_cycles` as JSON.

Every counter is taken as the difference between its value in the cycle the
first instruction is offered and its value once the core has halted and
``rows + cols + 40`` more cycles have passed (``weight_shift`` goes on
counting the tiles that arrive after the halt), so the cycles the testbench
spends filling weight memory are not counted. Cycle 0 is the cycle in which
the first instruction is offered on ``instr``. The matrix phase runs from the
first row into the systolic array to the last.

Environment:

``TPU_BENCH_OUT``
    JSON file the result is merged into, under the case's name.
``TPU_BENCH_CASE``
    JSON: ``{"name": ..., "program": <key of PROGRAMS>, <builder arguments>}``.
``TPU_BENCH_TRACE``
    Optional file: a per-cycle trace of internal handshakes (issue to each
    unit, rows into the array, weight beats), for analysing where cycles go.
"""

import json
import os
import random

import cocotb
import numpy as np

from ...hdl.core import COUNTERS
from ...isa import Act, Func, Halt, Mmc, Rhm, Rw, Whm, encode_program
from ...models.cycle_model import estimate_cycles
from ..stimulus.program_generator import random_program
from ..testbenches.tb_core import TB, CounterMirror, counter_values


__all__ = ["PROGRAMS", "CASE_NAMES", "TOP", "stream_program", "layer_program", "random_case",
           "asm_case", "encoded_case", "build_case", "cases", "HOST_IN", "HOST_OUT"]

HOST_IN = 0x10000
HOST_OUT = 0x800000

#: Name of the core's top module in the simulations.
TOP = "tpu_core"


# Programs ----------------------------------------------------------------

def stream_program(config, *, tiles, batch, epilogue=True):
    """`batch` activation rows (read once from the host) streamed through
    `tiles` weight tiles: one MMC with SWITCH per tile, each into its own block
    of accumulator rows (modulo the accumulator memory), like the column blocks
    of a dense layer ``X @ W`` with ``W`` of ``rows x (tiles * cols)``.

    The weight FIFO is kept full: the first RW requests ``weight_fifo_tiles +
    2`` tiles (as many as may be requested and not yet switched to, see
    WEIGHT_FIFO_OVERFLOW), and every MMC is followed by the RW of the tile
    that many places ahead. With `epilogue`, the last block goes through the
    activation unit (ReLU) and back to the host.

    Returns the list of instructions, ending with HALT.
    """
    B = batch
    if not 1 <= B <= min(config.acc_rows, config.ub_rows // 2):
        raise ValueError(f"batch {B} does not fit this configuration")
    if tiles > config.weight_mem_tiles:
        raise ValueError(f"{tiles} tiles do not fit in weight memory")
    ahead = config.weight_fifo_tiles + 2
    blocks = config.acc_rows // B
    program = [Rhm(0, B, HOST_IN)]
    requested = min(tiles, ahead)
    program.append(Rw(0, requested))
    for t in range(tiles):
        program.append(Mmc(0, B, (t % blocks) * B, switch=True))
        if requested < tiles:
            program.append(Rw(requested, 1))
            requested += 1
    if epilogue:
        last = ((tiles - 1) % blocks) * B
        program.append(Act(last, B, B, func=Func.RELU))
        program.append(Whm(B, B, HOST_OUT))
    program.append(Halt())
    return program


def layer_program(config, *, blocks, k_tiles, batch, act_lag=0):
    """A dense layer ``relu(X @ W)`` with ``X`` of ``batch x (k_tiles * rows)``
    and ``W`` of ``(k_tiles * rows) x (blocks * cols)``: for each block of
    `cols` outputs, `k_tiles` MMCs accumulate into one of two accumulator
    regions, then an ACT writes the block's results to the UB; one WHM sends
    them all to the host at the end.

    `act_lag` moves each block's ACT after that many MMCs of the next block,
    as a compiler would to keep the array busy while the results are read.
    Returns the instructions, ending with HALT.
    """
    B = batch
    if 2 * B > config.acc_rows or (k_tiles + blocks) * B > config.ub_rows:
        raise ValueError("the layer does not fit this configuration")
    tiles = blocks * k_tiles
    ahead = config.weight_fifo_tiles + 2
    out = k_tiles * B
    program = [Rhm(0, k_tiles * B, HOST_IN)]
    requested = min(tiles, ahead)
    program.append(Rw(0, requested))
    pending_acts = []            # [MMCs still to come before it, the ACT]
    for n in range(blocks):
        acc = (n % 2) * B
        for k in range(k_tiles):
            program.append(Mmc(k * B, B, acc, accumulate=k > 0, switch=True))
            if requested < tiles:
                program.append(Rw(requested, 1))
                requested += 1
            for item in pending_acts:
                item[0] -= 1
            while pending_acts and pending_acts[0][0] <= 0:
                program.append(pending_acts.pop(0)[1])
        act = Act(acc, out + n * B, B, func=Func.RELU)
        if act_lag:
            pending_acts.append([act_lag, act])
        else:
            program.append(act)
    program.extend(act for _, act in pending_acts)
    program.append(Whm(out, blocks * B, HOST_OUT))
    program.append(Halt())
    return program


def random_case(config, *, seed, length=40):
    """A legal random program of `sim/stimulus/program_generator.py` (every opcode,
    hazards everywhere), for checking the cycle estimate on irregular code."""
    instructions, _ = random_program(config, random.Random(seed), length=length)
    return list(instructions)


def asm_case(config, *, text):
    """A program in assembly (`tpu.asm`); it must end with HALT."""
    from ...asm import parse
    return list(parse(text, "<case>", config))


def encoded_case(config, *, program_hex):
    """An encoded program (hex text of its bytes), e.g. a part compiled by
    `tpu.compiler`; it must end with HALT."""
    from ...isa import decode_program
    return list(decode_program(bytes.fromhex(program_hex)))


PROGRAMS = {"stream": stream_program, "layer": layer_program, "random": random_case,
            "asm": asm_case, "encoded": encoded_case}


#: The benchmark cases `cases` knows.
CASE_NAMES = ("compute", "memory_b1", "memory_b2", "low_bandwidth", "layer")


def cases(rows=8, cols=8, *, names=CASE_NAMES, compute_tiles=128):
    """``(name, config, case)`` for each benchmark case on a ``rows x cols`` array.

    The configuration is the default one with the weight memory delivering a
    tile row per cycle (``weight_mem_bytes_per_cycle = cols``, at least the
    default 8), except for ``low_bandwidth``, which has a quarter of that.

    * ``compute``: ``8 x rows`` activation rows through `compute_tiles` tiles;
    * ``memory_b1``, ``memory_b2``: 1 and 2 rows per tile, 32 tiles: each
      tile is used for fewer cycles than it takes to load;
    * ``low_bandwidth``: ``rows`` rows per tile, 16 tiles, weights at
      ``cols / 4`` bytes per cycle;
    * ``layer``: a dense layer of 4 blocks of 4 tiles (`layer_program`),
      ``8 x rows`` rows, each block's ACT placed after the next block's first
      MMC.
    """
    from ...config import TPUConfig
    base = TPUConfig(rows=rows, cols=cols, weight_mem_bytes_per_cycle=max(cols, 8))
    table = {
        "compute": (base, {"tiles": compute_tiles, "batch": 8 * rows}),
        "memory_b1": (base, {"tiles": 32, "batch": 1}),
        "memory_b2": (base, {"tiles": 32, "batch": 2}),
        "low_bandwidth": (base.replace(weight_mem_bytes_per_cycle=max(1, cols // 4)),
                          {"tiles": 16, "batch": rows}),
        "layer": (base, {"program": "layer", "blocks": 4, "k_tiles": 4, "batch": 8 * rows,
                         "act_lag": 1}),
    }
    return [(name, table[name][0], {"name": name, "program": "stream", **table[name][1]})
            for name in names]


def build_case(config, case):
    """The instructions of a benchmark case (a dict as in ``TPU_BENCH_CASE``)."""
    args = {k: v for k, v in case.items() if k not in ("name", "program")}
    return PROGRAMS[case.get("program", "stream")](config, **args)


# The benchmark ---------------------------------------------------------------

def _counters(dut, config):
    return counter_values(dut.counters.value.to_unsigned(), config)


class _Trace:
    """Per-cycle record of internal handshakes (simulators that expose them)."""

    SIGNALS = {
        "issue_rhm": ("sequencer", "rhm__valid", "rhm", "cmd__ready"),
        "issue_whm": ("sequencer", "whm__valid", "whm", "cmd__ready"),
        "issue_mmc": ("sequencer", "mmc__valid", "mmc", "cmd__ready"),
        "issue_act": ("sequencer", "act__valid", "act", "cmd__ready"),
        "issue_rw": ("sequencer", "rw__valid", "sequencer", "rw__ready"),
        "row_in": ("engine", "act__valid", "engine", "act__ready"),
        "w_beat": ("engine", "weights__valid", "engine", "weights__ready"),
    }

    def __init__(self, dut, path):
        self.path = path
        self.events = []
        self.handles = {}
        for key, (m1, s1, m2, s2) in self.SIGNALS.items():
            try:
                self.handles[key] = (getattr(getattr(dut, m1), s1), getattr(getattr(dut, m2), s2))
            except AttributeError:
                pass

    def __call__(self, cycle):
        fired = [k for k, (a, b) in self.handles.items() if int(a.value) and int(b.value)]
        if fired:
            self.events.append((cycle, fired))

    def save(self, start):
        with open(self.path, "w") as f:
            for cycle, fired in self.events:
                f.write(f"{cycle - start} {' '.join(fired)}\n")


@cocotb.test()
async def bench_program(dut):
    """Run one benchmark program with an ideal host; record counters and phases."""
    tb = TB(dut)
    cfg = tb.cfg
    case = json.loads(os.environ.get("TPU_BENCH_CASE", '{"name": "stream", "tiles": 16, '
                                     f'"batch": {8 * cfg.rows}}}'))
    instructions = build_case(cfg, case)
    program = encode_program(instructions)
    tb.host.stall = 0.0            # the host never stalls ...
    tb.instr.idle = 0.0            # ... and the instruction stream never idles
    trace = _Trace(dut, os.environ["TPU_BENCH_TRACE"]) if os.environ.get("TPU_BENCH_TRACE") else None

    await tb.reset()
    # Weight memory: only the tiles the program reads. Host memory: the input.
    tiles = sorted({t for i in instructions if isinstance(i, Rw)
                    for t in range(i.tile, i.tile + i.count)})
    weights = tb.np_rng.integers(-128, 128, size=(len(tiles), cfg.rows, cfg.cols))
    await tb.fill_weights(weights, tiles)
    reads = [i for i in instructions if isinstance(i, Rhm)]
    for i in reads:
        data = tb.np_rng.integers(-128, 128, size=i.rows * cfg.rows).astype(np.uint8)
        tb.model.host.write(i.host, data.tobytes())
        for k, b in enumerate(data):
            tb.host.memory[i.host + k] = int(b)

    # Run: cycle 0 is the cycle the first instruction is offered, and the
    # counters' values seen in it count everything before it.
    start = tb.loop.cycle + 1
    index, width = list(COUNTERS).index("mxu_active"), cfg.counter_bits
    seen = {"before": None, "first": None, "last": None, "previous": None}

    mirror = CounterMirror(dut, cfg) if cfg.ram_counters else None

    def watch(cycle):
        if mirror:
            word = mirror.word()
            mirror(cycle)
        else:
            word = dut.counters.value.to_unsigned()
        if seen["before"] is None:
            seen["before"] = counter_values(word, cfg)
            seen["previous"] = seen["before"]["mxu_active"]
        # A row shows in the counter one cycle after it entered the array.
        value = (word >> (width * index)) & ((1 << width) - 1)
        if value != seen["previous"]:
            if seen["first"] is None:
                seen["first"] = cycle - 1
            seen["last"] = cycle - 1
            seen["previous"] = value

    tb.loop.monitors.append(watch)
    if trace:
        tb.loop.monitors.append(trace)
    await tb.run_program(program)
    after = counter_values(mirror.word(), cfg) if mirror else _counters(dut, cfg)
    before = seen["before"]
    counters = {name: after[name] - before[name] for name in COUNTERS}
    await tb.check_counters()
    await _check(tb, instructions)
    if trace:
        trace.save(start)

    estimate = estimate_cycles(cfg, program)
    rows_in = counters["mxu_active"]
    span = seen["last"] - seen["first"] + 1 if rows_in else 0
    result = {
        "case": case,
        "config": cfg.to_dict(),
        "simulator": f"{cocotb.SIM_NAME} {cocotb.SIM_VERSION}",
        "instructions": len(instructions),
        "counters": counters,
        "matrix_phase": {"first_row": seen["first"] - start if rows_in else None,
                         "last_row": seen["last"] - start if rows_in else None,
                         "cycles": span,
                         "rows": rows_in},
        "utilisation": {
            "matrix_phase": rows_in / span if span else 0.0,
            "program": counters["useful_macs"] / (cfg.rows * cfg.cols * counters["cycles"]),
        },
        "estimate": estimate,
        "estimate_error": (estimate["cycles"] - counters["cycles"]) / counters["cycles"],
    }
    dut._log.info("%s: %s", case.get("name"), json.dumps(result))
    path = os.environ.get("TPU_BENCH_OUT")
    if path:
        merged = json.load(open(path)) if os.path.exists(path) else {}
        merged[case.get("name", "case")] = result
        with open(path, "w") as f:
            json.dump(merged, f, indent=2)


async def _check(tb, instructions):
    """The rows the program wrote, against the golden model (the full
    comparison of `TB.check` reads every row, which takes long)."""
    cfg, model = tb.cfg, tb.model
    acc_rows, ub_rows = set(), set()
    for i in instructions:
        if isinstance(i, Mmc):
            acc_rows.update(range(i.acc, i.acc + i.rows))
        elif isinstance(i, (Rhm,)):
            ub_rows.update(range(i.ub, i.ub + i.rows))
        elif isinstance(i, Act):
            ub_rows.update(range(i.ub, i.ub + i.output_rows))
    for row in sorted(ub_rows):
        got = await tb._read("debug_ub", row, 8, cfg.rows, False)
        if got != model.ub[row].tolist():
            tb.fail(f"UB row {row} = {got}, expected {model.ub[row].tolist()}")
    for row in sorted(acc_rows):
        got = await tb._read("debug_acc", row, 32, cfg.cols, True)
        if got != model.acc[row].tolist():
            tb.fail(f"accumulator row {row} = {got}, expected {model.acc[row].tolist()}")
    for addr, byte in model.host.bytes.items():
        if tb.host.memory.get(addr, 0) != byte:
            tb.fail(f"host byte 0x{addr:x} = {tb.host.memory.get(addr, 0)}, expected {byte}")
