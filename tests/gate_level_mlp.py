"""The gate-level check the iCE40 and ECP5 tests share: the core of the
smallest chip the programs run on (`GATE_CONFIG`), generated for a family
and synthesised as its board build does (`core_netlist`), runs the two-layer
MLP program bit-exact with the golden model (`check_mlp`).

The testbench is the core's program testbench (`tb_core_programs`), which
drives the core's ports only; it checks the host memory, UB and accumulator
rows the program leaves against the golden model's.
"""

from functools import cache

from conftest import base_seed
from tpu import TPUConfig
from tpu.fpga.gate_level import ecp5_gate_level_source, gate_level_source
from tpu.hdl.verilog import CORE_NAME, generate_verilog
from tpu.sim.harness import BUILD_ROOT, run
from tpu.sim.stimulus.programs import mlp_program


#: The smallest chip the programs run on: a 2x2 array, small memories.
GATE_CONFIG = TPUConfig(rows=2, cols=2, acc_rows=64, ub_rows=256, weight_mem_tiles=16,
                        weight_fifo_tiles=2, pool_max_width=8)

#: family -> how its netlist becomes a simulation source (cells and models)
_GATE_LEVEL_SOURCES = {"ice40": gate_level_source, "ecp5": ecp5_gate_level_source}


@cache
def core_netlist(family):
    """The netlist of `GATE_CONFIG`'s core for `family` (``"ice40"`` or
    ``"ecp5"``) with the models of its cells: synthesised once per source
    (cached in ``build/gate_level``), once per test process."""
    return _GATE_LEVEL_SOURCES[family](generate_verilog(GATE_CONFIG, top="core", family=family),
                                       CORE_NAME, BUILD_ROOT / "gate_level")


def check_mlp(simulator, family, tmp_path):
    """Run the MLP on `family`'s core netlist under `simulator` and fail,
    naming the seed, unless it ends bit-exact with the golden model."""
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    path = tmp_path / "mlp.npz"
    mlp_program(batch=4, k1=4, n1=4, n2=2, config=GATE_CONFIG).save(path)
    tests, failures = run(GATE_CONFIG, simulator, "tpu.sim.testbenches.tb_core_programs",
                          testcase="mlp", seed=seed, toplevel=CORE_NAME,
                          verilog_source=core_netlist(family), extra_env={"TPU_PROGRAM_CASE": str(path)})
    assert tests == 1 and failures == 0, f"the MLP failed on the {family} netlist with seed {seed}"
