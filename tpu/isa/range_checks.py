"""The fault a hardware decoder raises for one instruction on a `TPUConfig`:
`diagnose` names it, `check` raises it."""

from .codes import Fault, MAX_POOL_COUNT, Pool
from .errors import IllegalInstruction
from .instructions import Act, Instruction, Ldl, Ldq, Mmc, Rhm, Rw, Whm, ldl_rows, ldq_rows
from .decoding import decode


__all__ = ["check", "diagnose"]


def _span(mnemonic, what, first, count, size, size_name, fault):
    """A fault if rows ``first .. first + count - 1`` do not fit in ``0 .. size - 1``."""
    if count and first + count > size:
        return (fault, f"{mnemonic} {what} rows {first}..{first + count - 1} are out of range: "
                       f"there are {size} ({size_name})")
    return None


def diagnose(instruction, config):
    """`check` with an explanation: ``(Fault, message)``; the message is empty for NONE."""
    from ..config import TPUConfig
    if not isinstance(config, TPUConfig):
        raise TypeError(f"diagnose needs a TPUConfig to check the instruction against, "
                        f"not {config!r}")
    if isinstance(instruction, (bytes, bytearray, memoryview)):
        try:
            instruction = decode(instruction)
        except IllegalInstruction as error:
            return error.fault, str(error)
    if not isinstance(instruction, Instruction):
        raise TypeError(f"not an instruction: {instruction!r}")
    m = instruction.mnemonic
    ub, acc = config.ub_rows, config.acc_rows
    faults = []
    match instruction:
        case Rhm() | Whm():
            faults.append(_span(m, "UB", instruction.ub, instruction.rows, ub, "ub_rows",
                                Fault.UB_RANGE))
            nbytes = instruction.rows * config.rows
            if nbytes and instruction.host + nbytes > 1 << 64:
                faults.append((Fault.HOST_RANGE, f"{m} host bytes 0x{instruction.host:x} + {nbytes} "
                                                 f"run past the 64-bit address space"))
        case Rw():
            faults.append(_span(m, "weight tile", instruction.tile, instruction.count,
                                config.weight_mem_tiles, "weight_mem_tiles", Fault.WEIGHT_MEM_RANGE))
        case Mmc():
            if instruction.rows:
                last = instruction.last_ub_row
                if last >= ub:
                    faults.append((Fault.UB_RANGE, f"{m} reads UB row {last}, out of range: "
                                                   f"there are {ub} (ub_rows)"))
            faults.append(_span(m, "accumulator", instruction.acc, instruction.rows, acc, "acc_rows",
                                Fault.ACC_RANGE))
        case Act():
            if instruction.mlas_round and not config.mlas_rounding:
                faults.append((Fault.ILLEGAL_FIELD,
                               f"{m} mlas_round: this chip's requantizers do not round as "
                               f"ONNX Runtime's MLAS does (mlas_rounding = 0)"))
            if instruction.windowed and instruction.rows and instruction.in_w > config.pool_max_width:
                faults.append((Fault.ILLEGAL_FIELD,
                               f"{m} in_w = {instruction.in_w} is wider than the pooling line "
                               f"buffer: pool_max_width = {config.pool_max_width}"))
            if instruction.pool == Pool.GLOBAL_AVG and instruction.rows > MAX_POOL_COUNT:
                faults.append((Fault.ILLEGAL_FIELD,
                               f"{m} rows = {instruction.rows} is too many for global_avg: "
                               f"it averages at most {MAX_POOL_COUNT} rows (MAX_POOL_COUNT)"))
            faults.append(_span(m, "accumulator", instruction.acc, instruction.rows, acc, "acc_rows",
                                Fault.ACC_RANGE))
            faults.append(_span(m, "UB", instruction.ub, instruction.output_rows, ub, "ub_rows",
                                Fault.UB_RANGE))
        case Ldq():
            faults.append(_span(m, "UB", instruction.ub, ldq_rows(config), ub, "ub_rows",
                                Fault.UB_RANGE))
        case Ldl():
            faults.append(_span(m, "UB", instruction.ub, ldl_rows(config), ub, "ub_rows",
                                Fault.UB_RANGE))
    faults = [f for f in faults if f is not None]
    return min(faults) if faults else (Fault.NONE, "")


def check(instruction, config):
    """The `Fault` a hardware decoder raises for `instruction` on a chip of `config`.

    `instruction` is an `Instruction` or its 16 bytes (then ILLEGAL_OPCODE and
    ILLEGAL_FIELD from decoding are possible too). Only what one instruction in
    isolation determines is checked: UB, accumulator and weight-memory ranges,
    a host range that wraps past 2**64, and the pooling limits of ACT, which
    are ILLEGAL_FIELD: ``in_w > config.pool_max_width`` for MAX or AVG with
    rows, ``rows > MAX_POOL_COUNT`` for GLOBAL_AVG. An instruction whose row or
    tile count is 0 addresses nothing and never faults on a range. ACT's
    ``mlas_round`` on a chip without ``config.mlas_rounding`` is
    ILLEGAL_FIELD (its decoder takes the flag as a reserved bit). When several
    faults apply, the lowest code wins. WEIGHT_FIFO_UNDERFLOW, HOST_RANGE
    against the DMA windows and DMA_ERROR depend on the run and are raised
    while it executes (HOST_RANGE against the windows still before the RHM or
    WHM starts, after the faults checked here: see
    `tpu.models.chip_model.ChipModel`).
    """
    return diagnose(instruction, config)[0]
