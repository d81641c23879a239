"""The numbers of the instruction set: its version, the size of an instruction,
the pooling limits of ACT, and the enumerations its fields take (opcodes,
fault codes, activation functions, pooling modes, the registers CFG sets)."""

from enum import IntEnum


__all__ = ["ISA_VERSION", "INSTRUCTION_BYTES", "MAX_POOL_SIZE", "MAX_POOL_COUNT", "Opcode", "Fault",
           "Func", "Pool", "Reg"]


ISA_VERSION = 1
INSTRUCTION_BYTES = 16
INSTRUCTION_BITS = 8 * INSTRUCTION_BYTES

# Limits of the activation unit's pooling (hdl/activation_settings.py).
MAX_POOL_SIZE = 4       # largest window side k and stride s of MAX and AVG
MAX_POOL_COUNT = 4096   # most rows GLOBAL_AVG averages


class _Described(IntEnum):
    """An IntEnum whose members carry a one-line meaning: ``Member = value, "meaning"``."""

    def __new__(cls, value, meaning=""):
        member = int.__new__(cls, value)
        member._value_ = value
        member.meaning = meaning
        return member

    @property
    def keyword(self):
        """The member's name as the assembler writes it."""
        return self.name.lower()


class Opcode(_Described):
    """The opcodes of ISA version 1. Any other value of bits [7:0] is ILLEGAL_OPCODE."""

    NOP = 0x00, "do nothing"
    HALT = 0x01, "stop once all earlier instructions have completed"
    SYNC = 0x02, "wait until all earlier instructions have completed"
    INT = 0x03, "wait like SYNC, then interrupt the host with a 16-bit code"
    RHM = 0x10, "read host memory: host -> unified buffer (DMA)"
    WHM = 0x11, "write host memory: unified buffer -> host (DMA)"
    RW = 0x20, "read weights: weight memory -> weight FIFO, whole tiles"
    MMC = 0x30, "matrix multiply/convolve: UB rows -> systolic array -> accumulators"
    ACT = 0x40, "activate: accumulators -> activation unit (and pooling) -> UB"
    CFG = 0x50, "set an activation-unit register"
    LDQ = 0x51, "load the per-column quantization parameters from the UB"
    LDL = 0x52, "load the 256-byte sigmoid/tanh lookup table from the UB"

    @property
    def mnemonic(self):
        return self.keyword


class Fault(_Described):
    """The error codes the chip stops with (status register ``error``).

    A faulting instruction has no effect: the chip stops before it, with this
    code and the instruction's index in the status registers, and interrupts
    the host.
    """

    NONE = 0, "no fault"
    ILLEGAL_OPCODE = 1, "bits [7:0] are not an opcode of this ISA version"
    ILLEGAL_FIELD = 2, ("a reserved bit or undefined flag is set, or a field has a value "
                        "its opcode does not define or the activation unit does not support")
    UB_RANGE = 3, "the instruction addresses a unified-buffer row >= ub_rows"
    ACC_RANGE = 4, "the instruction addresses an accumulator row >= acc_rows"
    WEIGHT_MEM_RANGE = 5, "RW addresses a weight tile >= weight_mem_tiles"
    WEIGHT_FIFO_UNDERFLOW = 6, "MMC with SWITCH found no tile requested by an earlier RW"
    HOST_RANGE = 7, "a DMA touches host bytes outside the windows the driver programmed"
    DMA_ERROR = 8, "the host answered a DMA read with an error completion, or timed out"
    WEIGHT_FIFO_OVERFLOW = 9, ("RW would leave more than weight_fifo_tiles + 2 tiles requested "
                               "and not yet switched to")


class Func(_Described):
    """The activation function of ACT (field ``func``)."""

    NONE = 0, "identity"
    RELU = 1, "max(q, OUT_ZERO_POINT)"
    CLAMP = 2, "min(max(q, CLAMP_MIN), CLAMP_MAX) (ReLU6 and friends)"
    SIGMOID = 3, "entry q + 128 (int8 output) or q (uint8) of the table LDL loaded"
    TANH = 4, "entry q + 128 (int8 output) or q (uint8) of the table LDL loaded"


class Pool(_Described):
    """The pooling mode of ACT (field ``pool``)."""

    NONE = 0, "one output row per accumulator row"
    MAX = 1, "k x k windows, stride s, maximum"
    AVG = 2, ("k x k windows, stride s, average: the hardware divides by the window size "
              "k x k with TFLite's rounding (no registers needed)")
    GLOBAL_AVG = 3, (f"the average of all rows (at most {MAX_POOL_COUNT}), with TFLite's "
                     f"rounding: one output row")


class Reg(_Described):
    """The activation-unit registers that CFG sets, 32 bits each, 0 after reset.

    ``Member = value, signed, "meaning"``: a signed register holds an int32, an
    unsigned one a uint32; CFG's 32-bit ``value`` field is read accordingly.

    ACT uses OUT_ZERO_POINT, CLAMP_MIN and CLAMP_MAX saturated to the 9-bit
    range -256..255: a register holding ``v`` acts as ``min(max(v, -256), 255)``.
    """

    def __new__(cls, value, signed, meaning):
        member = int.__new__(cls, value)
        member._value_ = value
        member.signed = signed
        member.meaning = meaning
        return member

    @property
    def range(self):
        """The values the register holds, ``(low, high)`` inclusive."""
        return (-(1 << 31), (1 << 31) - 1) if self.signed else (0, (1 << 32) - 1)

    @property
    def type_name(self):
        return "int32" if self.signed else "uint32"

    OUT_ZERO_POINT = 0, True, ("output zero point, added after requantization "
                               "(-128..127 for int8 output, 0..255 for uint8)")
    CLAMP_MIN = 1, True, "lower bound of func=clamp, in the quantized output domain"
    CLAMP_MAX = 2, True, "upper bound of func=clamp, in the quantized output domain"
