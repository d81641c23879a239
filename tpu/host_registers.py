"""BAR0: the chip's host-visible registers, one table for the RTL, the driver
and the docs.

Every register is 32 bits wide at a 4-byte aligned offset in a 4 KiB BAR.
64-bit quantities are a ``_LO``/``_HI`` pair; reading a counter's ``_LO``
latches its ``_HI`` half so the pair is read atomically (read ``_LO`` first).
Writes to read-only or unmapped offsets are ignored; reads of unmapped
offsets return `UNMAPPED`.
"""

import enum
from dataclasses import dataclass

from .isa import INSTRUCTION_BYTES, ISA_VERSION


__all__ = ["Register", "registers", "register_map", "BAR0_BYTES", "CHIP_ID", "HW_VERSION",
           "UNMAPPED", "Control", "Status", "Irq", "HostError", "COUNTER_NAMES",
           "window_offset", "counter_offset", "config_words", "register_bits",
           "register_overflow_bits", "kept_value", "counters_line"]


BAR0_BYTES = 4096
CHIP_ID = 0x54505531      # "TPU1"
HW_VERSION = 0x00010000   # 1.0
UNMAPPED = 0xBADADD00     # what a read of an unmapped offset returns


class Control(enum.IntFlag):
    """CONTROL bits. Writing 1 acts; the register reads as 0."""
    START = 1 << 0        #: fetch and run PROG_LEN instructions from PROG_ADDR
    ABORT = 1 << 1        #: stop the running program and DMA; the chip comes back idle
    SOFT_RESET = 1 << 2   #: ABORT, then every writable register back to its reset value
    WFILL = 1 << 3        #: copy WFILL_TILES tiles from host WFILL_ADDR into weight memory


class Status(enum.IntFlag):
    """STATUS bits (read-only)."""
    BUSY = 1 << 0         #: a program or weight fill is running
    HALTED = 1 << 1       #: the last program ran to its HALT
    ERROR = 1 << 2        #: the chip stopped with ERROR_CODE
    WFILL_BUSY = 1 << 3   #: a weight fill is running


class Irq(enum.IntFlag):
    """IRQ_ENABLE / IRQ_STATUS bits. IRQ_STATUS is write-1-to-clear."""
    HALT = 1 << 0
    INT = 1 << 1          #: an INT instruction; its code is in IRQ_CODE
    ERROR = 1 << 2
    WFILL_DONE = 1 << 3


class HostError(enum.IntEnum):
    """ERROR_CODE values above the core's `tpu.isa.Fault` codes (0..15): errors
    of the host interface itself.

    A failed DMA read while an RHM runs also faults the core with DMA_ERROR:
    ERROR_CODE then holds the CPL_* code and FAULT_INDEX the RHM's index.
    START or WFILL while the chip is busy or stopped with an error is ignored
    and counted in BAD_REQUESTS (it is not an error: the running program is
    left alone)."""
    FETCH_RANGE = 16      #: PROG_ADDR/PROG_LEN outside the DMA windows
    WFILL_RANGE = 17      #: WFILL_ADDR/WFILL_TILES outside the windows or weight memory
    CPL_STATUS = 18       #: a read completion came back with a status other than SC, or poisoned (EP)
    CPL_UNEXPECTED = 19   #: a completion whose tag has no read outstanding
    CPL_MALFORMED = 20    #: a completion whose length or byte count does not fit its read
    CPL_TIMEOUT = 21      #: a read had no completion for cpl_timeout cycles


COUNTER_NAMES = ("cycles", "mxu_active", "useful_macs", "weight_stall", "weight_shift",
                 "non_matrix", "raw_stall", "host_stall")


def counters_line(counters):
    """The eight counters as `tpu exec` and `tpu run` print them; None (a
    program the chip never started) says so."""
    if counters is None:
        return "counters: none (the chip ran no instruction of this program)"
    return "counters: " + ", ".join(f"{name} {counters[name]}" for name in COUNTER_NAMES)


@dataclass(frozen=True)
class Register:
    name: str
    offset: int
    access: str       #: "ro", "rw", "wo" (reads 0), "w1c"
    reset: int
    meaning: str


def window_offset(index):
    """Offset of DMA window `index`'s BASE_LO register."""
    return 0x100 + 16 * index


def counter_offset(index):
    """Offset of performance counter `index`'s _LO register."""
    return 0x200 + 8 * index


def _table(dma_windows):
    regs = [
        Register("ID", 0x000, "ro", CHIP_ID, "chip identifier, 0x54505531 (\"TPU1\")"),
        Register("VERSION", 0x004, "ro", HW_VERSION, "hardware version, major << 16 | minor"),
        Register("ISA_VERSION", 0x008, "ro", ISA_VERSION, "instruction-set version (tpu.isa)"),
        Register("ARRAY", 0x00C, "ro", 0, "rows | cols << 16 of the systolic array"),
        Register("ACC_ROWS", 0x010, "ro", 0, "accumulator rows"),
        Register("UB_ROWS", 0x014, "ro", 0, "unified-buffer rows"),
        Register("WEIGHT_FIFO_TILES", 0x018, "ro", 0, "weight FIFO depth in tiles"),
        Register("WEIGHT_MEM_TILES", 0x01C, "ro", 0, "weight memory size in tiles"),
        Register("LINK", 0x020, "ro", 0, "link_dw | read_tags << 8 | dma_windows << 16"),
        Register("MAX_PAYLOAD", 0x024, "ro", 0, "max payload size in bytes"),
        Register("MAX_READ_REQUEST", 0x028, "ro", 0, "max read request size in bytes"),
        Register("HOST_WIDTHS", 0x02C, "ro", 0, "host_addr_bits | counter_bits << 8"),
        Register("CONTROL", 0x040, "wo", 0, "Control bits: START, ABORT, SOFT_RESET, WFILL"),
        Register("STATUS", 0x044, "ro", 0, "Status bits: BUSY, HALTED, ERROR, WFILL_BUSY"),
        Register("ERROR_CODE", 0x048, "ro", 0, "tpu.isa.Fault (< 16) or HostError (>= 16); 0: none"),
        Register("FAULT_INDEX", 0x04C, "ro", 0xFFFFFFFF, "index in the program of the faulting "
                                                          "instruction; 0xFFFFFFFF: none faulted"),
        Register("PROG_ADDR_LO", 0x050, "rw", 0, "host address of the program, bits 31:0"),
        Register("PROG_ADDR_HI", 0x054, "rw", 0, "host address of the program, bits 63:32"),
        Register("PROG_LEN", 0x058, "rw", 0, "program length in instructions (16 bytes each)"),
        Register("IRQ_ENABLE", 0x060, "rw", 0, "Irq bits that send an interrupt"),
        Register("IRQ_STATUS", 0x064, "w1c", 0, "Irq bits raised since last cleared"),
        Register("IRQ_CODE", 0x068, "ro", 0, "code of the last INT instruction"),
        Register("MSI_ADDR_LO", 0x070, "rw", 0, "interrupt write address, bits 31:0"),
        Register("MSI_ADDR_HI", 0x074, "rw", 0, "interrupt write address, bits 63:32"),
        Register("MSI_DATA", 0x078, "rw", 0, "interrupt write data (one 32-bit word)"),
        Register("WFILL_ADDR_LO", 0x080, "rw", 0, "host address of the weight tiles, bits 31:0"),
        Register("WFILL_ADDR_HI", 0x084, "rw", 0, "host address of the weight tiles, bits 63:32"),
        Register("WFILL_TILE", 0x088, "rw", 0, "first weight-memory tile to fill"),
        Register("WFILL_TILES", 0x08C, "rw", 0, "tiles to fill (rows x cols bytes each, row-major)"),
        Register("BAD_REQUESTS", 0x090, "ro", 0, "host requests answered UR or dropped, and "
                                                  "START/WFILL refused because the chip was busy or stopped"),
        Register("DMA_ERROR", 0x094, "ro", 0, "HostError (CPL_*) of the DMA read that failed; 0: none"),
    ]
    for i in range(dma_windows):
        base = window_offset(i)
        regs += [
            Register(f"WIN{i}_BASE_LO", base + 0x0, "rw", 0, f"DMA window {i} base, bits 31:0"),
            Register(f"WIN{i}_BASE_HI", base + 0x4, "rw", 0, f"DMA window {i} base, bits 63:32"),
            Register(f"WIN{i}_SIZE_LO", base + 0x8, "rw", 0, f"DMA window {i} size in bytes, bits 31:0 (0: closed)"),
            Register(f"WIN{i}_SIZE_HI", base + 0xC, "rw", 0, f"DMA window {i} size in bytes, bits 63:32"),
        ]
    for i, name in enumerate(COUNTER_NAMES):
        regs += [
            Register(f"{name.upper()}_LO", counter_offset(i), "ro", 0,
                     f"counter {name}, bits 31:0 (latches bits 63:32)"),
            Register(f"{name.upper()}_HI", counter_offset(i) + 4, "ro", 0,
                     f"counter {name}, bits 63:32 as latched by the last _LO read"),
        ]
    return tuple(regs)


def registers(config):
    """The register table of a chip built with `config`."""
    return _table(config.dma_windows)


def register_map(config):
    return {r.name: r for r in registers(config)}


def config_words(config):
    """The values of the read-only configuration registers for `config`."""
    return {
        "ARRAY": config.rows | config.cols << 16,
        "ACC_ROWS": config.acc_rows,
        "UB_ROWS": config.ub_rows,
        "WEIGHT_FIFO_TILES": config.weight_fifo_tiles,
        "WEIGHT_MEM_TILES": config.weight_mem_tiles,
        "LINK": config.link_dw | config.read_tags << 8 | config.dma_windows << 16,
        "MAX_PAYLOAD": config.max_payload,
        "MAX_READ_REQUEST": config.max_read_request,
        "HOST_WIDTHS": config.host_addr_bits | config.counter_bits << 8,
    }


#: The registers holding the low and high halves of a host address (the
#: windows' are added per window).
_ADDRESS_PAIRS = ("PROG_ADDR", "MSI_ADDR", "WFILL_ADDR")


def register_bits(config):
    """{name: bits the chip keeps} for the registers that keep fewer than 32
    bits of what is written (or latched): the ``_HI`` halves of host
    addresses above ``host_addr_bits`` and of counters above
    ``counter_bits``, and with ``serial_host`` IRQ_ENABLE (the `Irq` bits). Such a register reads its kept bits, zero above; one
    that keeps none reads 0 and ignores writes."""
    pairs = list(_ADDRESS_PAIRS)
    for i in range(config.dma_windows):
        pairs += [f"WIN{i}_BASE", f"WIN{i}_SIZE"]
    bits = {f"{pair}_HI": config.host_addr_bits - 32 for pair in pairs}
    bits.update({f"{name.upper()}_HI": config.counter_bits - 32 for name in COUNTER_NAMES})
    if config.serial_host:
        # The host side's small form keeps only the interrupt bits there are.
        bits["IRQ_ENABLE"] = len(Irq)
    bits.update({name: n + 1 for name, n in register_overflow_bits(config).items()})
    return {name: n for name, n in bits.items() if n < 32}


def register_overflow_bits(config):
    """{name: n} for the registers that keep a value's low ``n`` bits and
    one bit more, set when the value written does not fit them (the
    narrow host side, `narrow_host`): WFILL_TILE and WFILL_TILES in the
    bits of ``weight_mem_tiles``, PROG_LEN in 28 bits (more instructions
    than that span more bytes than a 32-bit window holds). Every value
    that fits reads back as written; one that does not reads ``2**n`` plus
    its low bits (`kept_value`), still past the weight memory or the
    window, so a WFILL or START with it is refused as before."""
    if not config.narrow_host:
        return {}
    n = config.weight_mem_tiles.bit_length()
    bits = {name: n for name in ("WFILL_TILE", "WFILL_TILES") if n < 31}
    bits["PROG_LEN"] = config.host_addr_bits - (INSTRUCTION_BYTES - 1).bit_length()
    return bits


def kept_value(config, name, value):
    """What the rw register `name` keeps (and reads back) of a write of
    `value`: its `register_bits`, or with `register_overflow_bits` the low
    bits and whether any bit above them is set."""
    n = register_overflow_bits(config).get(name)
    if n is not None:
        low = value & ((1 << n) - 1)
        return low | (1 << n) if value >> n else low
    return value & ((1 << register_bits(config).get(name, 32)) - 1)
