"""The chip's matrix unit alone, driven through registers: the part of the chip
that fits the iCE40 UP5K (docs/fpga.md, "What fits the UP5K").

`MatrixPart` holds the weight memory, the weight FIFO, a unified buffer, the
matrix engine (systolic array and accumulators) and a small controller in
place of the sequencer: the host writes weights and activation rows, queues
weight tiles (LOAD) and starts multiplies (MM_GO) through the registers of
`tpu.driver.matrix_part_registers`, and reads the accumulators back.

Writes that could race the engine wait until they cannot: a UB write or an
MM_GO waits until the last multiply has read its rows, a weight-memory write
until every queued tile has been read out of the weight memory, an
accumulator read until every row in flight is stored. A command that would
hang the engine is refused and sets STATUS.ERROR instead: an MM_GO that
switches tiles with none queued, or multiplies before any tile was
switched in; a LOAD past the last tile, or of more tiles than the weight
FIFO and the array hold (``weight_fifo_tiles + 2``) before they are used.
"""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import TPUConfig
from ..driver.matrix_part_registers import (MATRIX_PART_MAGIC, MAX_SIDE, MatrixPartRegister as R,
                                            MatrixPartStatus)
from .matrix_engine import MatrixEngine
from .memory_reader import MemoryReader
from .single_port_ram import SinglePortRam
from .register_target import RegisterRequest
from .weight_fifo import WeightFifo
from .weight_memory import WeightMemory


__all__ = ["MatrixPart", "check_matrix_part_config", "UP5K_MATRIX_PART_FIELDS"]

#: The matrix part built for the iCEBreaker's UP5K unless told otherwise
#: (`tpu build --top matrix`): a 4x4 array on the 8 SB_MAC16s, 256
#: accumulator rows, 16,384 UB rows (two SPRAMs), 64 weight tiles.
UP5K_MATRIX_PART_FIELDS = dict(rows=4, cols=4, acc_rows=256, ub_rows=16384, weight_mem_tiles=64,
                               weight_fifo_tiles=2, weight_mem_latency=1)


def check_matrix_part_config(config):
    """`config`, or ValueError naming what the matrix part cannot be built with."""
    if not isinstance(config, TPUConfig):
        raise TypeError(f"the matrix part needs a TPUConfig, not {config!r}")
    if config.rows > MAX_SIDE or config.cols > MAX_SIDE:
        raise ValueError(f"the matrix part's array is at most {MAX_SIDE}x{MAX_SIDE} (a row is one "
                         f"register word), not {config.rows}x{config.cols}")
    for name in ("acc_rows", "ub_rows", "weight_mem_tiles"):
        value = getattr(config, name)
        if value & (value - 1) or value > 1 << 16:
            raise ValueError(f"the matrix part's {name} must be a power of two up to 65536, not {value}")
    return config


class MatrixPart(wiring.Component):
    """The matrix unit of `config` behind a register bus; see the module docstring.

    Members
    -------
    request : In(stream.Signature(RegisterRequest(addr_bits)))
        Register accesses (`tpu.hdl.register_target.RegisterTarget.request`).
    read_data : Out(stream.Signature(32, always_ready=True))
        The answer to a read, the cycle after it was taken.
    busy, error : Out(1)
        STATUS.BUSY and STATUS.ERROR, for LEDs.
    """

    def __init__(self, config, *, addr_bits=10):
        self._config = check_matrix_part_config(config)
        self._engine = MatrixEngine(config)
        super().__init__({
            "request":   In(stream.Signature(RegisterRequest(addr_bits))),
            "read_data": Out(stream.Signature(32, always_ready=True)),
            "busy":      Out(1),
            "error":     Out(1),
        })

    @property
    def config(self):
        return self._config

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        rows, cols = cfg.rows, cfg.cols
        act_row = data.ArrayLayout(unsigned(8), rows)
        weight_row = data.ArrayLayout(signed(8), cols)

        m.submodules.engine = engine = self._engine
        m.submodules.weight_memory = wmem = WeightMemory(cfg)
        m.submodules.weight_fifo = wfifo = WeightFifo(cfg)
        # Written only while no multiply reads it: one port does, in SPRAM on the iCE40.
        m.submodules.ub = ub = SinglePortRam(shape=act_row, depth=cfg.ub_rows)
        side = data.StructLayout({"acc_addr": range(cfg.acc_rows), "accumulate": 1, "unsigned": 1,
                                  "switch": 1})
        m.submodules.reader = reader = MemoryReader(addr_shape=range(cfg.ub_rows), data_shape=act_row,
                                                    side_shape=side)
        wiring.connect(m, wfifo.mem_request, wmem.request)
        wiring.connect(m, wmem.response, wfifo.mem_response)
        wiring.connect(m, wfifo.o, engine.weights)
        m.d.comb += [ub.r_en.eq(reader.port.en), ub.r_addr.eq(reader.port.addr),
                     reader.port.data.eq(ub.r_data)]
        out = reader.o.payload
        m.d.comb += [
            engine.act.valid.eq(reader.o.valid),
            reader.o.ready.eq(engine.act.ready),
            engine.act.payload.data.eq(out.data),
            engine.act.payload.acc_addr.eq(out.side.acc_addr),
            engine.act.payload.accumulate.eq(out.side.accumulate),
            engine.act.payload.unsigned.eq(out.side.unsigned),
            engine.act.payload.switch.eq(out.side.switch),
        ]

        # ---- The multiply: MM_COUNT UB rows from MM_SRC into the engine ----
        src = Signal(range(cfg.ub_rows))
        count = Signal(range(cfg.ub_rows + 1))
        left = Signal(range(cfg.ub_rows + 1))
        ub_ptr = Signal(range(cfg.ub_rows))
        acc_ptr = Signal(range(cfg.acc_rows))
        flags = Signal(side)
        m.d.comb += [
            reader.i.valid.eq(left != 0),
            reader.i.payload.addr.eq(ub_ptr),
            reader.i.payload.side.eq(flags),
            reader.i.payload.side.acc_addr.eq(acc_ptr),
        ]
        with m.If(reader.i.valid & reader.i.ready):
            # The row that switches tiles is the multiply's first.
            m.d.sync += [ub_ptr.eq(ub_ptr + 1), acc_ptr.eq(acc_ptr + 1), left.eq(left - 1),
                         flags.switch.eq(0)]
        rows_read = left == 0
        rows_stored = rows_read & reader.idle & ~engine.busy

        # ---- Weight tiles: LOAD commands into the weight FIFO ----
        tiles = cfg.weight_mem_tiles
        capacity = cfg.weight_fifo_tiles + 2
        load_valid = Signal()
        load = Signal(wfifo.load.payload.shape())
        m.d.comb += [wfifo.load.valid.eq(load_valid), wfifo.load.payload.eq(load)]
        with m.If(wfifo.load.ready):
            m.d.sync += load_valid.eq(0)
        queued = Signal(range(capacity + 1))      # loaded, not yet switched in
        have_tile = Signal()                      # a tile was switched in
        weight_rows_out = Signal(range(rows * WeightMemory.OUTSTANDING + rows + 1))
        requested = wfifo.mem_request.valid & wfifo.mem_request.ready
        answered = wmem.response.valid & wmem.response.ready
        m.d.sync += weight_rows_out.eq(weight_rows_out + Mux(requested, rows, 0) - answered)
        weights_read = ~load_valid & wfifo.idle & (weight_rows_out == 0)

        # ---- Registers ----
        req = self.request.payload
        word = req.data
        offset = Cat(C(0, 2), req.addr)
        fire = self.request.valid & self.request.ready
        write = fire & req.write

        wmem_ptr = Signal(range(tiles * rows))
        ub_addr = Signal(range(cfg.ub_rows))
        acc_row = Signal(range(cfg.acc_rows))
        acc_col = Signal(range(cols))
        error = Signal()
        cycles = Signal(32)
        busy = Signal()
        m.d.comb += [busy.eq(~rows_stored | ~weights_read), self.busy.eq(busy), self.error.eq(error)]
        with m.If(busy):
            m.d.sync += cycles.eq(cycles + 1)

        # A request waits while acting on it could race the engine.
        with m.Switch(offset):
            with m.Case(R.WMEM_DATA):
                m.d.comb += self.request.ready.eq(~req.write | weights_read)
            with m.Case(R.UB_DATA, R.MM_GO):
                m.d.comb += self.request.ready.eq(~req.write | rows_read)
            with m.Case(R.ACC_DATA):
                m.d.comb += self.request.ready.eq(req.write | rows_stored)
            with m.Case(R.LOAD):
                m.d.comb += self.request.ready.eq(~req.write | ~load_valid)
            with m.Default():
                m.d.comb += self.request.ready.eq(1)

        m.d.comb += [
            wmem.fill.en.eq(write & (offset == R.WMEM_DATA)),
            wmem.fill.addr.eq(wmem_ptr),
            wmem.fill.data.eq(word[:8 * cols]),
            ub.w_en.eq(write & (offset == R.UB_DATA)),
            ub.w_addr.eq(ub_addr),
            ub.w_data.eq(word[:8 * rows]),
            engine.acc_read.en.eq(fire & ~req.write & (offset == R.ACC_DATA)),
            engine.acc_read.addr.eq(acc_row),
        ]

        switch_out = Signal()
        with m.If(write):
            with m.Switch(offset):
                with m.Case(R.STATUS):
                    with m.If(word & MatrixPartStatus.ERROR):
                        m.d.sync += error.eq(0)
                with m.Case(R.WMEM_ADDR):
                    m.d.sync += wmem_ptr.eq(word)
                with m.Case(R.WMEM_DATA):
                    m.d.sync += wmem_ptr.eq(wmem_ptr + 1)
                with m.Case(R.UB_ADDR):
                    m.d.sync += ub_addr.eq(word)
                with m.Case(R.UB_DATA):
                    m.d.sync += ub_addr.eq(ub_addr + 1)
                with m.Case(R.ACC_ADDR):
                    m.d.sync += [acc_row.eq(word), acc_col.eq(0)]
                with m.Case(R.LOAD):
                    tile, n = word[:16], word[16:]
                    with m.If((tile + n > tiles) | (queued + n > capacity)):
                        m.d.sync += error.eq(1)
                    with m.Elif(n != 0):
                        m.d.sync += [load_valid.eq(1), load.tile.eq(tile), load.count.eq(n),
                                     queued.eq(queued + n)]
                with m.Case(R.MM_SRC):
                    m.d.sync += src.eq(word)
                with m.Case(R.MM_COUNT):
                    m.d.sync += count.eq(Mux(word > cfg.ub_rows, cfg.ub_rows, word))
                with m.Case(R.MM_GO):
                    switch = (word & 0x40000) != 0
                    with m.If(Mux(switch, queued == 0, ~have_tile)):
                        m.d.sync += error.eq(1)
                    with m.Elif(count != 0):
                        m.d.comb += switch_out.eq(switch)
                        m.d.sync += [left.eq(count), ub_ptr.eq(src), acc_ptr.eq(word[:16]),
                                     flags.accumulate.eq(word[16]), flags.unsigned.eq(word[17]),
                                     flags.switch.eq(switch)]
        with m.If(switch_out):
            m.d.sync += have_tile.eq(1)
            # A LOAD in the same cycle is impossible (one request a cycle).
            m.d.sync += queued.eq(queued - 1)

        # Reads: answered the cycle after they are taken.
        answer = Signal()
        what = Signal(len(offset))
        col = Signal(range(cols))
        m.d.sync += [answer.eq(fire & ~req.write), what.eq(offset), col.eq(acc_col)]
        with m.If(fire & ~req.write & (offset == R.ACC_DATA)):
            with m.If(acc_col == cols - 1):
                m.d.sync += [acc_col.eq(0), acc_row.eq(acc_row + 1)]
            with m.Else():
                m.d.sync += acc_col.eq(acc_col + 1)
        status = Cat(busy, error, C(0, 6), queued)
        values = {
            R.ID: MATRIX_PART_MAGIC << 16 | rows << 8 | cols,
            R.ACC_ROWS: cfg.acc_rows, R.UB_ROWS: cfg.ub_rows, R.WEIGHT_TILES: tiles,
            R.FIFO_TILES: cfg.weight_fifo_tiles, R.STATUS: status, R.CYCLES: cycles,
            R.ACC_DATA: Value.cast(engine.acc_read.data).word_select(col, 32),
        }
        m.d.comb += self.read_data.valid.eq(answer)
        with m.Switch(what):
            for register, value in values.items():
                with m.Case(register):
                    m.d.comb += self.read_data.payload.eq(value)
        return m
