"""How much memory generating a design takes, estimated before building it,
so that a command can refuse a configuration the machine cannot hold
instead of dying of MemoryError minutes later.

Generated Verilog holds one row of the systolic array, the array's skews
and the unified buffer, accumulators and weight memory each as one compact
module (docs/verilog.md), so what still grows with the configuration is:
the row's processing elements, converted once; the logic per column and
per row around the array (activation pipeline, pooling lanes, row
instances); and the smaller memories that Amaranth emits with their
contents word by word (the weight FIFO and the pooling line buffers),
about 128 bytes per bit (the initial value is a Python integer and an
RTLIL constant). On top comes about 256 MiB for Python, Amaranth and the
Yosys runtime. The constants are fitted to the measurements in
docs/verilog.md.
"""

__all__ = ["MachineTooSmall", "memory_bits", "elaboration_memory", "available_memory",
           "format_bytes", "simulated_cycles_per_second", "golden_cycles_per_second", "format_seconds", "sample_rows",
           "compile_estimate", "check_batch"]


class MachineTooSmall(RuntimeError):
    """Building, simulating or compiling would need more memory than this
    machine has available (checked before the work starts)."""


BASE_BYTES = 256 << 20
BYTES_PER_MEMORY_BIT = 128
BYTES_PER_PE = 300 << 10
BYTES_PER_LANE = 5 << 20

# Bits of one pooling line-buffer entry: 3 horizontal results of 11 bits
# (tpu.hdl.pooling: H_WIDTH x (MAX_POOL_SIZE - 1)).
_POOL_ENTRY_BITS = 33


def memory_bits(config, top="chip"):
    """Bits of the memories of `top` ("engine", "core" or "chip") of `config`
    that are emitted word by word."""
    if top == "engine":
        return 0
    return (config.weight_fifo_tiles * config.tile_bytes * 8
            + config.cols * config.pool_max_width * _POOL_ENTRY_BITS)


def elaboration_memory(config, top="chip"):
    """Estimated peak bytes of generating the Verilog of `top` for `config`."""
    lanes = config.rows + (config.cols if top == "engine" else 2 * config.cols)
    return (BASE_BYTES + BYTES_PER_PE * config.cols + BYTES_PER_LANE * lanes
            + BYTES_PER_MEMORY_BIT * memory_bits(config, top))


def available_memory():
    """Bytes of memory available to a new process (Linux MemAvailable), or None."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def format_bytes(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def simulated_cycles_per_second(config, simulator):
    """Roughly how many chip cycles `simulator` ("icarus" or "verilator")
    simulates per second of wall time, the driver's testbench included,
    on an otherwise idle core: fitted to docs/benchmarks.md (Verilator
    15 800 at 8x8, 1 000 at 64x64, 61 at 256x256; Icarus 378 at 8x8, 59 at
    16x16)."""
    pes = config.rows * config.cols
    if simulator == "icarus":
        return max(1.0, 24_000 / pes)
    return min(16_000.0, 4e6 / pes)


def golden_cycles_per_second(config):
    """Roughly how many chip cycles the golden chip (tpu.sim) runs per
    second of wall time. Rough: measured once with `tpu run` of ad01 on
    the default 8x8 chip on a busy 2-core machine (64 inferences at batch
    1, 3,969,920 cycles, 19 s; at batch 16, 295,040 cycles, 3 s with the
    start-up), and taken for every size (a larger array runs fewer cycles
    of more work each)."""
    return 200_000.0


def format_seconds(seconds):
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds / 3600:.1f} hours"


# Compiling at a batch ---------------------------------------------------------------------
#
# The back end places every tensor of a batch in unified-buffer rows (one
# pixel's block of `rows` channels per row, tpu.compiler.layout) and lowers
# the moves of those rows into instructions before it merges them, so its
# work and peak memory grow with the rows of one sample times the batch.
# Measured with `tpu compile --batch N` on a 1M-row unified buffer (on a
# machine at load 10, so the time is on the safe side): ad01 (289 rows per
# sample) 54 us and 54 bytes per row, KWS (9,510) 109 us and 100 bytes; at
# small batches about 70 MiB.

COMPILE_BASE_BYTES = 96 << 20
BYTES_PER_BATCH_ROW = 128
SECONDS_PER_BATCH_ROW = 80e-6


def sample_rows(graph, config):
    """Unified-buffer rows the tensors of one sample of `graph` (a
    `tpu.compiler.ir.Graph`) take on a chip of `config`."""
    rows = 0
    for tensor in graph.tensors.values():
        shape = tuple(tensor.shape)
        pixels = shape[0] * shape[1] if len(shape) == 3 else 1
        rows += pixels * -(-shape[-1] // config.rows)
    return rows


def compile_estimate(graph, config, batch):
    """``(seconds, bytes)``: roughly how long compiling `graph` for `config`
    at `batch` takes and its peak memory."""
    rows = sample_rows(graph, config) * batch
    return rows * SECONDS_PER_BATCH_ROW, COMPILE_BASE_BYTES + rows * BYTES_PER_BATCH_ROW


def check_batch(graph, config, batch):
    """Refuse (`MachineTooSmall`) compiling `graph` at `batch` when it would
    need more memory than is available; else the estimated seconds."""
    seconds, need = compile_estimate(graph, config, batch)
    have = available_memory()
    if have is not None and need > have:
        raise MachineTooSmall(
            f"batch {batch}: compiling this model at batch {batch} would need about "
            f"{format_bytes(need)} of memory ({sample_rows(graph, config):,} unified-buffer "
            f"rows per sample), and {format_bytes(have)} is available; choose a smaller batch")
    return seconds
