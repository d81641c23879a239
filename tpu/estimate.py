"""How much memory generating a design takes, estimated before building it,
so that a command can refuse a configuration the machine cannot hold
instead of dying of MemoryError minutes later.

Measured (docs/verilog.md): Amaranth and Yosys together hold about 128 bytes
per bit of memory contents (every RAM's initial value is a Python integer and
an RTLIL constant) and about 300 KiB per processing element, on top of about
160 MiB for Python, Amaranth and the Yosys runtime.
"""

__all__ = ["memory_bits", "elaboration_memory", "available_memory", "format_bytes"]

BASE_BYTES = 160 << 20
BYTES_PER_MEMORY_BIT = 128
BYTES_PER_PE = 300 << 10


def memory_bits(config, top="chip"):
    """Bits of RAM in `top` ("engine", "core" or "chip") of `config`."""
    bits = config.acc_rows * config.cols * 32
    if top != "engine":
        bits += config.weight_mem_tiles * config.tile_bytes * 8
        bits += config.weight_fifo_tiles * config.tile_bytes * 8
        bits += config.ub_rows * config.rows * 8
    return bits


def elaboration_memory(config, top="chip"):
    """Estimated peak bytes of generating the Verilog of `top` for `config`."""
    return (BASE_BYTES + BYTES_PER_PE * config.rows * config.cols
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
