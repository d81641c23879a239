"""`TPUConfig`: the one description of a chip's sizes.

The RTL generators, the golden models, the test harness and the command line
all read the same frozen, validated `TPUConfig`, so a size can never disagree
between them.
"""

from dataclasses import dataclass, fields, asdict


__all__ = ["TPUConfig", "ConfigError", "PROFILES", "UP5K_PROFILE", "ULX3S16_PROFILE", "V1_PROFILE"]


class ConfigError(ValueError):
    """A `TPUConfig` field has a value outside its allowed range."""


# field name -> (smallest, largest, meaning)
_RANGES = {
    "rows":              (1, 256,      "rows of the systolic array (the K dimension of a tile)"),
    "cols":              (1, 256,      "columns of the systolic array (output channels of a tile)"),
    "acc_rows":          (1, 1 << 16,  "rows of the accumulator memory"),
    "ub_rows":           (1, 1 << 20,  "rows of the unified buffer"),
    "weight_fifo_tiles": (1, 64,       "weight tiles the weight FIFO holds"),
    "weight_mem_tiles":  (1, 1 << 20,  "weight tiles the weight memory holds"),
    "weight_mem_latency": (0, 1024,    "cycles from a weight-memory read request to its data"),
    "weight_mem_bytes_per_cycle": (1, 1 << 16, "weight-memory bandwidth in bytes per cycle"),
    "pool_max_width":    (1, 65535,    "widest image line (in_w) windowed pooling supports: "
                                       "the pooling line buffer's length"),
    "link_dw":           (1, 8,        "width of the host link's TLP stream, in 32-bit words (a power of two)"),
    "max_payload":       (128, 4096,   "largest TLP payload the chip sends, in bytes (a power of two)"),
    "max_read_request":  (128, 4096,   "largest read the chip requests in one TLP, in bytes (a power of two)"),
    "read_tags":         (1, 32,       "host reads the chip keeps in flight (TLP tags)"),
    "cpl_timeout":       (16, 1 << 24, "cycles the chip waits for a read completion before reporting an error"),
    "dma_windows":       (1, 16,       "host-memory windows the driver can open for DMA"),
    "requantizers":      (0, 256,      "requantizers the activation unit shares across the columns "
                                       "(0: one per column; at most cols)"),
    "requantizer_multiplier_width": (8, 32, "width of the requantizer's multiplier: 32 multiplies in "
                                            "one cycle, 16 in 4, 8 in 16 (a power of two)"),
    "host_addr_bits":    (32, 64,      "width of the host addresses the chip holds and sends "
                                       "(DMA windows, PROG_ADDR, WFILL_ADDR, MSI_ADDR, DMA jobs)"),
    "counter_bits":      (32, 64,      "width of the performance counters; they wrap modulo "
                                       "2**counter_bits"),
    "dsp_multipliers":   (0, 65536,    "PEs that multiply in a DSP block when built for an ECP5, the "
                                       "first ones row by row, the rest in logic (0: every PE)"),
    "dsp_bands":         (0, 1,        "1: built for the ECP5-85F, the PEs that multiply in a DSP block "
                                       "are three bands of rows, each on a line of DSP blocks"),
    "pe_multiplier_latency": (2, 3, "cycles each PE's multiplier takes: 2 (operands and product registered) "
                                    "or 3 (the product registered twice, for faster clocks; the array "
                                    "and the matrix engine take one cycle more)"),
    "serial_issue":      (0, 1,        "1: the sequencer issues to one unit at a time (an instruction "
                                       "waits until every other unit is idle), with no range interlocks; "
                                       "so the unified buffer is one single-port RAM (SPRAM on an iCE40), "
                                       "the accumulators have one read port and the RW queue is sized to "
                                       "the weight memory"),
    "serial_decode":     (0, 1,        "1: the decoder's geometry products are multiplied a bit a cycle "
                                       "on one shift-and-add multiplier sized to the unified buffer, and a "
                                       "DMA's host span is checked at host_addr_bits"),
    "serial_act":        (0, 1,        "1: the activation unit's small form: the requantizer rounds the "
                                       "product's magnitude once, keeping only the bits the clamp uses, and "
                                       "average pooling multiplies on one 16 x 16-bit multiplier over 4 "
                                       "cycles (needs requantizer_multiplier_width 16 or 8)"),
    "serial_host":       (0, 1,        "1: the host side's small form for a UART link (needs link_dw 1 and "
                                       "read_tags 1): the DMA writer queues its bytes as whole words, "
                                       "BAR0 serves one-word accesses and keeps only the interrupt bits, "
                                       "the TLP receiver keeps three header words (the third's low half) "
                                       "and payload words alone, the DMA reader times a completion on "
                                       "an LFSR, the sequencer queues 2 instructions (not 16)"),
    "narrow_host":       (0, 1,        "1: the chip speaks the narrow host protocol over its UART frames "
                                       "instead of TLPs (register reads and writes, one outstanding DMA "
                                       "read, DMA writes; needs serial_host 1 and host_addr_bits 32)"),
    "ram_counters":      (0, 1,        "1: the performance counters are kept in one block RAM, a few bits "
                                       "a counter in flip-flops flushed into it in turn, and a counter's "
                                       "register read takes a cycle more (needs serial_host 1)"),
    "mlas_rounding":     (0, 1,        "1: the requantizers round as ONNX Runtime's MLAS does in float32 "
                                       "(ACT's mlas_round flag); 0: they do not, and an ACT with the "
                                       "flag is the fault ILLEGAL_FIELD"),
}

_POWERS_OF_TWO = ("link_dw", "max_payload", "max_read_request", "requantizer_multiplier_width")


@dataclass(frozen=True, kw_only=True)
class TPUConfig:
    """Sizes of one chip.

    Attributes
    ----------
    rows, cols : int
        Shape of the systolic array. A weight tile is ``rows x cols`` int8 values;
        a unified-buffer row holds ``rows`` activations.
    acc_rows : int
        Rows of the accumulator memory, each ``cols`` int32 values.
    ub_rows : int
        Rows of the unified buffer, each ``rows`` bytes.
    weight_fifo_tiles : int
        Depth of the weight FIFO, in whole tiles.
    weight_mem_tiles : int
        Capacity of the weight memory, in whole tiles.
    weight_mem_latency : int
        Cycles between a weight-memory read request and its first data.
    weight_mem_bytes_per_cycle : int
        Weight-memory bandwidth.
    pool_max_width : int
        Widest image line (ACT's ``in_w``) that windowed pooling (MAX, AVG)
        supports: the length of the pooling line buffer, in pixels. A wider
        ACT is the fault ILLEGAL_FIELD.
    link_dw : int
        Width of the host link's TLP stream in 32-bit words (docs/host_interface.md).
    max_payload, max_read_request : int
        PCIe Max_Payload_Size and Max_Read_Request_Size, in bytes: the chip
        splits its DMA writes and read requests at these sizes.
    read_tags : int
        Host reads in flight at once.
    cpl_timeout : int
        Cycles without a completion after which an outstanding read is an error.
    dma_windows : int
        Host-memory windows the driver can open; DMA outside them is an error.
    requantizers : int
        Requantizers of the activation unit: 0 (the default) gives every
        column its own; ``k`` (at most `cols`) shares ``k`` among the
        columns, so ACT takes ``ceil(cols / k)`` cycles a row (same results).
    requantizer_multiplier_width : int
        32 (the default): each requantizer's 32 x 32-bit product is one
        multiply. 16 or 8: it is summed from 16 x 16 (8 x 8) products of the
        magnitudes' pieces over 4 (16) cycles, and ACT takes that many times
        longer a row (same results).
    host_addr_bits : int
        Width of the host addresses the chip holds: the DMA windows, the
        PROG_ADDR, WFILL_ADDR and MSI_ADDR registers and the DMA engines'
        address arithmetic. The ``_HI`` halves keep only the bits above 32
        (with 32, none: they read 0 and ignore writes); a window or an
        address past ``2**host_addr_bits`` is refused by the driver, and DMA
        there faults like any DMA outside the windows.
    counter_bits : int
        Width of the performance counters (COUNTER_NAMES); they wrap modulo
        ``2**counter_bits``, and a ``_HI`` half keeps only the bits above 32.
    dsp_multipliers : int
        0 (the default): every PE's multiply is a plain ``*``, which synthesis
        puts in a DSP block. ``n``: built for an ECP5, the first ``n`` PEs
        (row by row) multiply in a ``MULT18X18D`` and the others in logic
        (`tpu.hdl.multiplier.ECP5CarryChainMultiplier`), so that an array larger
        than the device's DSP blocks fits (same results, same cycles). Other
        builds ignore it.
    dsp_bands : int
        1: built for an ECP5-85F, the PEs that multiply in a ``MULT18X18D``
        are instead three bands of adjacent array rows, each placed on one of
        the device's three lines of DSP blocks
        (`tpu.fpga.ecp5_floorplan.band_sites`: 144 PEs at 16x16), the rest
        in logic; the instruction decoder's products then go into logic too,
        so that the chip's other DSP users fit the 12 sites left. Needs
        `dsp_multipliers` 0; other builds ignore it.
    pe_multiplier_latency : int
        2 (the default): every PE's multiplier registers its operands and
        its product, two cycles. 3: the product is registered twice, so
        that a multiply has two cycles of the clock and the route from it
        to the partial-sum adder one of its own; the systolic array's
        latency and the matrix engine's (`matrix_latency`) grow by one
        cycle (same results; `tpu.models.cycle_model` knows the cycles).
        In simulation each PE is a plain ``*``
        (`tpu.hdl.multiplier.PipelinedMultiplier`); built for an ECP5 the
        DSP PEs are `tpu.hdl.multiplier.ECP5PipelinedMultiplier` and the
        others `tpu.hdl.multiplier.PipelinedLUTMultiplier` (with
        `dsp_bands`, the ``band3`` array of docs/fpga.md); for an iCE40,
        the SB_MAC16 halves with a register after each.
    serial_issue : int
        0 (the default): the sequencer issues to every unit at once, an
        instruction waiting only on the running instructions whose UB or
        accumulator rows it shares (range interlocks). 1: an instruction
        waits until every other unit is idle and (but for an MMC) every
        matrix row is stored, so the interlocks and their range registers
        are not built (same results; `tpu.models.cycle_model` knows the
        cycles).
    serial_decode : int
        0 (the default): the decoder's convolution and pooling products are
        multiplied in one cycle. 1: each is clamped to the unified buffer's
        size and multiplied a bit a cycle on one shift-and-add multiplier
        (``ub_rows.bit_length() + 1`` cycles a product; an MMC with CONV
        takes four products, a windowed ACT one: `tpu.hdl.decoder.decode_cycles`).
    serial_act : int
        0 (the default): the activation pipeline as above. 1: its small
        form, for a `requantizer_multiplier_width` of 16 or 8: each
        requantizer works on the product's magnitude and makes both
        roundings with one shifter that keeps only the 10 bits the clamp can
        use, and the pooling unit's average is multiplied on one 16 x 16-bit
        multiplier over 4 cycles, which makes the pipeline's latency 3
        cycles longer (same results; `tpu.models.cycle_model` knows the
        cycles).
    serial_host : int
        0 (the default): the host side as above. 1: its small form for a
        chip behind a UART (`link_dw` 1 and `read_tags` 1 only): the DMA
        writer keeps its bytes in four word slots, each beat written at the
        job's byte offset, instead of a byte queue shifted by any amount
        (the same TLPs in the same cycles); BAR0 answers only one-word
        reads and writes (a two-word one is an Unsupported Request, as a
        three-word one is), and IRQ_ENABLE and IRQ_STATUS keep only their
        four `Irq` bits (`tpu.host_registers.register_bits`); the TLP
        receiver keeps a 4-word header's lower address word in place of its
        upper one (a received address reads its lower 32 bits), so its
        header queue is three words wide (docs/host_interface.md).
    narrow_host : int
        0 (the default): the chip behind a UART speaks TLPs in its frames.
        1 (needs ``serial_host`` 1 and ``host_addr_bits`` 32): it speaks the narrow host protocol
        (docs/serial_link.md, `tpu.driver.narrow_messages`) over the same
        frames: register writes and reads of one word, one DMA read
        outstanding at a time and answered in order, DMA writes of up to
        ``max_payload`` bytes. A small engine (`tpu.hdl.narrow_link`) takes
        the place of the TLP receiver, transmitter, arbiter, DMA reader and
        writer, and BAR0 decodes no TLPs; the driver's ``serial`` backend
        speaks it when the config says so.
    ram_counters : int
        0 (the default): each performance counter is ``counter_bits``
        flip-flops, and BAR0 reads them through its register multiplexer.
        1 (needs ``serial_host`` 1, so a counter is read a word at a time):
        they are ``counter_bits``-wide words of one block RAM
        (`tpu.hdl.counter_ram.CounterRam`); each keeps only the count of its
        last few cycles in flip-flops, added into its word by a
        read-modify-write as the counters take turns, one a cycle. A
        register read of a counter's ``_LO`` reads the RAM and adds what is
        pending, so it answers the value the counter had in the cycle the
        read was taken (the same values, clears and ``_LO``/``_HI`` latch),
        one cycle later than a read of any other register.
    mlas_rounding : int
        1 (the default): each requantizer can round as ONNX Runtime's MLAS
        does (``rint(float32(float32(x) * scale))``, ACT's ``mlas_round``
        flag, docs/activation_pipeline.md). 0: it cannot, which saves its
        tie window and float32 rounding of ``x`` (on the small form, more
        than half of the requantizer); an ACT with ``mlas_round`` is the
        fault ILLEGAL_FIELD, and the compiler rounds such layers once
        (`single_round`), which differs from ONNX Runtime on a few ties
        (docs/compiler.md).

    Raises
    ------
    TypeError
        A field is not an ``int``.
    ConfigError
        A field is outside its range; the message names the field and the range.
    """

    rows: int = 8
    cols: int = 8
    acc_rows: int = 512
    ub_rows: int = 2048
    weight_fifo_tiles: int = 4
    weight_mem_tiles: int = 1024
    weight_mem_latency: int = 8
    weight_mem_bytes_per_cycle: int = 8
    pool_max_width: int = 64
    link_dw: int = 2
    max_payload: int = 256
    max_read_request: int = 512
    read_tags: int = 8
    cpl_timeout: int = 4096
    dma_windows: int = 4
    requantizers: int = 0
    requantizer_multiplier_width: int = 32
    host_addr_bits: int = 64
    counter_bits: int = 64
    dsp_multipliers: int = 0
    dsp_bands: int = 0
    pe_multiplier_latency: int = 2
    serial_issue: int = 0
    serial_decode: int = 0
    serial_act: int = 0
    serial_host: int = 0
    narrow_host: int = 0
    ram_counters: int = 0
    mlas_rounding: int = 1

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"TPUConfig.{f.name} must be an int, not {value!r}")
            low, high, meaning = _RANGES[f.name]
            if not low <= value <= high:
                raise ConfigError(f"TPUConfig.{f.name} = {value} is out of range: "
                                  f"{meaning} must be in {low}..{high}")
            if f.name in _POWERS_OF_TWO and value & (value - 1):
                raise ConfigError(f"TPUConfig.{f.name} = {value} is not a power of two: {meaning}")
        if self.dsp_bands and self.dsp_multipliers:
            raise ConfigError(f"TPUConfig.dsp_bands = 1 places the array's DSP blocks itself: "
                              f"dsp_multipliers must be 0 with it, not {self.dsp_multipliers}")
        if self.serial_act and self.requantizer_multiplier_width == 32:
            raise ConfigError("TPUConfig.serial_act = 1 needs requantizer_multiplier_width 16 or 8 "
                              "(a product over several cycles), not 32")
        if self.serial_host and (self.link_dw != 1 or self.read_tags != 1):
            raise ConfigError(f"TPUConfig.serial_host = 1 is the host side of a one-word link with one "
                              f"read tag: it needs link_dw 1 and read_tags 1, not {self.link_dw} and "
                              f"{self.read_tags}")
        if self.narrow_host and not self.serial_host:
            raise ConfigError("TPUConfig.narrow_host = 1 is a protocol of the host side's small form "
                              "behind a UART: it needs serial_host 1")
        if self.narrow_host and self.host_addr_bits != 32:
            raise ConfigError(f"TPUConfig.narrow_host = 1 carries 32-bit host addresses: it needs "
                              f"host_addr_bits 32, not {self.host_addr_bits}")
        if self.ram_counters and not self.serial_host:
            raise ConfigError("TPUConfig.ram_counters = 1 reads a counter a word at a time, as the "
                              "host side's small form does: it needs serial_host 1")
        if self.requantizers > self.cols:
            raise ConfigError(f"TPUConfig.requantizers = {self.requantizers} is more than "
                              f"cols = {self.cols}: at most one requantizer per column")

    @classmethod
    def field_names(cls):
        return [f.name for f in fields(cls)]

    @classmethod
    def describe(cls, name):
        """The allowed range and meaning of field `name`, as text."""
        low, high, meaning = _RANGES[name]
        return f"{meaning} ({low}..{high})"

    @classmethod
    def from_options(cls, values, profile=None):
        """The chip of board `profile` (a name in `PROFILES`, or None) with
        the field `values` given on top; an unknown profile is a ConfigError."""
        if profile is None:
            return cls(**values)
        if profile not in PROFILES:
            raise ConfigError(f"unknown board profile {profile!r}: the profiles are "
                              + ", ".join(sorted(PROFILES)))
        return cls(**{**PROFILES[profile], **values})

    def replace(self, **changes):
        """A copy with `changes` applied (and validated)."""
        return TPUConfig(**{**asdict(self), **changes})

    def to_dict(self):
        return asdict(self)

    @property
    def name(self):
        """A short identifier, used for build directories and test ids."""
        return f"{self.rows}x{self.cols}"

    @property
    def acc_addr_width(self):
        return max(1, (self.acc_rows - 1).bit_length())

    @property
    def ub_addr_width(self):
        return max(1, (self.ub_rows - 1).bit_length())

    @property
    def tile_bytes(self):
        return self.rows * self.cols

    @property
    def requantizer_lanes(self):
        """Requantizers the activation pipeline has (`requantizers`, or `cols`)."""
        return self.requantizers or self.cols

    @property
    def requantize_steps(self):
        """Cycles the activation pipeline takes per accumulator row: one
        step per group of `requantizer_lanes` columns."""
        return -(-self.cols // self.requantizer_lanes)

    @property
    def requantize_multiply_cycles(self):
        """Cycles a requantizer's product takes (`requantizer_multiplier_width`)."""
        return (32 // self.requantizer_multiplier_width) ** 2

    @property
    def act_row_cycles(self):
        """Cycles between accumulator rows the activation pipeline accepts."""
        return self.requantize_steps * self.requantize_multiply_cycles

    @property
    def matrix_latency(self):
        """Cycles from a row accepted by the matrix engine to its
        accumulator row stored: the array's ``rows + cols - 1`` and its
        multipliers' `pe_multiplier_latency`, plus the read-modify-write."""
        return self.rows + self.cols + self.pe_multiplier_latency

    @property
    def peak_macs_per_cycle(self):
        return self.rows * self.cols


#: The host-interface fields of a chip for a small FPGA behind a UART (the
#: iCEBreaker's UP5K): one read tag, one DMA window, a one-word link, the
#: smallest TLPs, 32-bit host addresses and 32-bit counters. A board profile
#: adds its core fields to these (the `up5k` profile also the host side's
#: small form, `serial_host`).
UP5K_HOST_FIELDS = dict(link_dw=1, max_payload=128, max_read_request=128, read_tags=1,
                        dma_windows=1, host_addr_bits=32, counter_bits=32)

#: Board profiles: field values for a chip sized for one FPGA board, the
#: same programs bit-exact through the same driver (docs/fpga.md), and
#: TPU v1's sizes. Options given with a profile override its values.
PROFILES = {
    # iCE40 UP5K (iCEBreaker): a 2x2 array, small memories, a host interface
    # for a UART, one requantizer with a 16 x 16-bit multiplier (ACT takes
    # 8 cycles a row) and the small activation pipeline, the sequencer
    # issuing to one unit at a time, the decoder's products a bit a cycle and
    # the host side's small form speaking the narrow host protocol over the
    # UART (no TLP layer), the performance counters in a block RAM, and no
    # MLAS rounding (its tie window doubles the small requantizer, and the
    # chip is over its LUT budget).
    "up5k": dict(rows=2, cols=2, acc_rows=64, ub_rows=256, weight_mem_tiles=16, pool_max_width=16,
                 cpl_timeout=16000000, **UP5K_HOST_FIELDS,
                 requantizers=1, requantizer_multiplier_width=16, serial_issue=1, serial_decode=1,
                 serial_act=1, serial_host=1, narrow_host=1, ram_counters=1, mlas_rounding=0),
    # ECP5-85F (ULX3S): a 16x16 array, 144 of its PEs in three bands of
    # rows on the three lines of MULT18X18D (the placement that routes,
    # with nextpnr's static placer; the decoder's products then go into
    # logic, and the pooling unit, which shares the requantizer's one lane,
    # the requantizer, the activation unit and the decoder's remaining
    # products take 10 of the 12 blocks left) and 112 in logic, one
    # requantizer with a 16 x 16-bit multiplier (ACT takes 64 cycles a
    # row), a weight memory of 512 tiles, the UP5K's host interface for a
    # UART (docs/fpga.md). Its PEs multiply in three cycles, band3's
    # multipliers (a product register after each MULT18X18D, the others
    # PipelinedLUTMultiplier): the two-cycle ones in logic were the chip's
    # slowest path, and the cycle more per MMC costs under 0.2% of an
    # MLPerf Tiny inference. With the MLAS rounding, whose float32(x)
    # leaves its add to the product's first cycle, within the activation
    # unit's depth budget (docs/activation_pipeline.md).
    "ulx3s16": dict(rows=16, cols=16, weight_mem_tiles=512, cpl_timeout=16000000, **UP5K_HOST_FIELDS,
                    requantizers=1, requantizer_multiplier_width=16, dsp_bands=1,
                    pe_multiplier_latency=3),
    # TPU v1 (Jouppi et al., ISCA 2017), a compiler target rather than a
    # board: its 256x256 array, 24 MiB unified buffer (98 304 rows of 256
    # bytes), 4 MiB of accumulators (4 096 rows of 256 int32) and its
    # weight memory's 34 GB/s of DDR3 at 700 MHz (48 bytes a cycle).
    "v1": dict(rows=256, cols=256, ub_rows=24 * 2**20 // 256, acc_rows=4 * 2**20 // (256 * 4),
               weight_mem_bytes_per_cycle=48),
}

#: The chip of the "up5k" profile.
UP5K_PROFILE = TPUConfig(**PROFILES["up5k"])

#: The chip of the "ulx3s16" profile.
ULX3S16_PROFILE = TPUConfig(**PROFILES["ulx3s16"])

#: The chip of the "v1" profile (TPU v1's sizes).
V1_PROFILE = TPUConfig(**PROFILES["v1"])
