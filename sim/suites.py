"""The testcases `tpu sim` runs for each top level: every cocotb testbench of
the matrix engine, the core and the chip, by name.

A testcase is one cocotb test of one testbench module with the environment
it needs (a driver check's name, a DMA stage, a fault kind). `tpu sim` runs
each in a simulation of its own, so every testcase starts from the state
the Verilog gives at time zero, whatever ran before it.
"""

import dataclasses
from dataclasses import dataclass, field


__all__ = ["Testcase", "testcases", "TOPS"]

TOPS = ("engine", "core", "chip")


@dataclass(frozen=True)
class Testcase:
    """One named testcase: cocotb test `test` of module `module`, with `env`."""
    name: str
    module: str
    test: str
    doc: str
    env: dict = field(default_factory=dict)
    #: None, or why this testcase cannot run on a given configuration
    #: (a function of the `TPUConfig`).
    unfit: object = None

    def why_not(self, config):
        """None if the testcase runs on `config`, else the reason it cannot."""
        return self.unfit(config) if self.unfit else None


def _engine():
    module = "tpu.sim.testbenches.tb_matrix_engine"
    return [Testcase(name, module, name, doc) for name, doc in [
        ("random_operations", "random tiles, shapes, flags, addresses and idle cycles"),
        ("extreme_values", "the largest sums in both directions"),
        ("accumulate_chain", "32 tiles accumulated into the same rows against one numpy matmul"),
        ("back_to_back_timing", "tile switches back to back: the cycle of every row"),
        ("heavy_idle", "both input streams idle most of the time"),
    ]]


def _program_config_only(config):
    from .stimulus.programs import PROGRAM_CONFIG
    if config == PROGRAM_CONFIG:
        return None
    options = " ".join(f"--{name.replace('_', '-')} {value}"
                       for name, value in PROGRAM_CONFIG.to_dict().items()
                       if value != type(PROGRAM_CONFIG)().to_dict()[name])
    return f"the fixed programs are written for one configuration: {options}"


def _core():
    from .stimulus.program_generator import FAULT_KINDS
    from .stimulus.programs import PROGRAMS
    module = "tpu.sim.testbenches.tb_core"
    cases = [Testcase("random_programs", module, "random_programs",
                      "a random legal program with hazards everywhere, against the golden model",
                      {"TPU_LENGTH": "40"})]
    cases += [Testcase(f"fault_{kind}", module, "random_programs",
                       f"a random program ending in the fault {kind}",
                       {"TPU_LENGTH": "20", "TPU_FAULT": kind}) for kind in FAULT_KINDS]
    cases += [Testcase("random_batch", module, "random_batch",
                       "four random programs in one simulation, a reset between them",
                       {"TPU_BATCH": "4"}),
              Testcase("edge_programs", module, "edge_programs",
                       "every interlocked pair of units, ranges sharing one row, the last UB row"),
              Testcase("host_windows", module, "host_windows", "HOST_RANGE against the DMA windows"),
              Testcase("dma_error", module, "dma_error", "the DMA_ERROR input: code, index, halt")]
    cases += [Testcase(f"program_{name}", "tpu.sim.testbenches.tb_core_programs", name,
                       f"the fixed program {name!r} of tpu.sim.stimulus.programs against its expected results",
                       {"TPU_PROGRAM_CASE": name}, unfit=_program_config_only)
              for name in PROGRAMS]
    return cases


def _check_unfit(name):
    def unfit(config):
        from ..selftest.checks import why_not
        return why_not(name, config)
    return unfit


def _dma_faults_unfit(stage):
    def unfit(config):
        from ..selftest.checks import why_not
        reason = why_not("mlp", config)     # it ends with the MLP
        if reason:
            return reason
        if stage == "wfill":
            least = max(3, config.max_read_request // config.tile_bytes + 1)
            if least > min(config.weight_mem_tiles, 3 * config.max_read_request // config.tile_bytes):
                return (f"it fills more weight tiles than one read request brings "
                        f"({config.max_read_request} bytes, tiles of {config.tile_bytes}) and "
                        f"at most three requests' worth, within weight_mem_tiles "
                        f"{config.weight_mem_tiles}")
        return None
    return unfit


def _chip():
    from ..selftest.checks import CHECKS
    module = "tpu.sim.testbenches.tb_host"
    cases = [Testcase("registers", module, "registers_test", "BAR0 register reset values and access")]
    cases += [Testcase(f"check_{name}", module, "check",
                       f"the driver check {name!r} of tpu.selftest.checks",
                       {"TPU_HOST_CHECK": f"tpu.selftest.checks:{function.__name__}"},
                       unfit=_check_unfit(name))
              for name, function in CHECKS.items()]
    cases += [Testcase(f"dma_faults_{stage}", module, "dma_faults",
                       f"every bad answer to a DMA read during {what}", {"TPU_DMA_STAGE": stage},
                       unfit=_dma_faults_unfit(stage))
              for stage, what in [("rhm", "an RHM"), ("fetch", "a program fetch"),
                                  ("wfill", "a weight fill")]]
    cases += [Testcase("bad_tlps", module, "bad_tlps", "malformed and unsupported packets"),
              Testcase("abort_during_writes", module, "abort_during_writes",
                       "ABORT and SOFT_RESET while WHM writes keep the link busy"),
              Testcase("fetch_bounds", module, "fetch_bounds",
                       "each program's fetch reads its bytes once and nothing past its end")]
    return [dataclasses.replace(case, unfit=_over_tlps(case.unfit)) for case in cases]


def _over_tlps(unfit):
    """`unfit`, and not for a chip speaking the narrow host protocol: the
    chip's testcases drive its PCIe-style host interface."""
    def over_tlps(config):
        if config.narrow_host:
            return ("it drives the PCIe-style host interface, and this chip speaks the narrow "
                    "host protocol (narrow_host 1; tests/test_serial_link_rtl.py drives it)")
        return unfit(config) if unfit else None
    return over_tlps


def testcases(top):
    """Every testcase of `top` ("engine", "core" or "chip"), in running order."""
    if top not in TOPS:
        raise ValueError(f"unknown top {top!r}: choose one of {', '.join(TOPS)}")
    return {"engine": _engine, "core": _core, "chip": _chip}[top]()
