"""cocotb testbench: fixed programs on the whole core, with their expected results.

The program, the weight-memory tiles, the host-memory image and the expected
results come from an ``.npz`` file written by `tpu.sim.stimulus.programs.ChipProgram.save`,
named by ``TPU_PROGRAM_CASE``. The program runs on the RTL (random waits on
every host and instruction stream, as in `tpu.sim.testbenches.tb_core`) and on the golden
model; then

* the unified buffer, the accumulators, host memory, the fault status, the
  interrupts and the counters must equal the golden model's (`TB.check`), and
* the host bytes, UB rows, accumulator rows and interrupt codes the file
  expects (computed from the ISA's definition, not by the golden model) must
  be what the RTL left behind.

A program may go on after its HALT: those instructions are queued and never
run, so the core then stays ``busy`` while ``halted``.

One cocotb test per program name in `tpu.sim.stimulus.programs.PROGRAMS`, all alike,
so every program's run has its own directory.
"""

import os

import cocotb
import numpy as np

from ...isa import INSTRUCTION_BYTES, Opcode
from ..stimulus.programs import PROGRAMS, ChipProgram
from .tb_core import TB


class ProgramTB(TB):
    """`TB` with the memories and the program of a `ChipProgram`."""

    def __init__(self, dut, program, code):
        super().__init__(dut)
        self.program, self.code = program, code
        if program.config != self.cfg:
            raise ValueError(f"program {program.name} is for {program.config}, "
                             f"the simulated core is {self.cfg}")

    async def load_memories(self):
        await self.fill_weights(np.asarray(self.program.weights, dtype=np.int8))
        for addr, data in self.program.host.items():
            self.model.host.write(addr, data)
            for i, byte in enumerate(data):
                self.host.memory[addr + i] = byte

    def _trailing(self):
        """Whether instructions follow the first HALT."""
        code = self.code
        for i in range(len(code) // INSTRUCTION_BYTES):
            if code[i * INSTRUCTION_BYTES] == Opcode.HALT:
                return i + 1 < len(code) // INSTRUCTION_BYTES
        return False

    async def run_program(self, program, *, timeout=None):
        dut = self.dut
        self.model.run(program)
        for i in range(len(program) // INSTRUCTION_BYTES):
            self.instr.send(int.from_bytes(program[i * 16:(i + 1) * 16], "little"))
        timeout = timeout or 4000 + 400 * (len(program) // 16) * self.cfg.rows
        await self.loop.run_until(lambda: int(dut.halted.value), timeout=timeout,
                                  what="the core to halt")
        self.halt_cycle = self.loop.cycle
        for _ in range(self.cfg.rows + self.cfg.cols + 40):
            await self.loop.step()
        busy = int(dut.busy.value)
        if self._trailing():
            if not busy:
                self.fail("not busy after HALT, but instructions after it were queued")
        elif busy:
            self.fail("still busy after HALT")

    async def check_expected(self):
        """The results the program file expects, on the RTL."""
        cfg, p = self.cfg, self.program
        for addr, data in p.expected_host.items():
            got = bytes(self.host.memory.get(addr + i, 0) for i in range(len(data)))
            if got != data:
                bad = next(i for i in range(len(data)) if got[i] != data[i])
                self.fail(f"host bytes at 0x{addr:x}: byte {bad} (0x{addr + bad:x}) is "
                          f"{got[bad]}, expected {data[bad]}; "
                          f"{sum(g != d for g, d in zip(got, data))} of {len(data)} differ")
        for row, data in p.expected_ub.items():
            got = await self._read("debug_ub", row, 8, cfg.rows, False)
            if got != list(data):
                self.fail(f"UB row {row} = {got}, expected {list(data)}")
        for row, values in p.expected_acc.items():
            got = await self._read("debug_acc", row, 32, cfg.cols, True)
            if got != list(values):
                self.fail(f"accumulator row {row} = {got}, expected {list(values)}")
        codes = [code for _, code in self.interrupts]
        if codes != list(p.interrupts) + [0]:
            self.fail(f"interrupts {codes}, expected {list(p.interrupts) + [0]}")
        if int(self.dut.fault.value):
            self.fail(f"fault {int(self.dut.fault.value)} at instruction "
                      f"{int(self.dut.fault_index.value)}")


async def run_case(dut):
    # A program file, or the name of one of `PROGRAMS` (as `tpu sim` gives it).
    case = os.environ["TPU_PROGRAM_CASE"]
    if case in PROGRAMS:
        program = PROGRAMS[case]()
        code = program.assemble()
    else:
        program, code = ChipProgram.load(case)
    tb = ProgramTB(dut, program, code)
    dut._log.info("program %s:\n%s", program.name, program.text)
    await tb.reset()
    await tb.load_memories()
    await tb.run_program(code)
    dut._log.info("halted after %d cycles", tb.halt_cycle)
    await tb.check()
    await tb.check_expected()


def _program_test(name):
    async def test(dut):
        await run_case(dut)
    test.__qualname__ = test.__name__ = name
    test.__doc__ = f"The program {name!r} of tpu.sim.stimulus.programs, from TPU_PROGRAM_CASE."
    return cocotb.test(name=name)(test)


for _name in PROGRAMS:
    globals()[_name] = _program_test(_name)
del _name
