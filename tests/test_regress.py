"""Random regressions: batches of random programs on the core against the
golden model, and the DMA reader's error cases against a misbehaving host,
with functional coverage (`tpu.sim.stimulus.coverage`).

By default (the CI suite) a fixed set: the seeds `CI_SEEDS` on the 4x4
configuration, which with the edge programs (tests/test_core_rtl.py) hit
every coverage bin (checked below, on the golden model). ``make regress SEEDS=N`` sets

- ``TPU_REGRESS_PROGRAMS``: programs per configuration (N),
- ``TPU_REGRESS_CONFIGS``: configurations, by name (`tpu.sim.regress.CONFIGS`),
- ``TPU_REGRESS_BATCH``: programs per simulation (100),
- ``TPU_REGRESS_SIM``: the simulator (verilator),
- ``TPU_REGRESS_DIR``: where the reports go (``build/regress``),

and the seeds start at ``TPU_SEED``; pytest-xdist spreads the batches over
the cores, and ``python -m tpu.sim.regress DIR`` writes the summary.
"""

import json
import os
from pathlib import Path

import pytest
from amaranth.back import verilog

from conftest import base_seed
from tpu.isa import encode_program
from tpu.sim.harness import missing_simulator, run_outcomes
from tpu.models.chip_model import ChipModel
from tpu.sim.regress import CONFIGS, config_named
from tpu.sim.stimulus.coverage import DMA_ERROR_KINDS, all_bins, program_bins
from tpu.sim.stimulus.edge_programs import edge_programs
from tpu.sim.stimulus.program_generator import seeded_program
from tpu.sim.tops.dma_top import DmaTop
from test_dma_rtl import CONFIGS as DMA_CONFIGS


#: The CI set: these seeds' programs on the 4x4 configuration, chosen (from
#: the first 1,000, greedily) to hit with the edge programs every bin.
CI_SEEDS = (2, 10, 17, 23, 81, 136, 363, 489, 610, 975)

_ENV = os.environ.get
FULL = _ENV("TPU_REGRESS_PROGRAMS") is not None
PROGRAMS = int(_ENV("TPU_REGRESS_PROGRAMS", "0"))
BATCH = int(_ENV("TPU_REGRESS_BATCH", "100"))
NAMES = _ENV("TPU_REGRESS_CONFIGS", "4x4,8x8,16x16").split(",")
SIM = _ENV("TPU_REGRESS_SIM", "verilator")
DIRECTORY = Path(_ENV("TPU_REGRESS_DIR", "build/regress")).resolve()
FIRST = base_seed()


def _batches():
    if not FULL:
        return [pytest.param("4x4", CI_SEEDS, id="4x4-ci")]
    out = []
    for name in NAMES:
        config_named(name)
        for first in range(FIRST, FIRST + PROGRAMS, BATCH):
            seeds = tuple(range(first, min(first + BATCH, FIRST + PROGRAMS)))
            out.append(pytest.param(name, seeds, id=f"{name}-seed{first}"))
    return out


def _report(name):
    if not FULL:
        return None
    DIRECTORY.mkdir(parents=True, exist_ok=True)
    return DIRECTORY / f"{name}.jsonl"


def _annotate(path, config_name, first):
    """Add the configuration, simulator and batch to a run's report lines."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for r in records:
        r.update(config=config_name, simulator=SIM, first_seed=first)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return records


@pytest.mark.rtl
@pytest.mark.parametrize("name, seeds", _batches())
def test_core_batch(name, seeds, tmp_path):
    """The random programs of `seeds` in one simulation; the CI set (by
    default) also fills the instruction queue."""
    reason = missing_simulator(SIM)
    if reason:
        pytest.skip(reason)
    config = config_named(name)
    first = seeds[0]
    print(f"seeds {first}..{seeds[-1]} on {name}: replay with TPU_SEED={first}")
    report = _report(f"core-{name}-{first}") or tmp_path / "report.jsonl"
    report.write_text("")
    # A generated top is found by its sources' digest: a built model starts
    # without converting the design again (seconds per batch at 16x16).
    outcomes = run_outcomes(config, SIM, "tpu.sim.testbenches.tb_core", testcase="random_batch",
                            seed=first, top="core", run_name=f"batch-{name}",
                            extra_env={"TPU_SEEDS": ",".join(map(str, seeds)), "TPU_REPORT": str(report)})
    records = _annotate(report, name, first)
    failed = [r for r in records if not r["passed"]]
    assert outcomes[0].passed and not failed, (
        f"seed {failed[0]['seed'] if failed else '?'}: {failed[0]['failure'] if failed else outcomes[0].message}")
    assert len(records) == len(seeds), f"{len(records)} of {len(seeds)} programs reported"
    if not FULL:
        assert any("fifo:instructions:full" in r["bins"] for r in records), "the queue never filled"


def _dma_runs():
    if not FULL:
        return [pytest.param(None, None, id="regress-only", marks=pytest.mark.skip(
            reason="the DMA batches run under make regress (TPU_REGRESS_PROGRAMS); "
                   "tests/test_dma_rtl.py runs the DMA reader in the suite"))]
    runs = max(1, PROGRAMS // 250)
    return [pytest.param(name, FIRST + i, id=f"{name}-seed{FIRST + i}") for name in NAMES for i in range(runs)]


@pytest.mark.rtl
@pytest.mark.parametrize("name, seed", _dma_runs())
def test_dma_batch(name, seed, tmp_path):
    """The DMA reader's error cases (every kind, shuffled) and random reads
    against a host that splits, reorders, delays and misbehaves; one DMA
    configuration per core configuration, in turn."""
    reason = missing_simulator(SIM)
    if reason:
        pytest.skip(reason)
    config = DMA_CONFIGS[list(CONFIGS).index(name) % len(DMA_CONFIGS)]
    source = verilog.convert(DmaTop(config), name="tpu_dma", emit_src=False)
    log = tmp_path / "dma.jsonl"
    passed, kinds, message = True, [], ""
    for testcase in ("read_errors", "reads"):
        outcomes = run_outcomes(config, SIM, "tpu.sim.testbenches.tb_dma", testcase=testcase, seed=seed,
                                toplevel="tpu_dma", verilog_source=source,
                                extra_env={"TPU_DMA_REPORT": str(log)})
        passed &= outcomes[0].passed
        message = message or ("" if outcomes[0].passed else f"{testcase}: {outcomes[0].message}")
    if log.exists():
        kinds = [json.loads(line)["read_error"] for line in log.read_text().splitlines()
                 if "read_error" in line]
    report = _report(f"dma-{name}-{seed}")
    report.write_text(json.dumps({
        "kind": "dma", "config": name, "simulator": SIM, "seed": None, "first_seed": seed,
        "passed": passed, "failure": message or None, "bins": sorted(f"dma:{k}" for k in set(kinds)),
        "replay": f"TPU_SEED={seed} .venv/bin/python -m pytest tests/test_dma_rtl.py -k 'read_errors or reads'",
    }) + "\n")
    assert passed, f"seed {seed}: {message}"
    assert sorted(set(kinds)) == sorted(DMA_ERROR_KINDS), f"error kinds run: {kinds}"


def test_ci_set_covers_every_bin():
    """The CI set (the seeds `CI_SEEDS` on 4x4, and the edge programs) hits
    every program coverage bin; the DMA error bins come from
    tests/test_dma_rtl.py's read_errors and the instruction queue's from the
    RTL run (checked by test_ci_batch_reports_queue_full)."""
    config = CONFIGS["4x4"]
    hit = set()
    for seed in CI_SEEDS:
        model, program = _golden_program(config, seed)
        hit |= program_bins(config, program, model)
    for _, instructions in edge_programs(config):
        program = encode_program(instructions)
        hit |= program_bins(config, program, ChipModel(config).run(program))
    rtl_only = {b for b in all_bins() if b.startswith("dma:")} | {"fifo:instructions:full"}
    missed = all_bins() - rtl_only - hit
    assert not missed, f"the CI set misses {sorted(missed)}"


def _golden_program(config, seed):
    """The program `random_batch` runs for `seed`, run on the golden model."""
    _, program, windows = seeded_program(config, seed)
    return ChipModel(config, windows=windows).run(program), program


def test_summary(tmp_path):
    """The summary counts programs per configuration, lists each failure with
    the command that replays its batch up to it, and names the bins missed."""
    from tpu.sim.regress import main, summarize
    records = [
        {"config": "4x4", "simulator": "icarus", "first_seed": 10, "seed": 10, "passed": True,
         "failure": None, "fault": "NONE", "bins": ["op:NOP", "op:HALT"]},
        {"config": "4x4", "simulator": "icarus", "first_seed": 10, "seed": 11, "passed": False,
         "failure": "UB row 3 = [1], expected [2]", "fault": "UB_RANGE", "bins": ["op:RHM"]},
    ]
    (tmp_path / "core-4x4-10.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = summarize(tmp_path)
    assert summary["configs"]["4x4"]["programs"] == 2
    assert summary["configs"]["4x4"]["failed"] == 1
    assert summary["configs"]["4x4"]["seeds"] == ["10-11"]
    replay = summary["failures"][0]["replay"]
    assert "TPU_SEED=10 " in replay and "TPU_REGRESS_PROGRAMS=2 " in replay and "TPU_REGRESS_SIM=icarus" in replay
    assert summary["bins_hit"] == 3 and "op:SYNC" in summary["missed"]
    text = (tmp_path / "summary.md").read_text()
    assert "UB row 3" in text and replay in text
    assert main([str(tmp_path)]) == 1
    assert main([str(tmp_path / "nowhere")]) == 2
