"""Cycle estimate of a program on the core, without the RTL.

`estimate_cycles` follows the program instruction by instruction, as the
sequencer issues it, and computes when each instruction issues and when its
unit is done, from the timing rules of each block (docs/core.md,
docs/matrix_engine.md, docs/core_performance.md). It is event based: one step
per instruction and per weight tile, with closed forms for the rows of an
MMC, so its cost hardly grows with the number of rows.

Cycle 0 is the cycle in which the first instruction is offered to the core;
the instruction stream is assumed never to idle. The host answers a read
request `host_latency` cycles after the first cycle it could (0: the data's
first beat comes in the cycle after the request is accepted) and then sends
one UB row per cycle; it takes write data at once.

What is modelled (each rule is the RTL's, in cycles):

* the instruction queue (an instruction can be decoded 2 cycles after it was
  written), decode in 3 cycles (the ranges, then the fault and the range
  comparisons registered before issue), more for an MMC with CONV and a
  windowed ACT (serial divisions, a cycle per bit of the dividend, and the
  geometry's products and sums registered: `tpu.hdl.decoder.decode_cycles`,
  e.g. 12 for a CONV MMC of 9 to 16 rows; with ``config.serial_decode`` a
  bit of each product a cycle),
  the next decode starting in the cycle an instruction issues;
* in-order issue, one instruction at a time per unit, with the range-based
  interlocks: a hazard on a unit's running instruction clears in the cycle
  after that unit is idle; an RHM waits for a running WHM to be idle, and a
  WHM for an RHM (host memory is read and written in program order); a
  hazard on the accumulator rows of an MMC in flight clears two cycles after
  that MMC's last row is stored (the sequencer tracks the ranges of up to
  `ACC_SLOTS` MMCs; with every slot taken, a new MMC's rows are merged into
  the youngest slot, which then frees with the new MMC); SYNC, INT and HALT
  wait for every unit to be idle and the engine drained; with
  ``config.serial_issue`` no ranges: an instruction for a unit waits until
  every other unit is idle, and but for an MMC until the engine is drained
  (the cycle after the last row is stored);
* RHM: rows in cycles ``issue + 2 + host_latency ..``, one per cycle (a cycle
  in which ACT writes the UB delays it by one); WHM: rows leave in
  ``issue + 3 ..``;
* MMC: UB reads from ``issue + 1``, rows at the engine two cycles after their
  read, at most three rows read ahead of the engine; the next MMC is taken in
  the cycle of the last read; a row with SWITCH waits for its tile; rows are
  stored ``rows + cols + 2`` cycles after they enter the array (``rows +
  cols + 3`` with ``config.pe_multiplier_latency`` 3: `TPUConfig.matrix_latency`);
* weights: RW reaches the weight FIFO 2 cycles after issue, one command at a
  time; a tile is requested when fewer than ``weight_fifo_tiles`` tiles are
  requested and not yet passed to the array and the weight memory has fewer
  than 4 requests waiting; its first row is read ``max(weight_mem_latency, 2)``
  cycles after the request, rows are read every ``ceil(cols /
  min(bytes_per_cycle, cols))`` cycles, and each reaches the array 4 cycles
  after its read; the array takes a tile's rows into its transit registers
  once the previous tile is captured into shadow; a tile is captured one
  cycle after its last row, and not before ``rows - 1`` cycles after the
  switch that emptied the shadow registers; a switch comes at least one cycle
  after the capture of its tile;
* ACT: settings written 2 cycles after issue (36 with average pooling: the
  reciprocal's division), once the pipeline has finished the previous ACT's
  rows; rows read one per cycle from the next cycle; done ``rows + 2`` cycles
  after the settings or 18 cycles after the row that completes the last
  result (the 13-cycle pipeline, its pooling average in 3 registered stages
  and the pooling unit's input register, the UB write), whichever is later:
  ``rows + 19`` cycles for an ACT without pooling (`TIMING`'s ``act_*`` are
  of a 10-cycle pipeline, plus ``ActivationPipeline.extra_latency``). With
  shared requantizers (``config.requantizers``) the pipeline takes a row
  every ``s = act_row_cycles`` cycles and its latency is ``s - 1`` cycles
  longer; the ACT is done no earlier than 2 cycles after the pipeline has
  taken its last row (``3 + (rows - 1) x s`` cycles after the settings). The
  small form (``config.serial_act``) has no input register before its
  pooling unit, whose average multiplies over 4 cycles, not 3: its results
  come as late as the others'. CFG takes 1 cycle,
  LDQ ``19 x cols + 1``, LDL ``2 x ceil(256 / rows) + 257``.

With ``host=HostLink.of(config, latency)`` the estimate is of the whole chip
behind its PCIe-style link instead (`tpu.models.link_model`, whose
docstring gives its rules): instructions reach the queue as the program
fetcher's DMA reads deliver them, RHM rows as their completions do, WHM rows
as the DMA writer takes them; the rest is as above.

A program that faults is followed up to the faulting instruction, which then
behaves as HALT (the chip halts when the earlier ones are done). Without a
HALT the estimate ends when everything is idle.
"""

import bisect
import itertools
from dataclasses import dataclass, field

from ..config import TPUConfig
from ..hdl.activation_pipeline import ActivationPipeline
from ..hdl.decoder import decode_cycles
from ..hdl.sequencer import ACC_SLOTS, Sequencer
from ..isa import (Act, Cfg, Fault, Halt, Int, Ldl, Ldq, Mmc, Pool, Rhm, Rw, Sync, Whm,
                   INSTRUCTION_BYTES, ldl_rows, ldq_rows)
from .chip_model import checked_decode
from .link_model import LINK_TIMING, HostLink, LinkTiming, fetch_chunks


__all__ = ["estimate_cycles", "TIMING", "HostLink"]


#: The fixed latencies the estimate uses, in cycles (see the module docstring).
TIMING = {
    "queue": 2,              # instruction written -> can be loaded into the decoder
    # load -> issue: decode_cycles(word), from the decoder (3 but for divisions)
    "rhm_first_row": 2,      # RHM issue -> first row written (ideal host)
    "whm_idle": 3,           # WHM issue -> idle, after `rows` rows
    "mmc_first_read": 1,     # MMC issue -> first UB read
    "mmc_read_to_row": 2,    # UB read -> row at the matrix engine
    "mmc_read_ahead": 3,     # rows read and not yet in the array
    "range_clear": 1,        # unit idle -> its ranges stop blocking
    "drain_clear": 2,        # last row stored -> accumulator ranges stop blocking
    "rw_to_fifo": 3,         # RW issue -> first tile request
    "rw_next_command": 2,    # last request of a command -> first of the next
    "wmem_min_latency": 2,   # request -> first row read, at least
    "wmem_outstanding": 4,   # requests the weight memory queues
    "wmem_to_array": 4,      # row read -> row at the array's weight port
    "act_settings": 2,       # ACT issue -> settings written (pipeline idle)
    "act_reciprocal": 34,    # extra before that for AVG / GLOBAL_AVG (a 33-bit dividend)
    "act_read_done": 2,      # settings -> idle, beyond the rows (all rows read)
    "act_last_write": 15,    # settings -> idle, after the row completing the last result
    "act_pipeline_free": 12, # settings -> pipeline free for new settings, beyond the rows
    "act_first_write": 13,   # settings -> first UB row written
    "act_first_row_taken": 3, # settings -> first row taken by the pipeline
    "ldq_column": 19,        # LDQ: cycles per column (9 UB reads, a channel write)
    "ldq_first_channel": 19, # LDQ issue -> first channel written
    "ldl_first_entry": 3,    # LDL issue -> first table entry written
}


@dataclass
class _Tile:
    command_issue: int
    first_of_command: bool
    request: int = None
    reads: tuple = None      # first and last row read
    beats: tuple = None      # first and last row into the array
    capture: int = None
    switch: int = None


@dataclass
class _Unit:
    ready: int = 0           # the unit takes its next instruction from this cycle
    idle: int = 0            # idle from this cycle on
    ranges: dict = field(default_factory=dict)


def _span(first, count):
    return (first, first + count - 1) if count else None


def _overlap(a, b):
    return a is not None and b is not None and a[0] <= b[1] and b[0] <= a[1]


def _ceil_div(a, b):
    return -(-a // b)


def _ranges(ins, config):
    """UB and accumulator rows an instruction reads and writes (as the sequencer sees them)."""
    r = {}
    if isinstance(ins, Rhm):
        r["ub_w"] = _span(ins.ub, ins.rows)
    elif isinstance(ins, Whm):
        r["ub_r"] = _span(ins.ub, ins.rows)
    elif isinstance(ins, Mmc):
        r["ub_r"] = (ins.ub, ins.last_ub_row) if ins.rows else None
        r["acc_w"] = _span(ins.acc, ins.rows)
    elif isinstance(ins, Act):
        r["acc_r"] = _span(ins.acc, ins.rows)
        r["ub_w"] = _span(ins.ub, ins.output_rows)
    elif isinstance(ins, Ldq):
        r["ub_r"] = _span(ins.ub, ldq_rows(config))
    elif isinstance(ins, Ldl):
        r["ub_r"] = _span(ins.ub, ldl_rows(config))
    return {k: v for k, v in r.items() if v is not None}


def _last_completing_row(act):
    """Index of the input row of `act` that completes its last output row."""
    if not act.windowed:
        return act.rows - 1
    out_h, out_w = act.output_shape
    k, s = act.pool_size, act.pool_stride
    return ((out_h - 1) * s + k - 1) * act.in_w + (out_w - 1) * s + k - 1


def _completing_rows(act):
    """Indices of the input rows of `act` whose result is written to the UB."""
    if act.pool == Pool.GLOBAL_AVG:
        return [act.rows - 1]
    if not act.windowed:
        return range(act.rows)
    out_h, out_w = act.output_shape
    k, s = act.pool_size, act.pool_stride
    return [(oy * s + k - 1) * act.in_w + ox * s + k - 1
            for oy in range(out_h) for ox in range(out_w)]


def _rhm_end(first, rows, writes):
    """The cycle an RHM whose rows could be written one per cycle from `first`
    is idle, when the UB write port is taken in the `writes` cycles (one-cycle
    intervals, sorted: `_add_writes`) by the activation unit, which has priority."""
    t, left = first, rows
    # Only writes from `first` on can hold a row back; a long program has many
    # before it (the search keeps a model's estimate linear in its ACTs).
    for a, b in itertools.islice(writes, bisect.bisect_left(writes, (first, first)), None):
        if b < t:
            continue
        if a > t:
            step = min(left, a - t)
            left -= step
            t += step
            if not left:
                break
        t = max(t, b + 1)
    return t + left


def _add_writes(writes, cycles):
    """Add the one-cycle UB writes in `cycles` to `writes`, kept sorted (an ACT's
    come after the previous one's, so they are appended)."""
    cycles = list(cycles)
    if all(a < b for a, b in zip(cycles, cycles[1:])) and (
            not writes or not cycles or (cycles[0], cycles[0]) >= writes[-1]):
        # (the usual case: increasing, after every write so far)
        writes.extend(zip(cycles, cycles))
        return
    for c in cycles:
        if writes and (c, c) < writes[-1]:
            bisect.insort(writes, (c, c))
        else:
            writes.append((c, c))


def _rhm_link_end(issue, arrivals, writes):
    """``(idle cycle, host stall cycles)`` of an RHM issued in `issue` whose rows
    arrive from the link in the cycles `arrivals`, when the UB write port is taken
    in the `writes` cycles (intervals) by the activation unit. The RTL counts a
    stall in a cycle with no row offered, not one whose row waits for the port."""
    blocked = {t for a, b in itertools.islice(
        writes, bisect.bisect_left(writes, (arrivals[0], arrivals[0])), None)
        for t in range(a, b + 1)}
    written, stall = issue, 0
    for arrival in arrivals:
        stall += max(0, arrival - (written + 1))
        t = max(arrival, written + 1)
        while t in blocked:
            t += 1
        written = t
    return written + 1, stall


def _conflict(new, running):
    """The sequencer's hazard rule: write/read, read/write, write/write on UB or accumulators."""
    for write, read in _SPACES:
        w, r = new.get(write), new.get(read)
        rw, rr = running.get(write), running.get(read)
        if _overlap(w, rr) or _overlap(w, rw) or _overlap(r, rw):
            return True
    return False


#: the unit of each instruction class that has one
_TARGETS = {Rhm: "rhm", Whm: "whm", Mmc: "mmc", Act: "act", Cfg: "act", Ldq: "act", Ldl: "act"}

#: the range keys of the UB and the accumulators (`_ranges`): written, read
_SPACES = (("ub_w", "ub_r"), ("acc_w", "acc_r"))


class _WeightPath:
    """RW commands -> weight FIFO -> weight memory -> the array's weight registers."""

    def __init__(self, config):
        self.cfg = config
        self.tiles = []
        self.gap = _ceil_div(config.cols, min(config.weight_mem_bytes_per_cycle, config.cols))
        self.latency = max(config.weight_mem_latency, TIMING["wmem_min_latency"])
        self.done = 0            # tiles whose timing is computed

    def request(self, issue, count):
        for k in range(count):
            self.tiles.append(_Tile(issue, k == 0))

    def _guard(self, switch):
        """First cycle a capture may come after `switch` emptied the shadow registers."""
        return switch if self.cfg.rows == 1 else switch + self.cfg.rows - 1

    def compute(self, upto):
        """Timing of tiles up to `upto` (their beats; captures where possible)."""
        cfg, T = self.cfg, self.tiles
        while self.done <= upto and self.done < len(T):
            k = self.done
            tile = T[k]
            q = tile.command_issue + TIMING["rw_to_fifo"]
            if k:
                q = max(q, T[k - 1].request + (TIMING["rw_next_command"] if tile.first_of_command
                                              else 1))
            if k >= cfg.weight_fifo_tiles:       # room reserved in the weight FIFO
                q = max(q, T[k - cfg.weight_fifo_tiles].beats[1] + 1)
            if k >= TIMING["wmem_outstanding"]:  # the weight memory's request queue
                q = max(q, T[k - TIMING["wmem_outstanding"]].reads[1] + 1)
            tile.request = q
            first = q + self.latency
            if k:
                first = max(first, T[k - 1].reads[1] + self.gap)
            tile.reads = (first, first + (cfg.rows - 1) * self.gap)
            # Into the transit registers once the previous tile is captured.
            beat = first + TIMING["wmem_to_array"]
            if k:
                if T[k - 1].capture is None:
                    break                         # waits for a switch not yet known
                beat = max(beat, T[k - 1].beats[1] + 1, T[k - 1].capture)
            tile.beats = (beat, max(tile.reads[1] + TIMING["wmem_to_array"], beat + cfg.rows - 1))
            self.done += 1
            self._capture(k)

    def _capture(self, k):
        T = self.tiles
        tile = T[k]
        if tile.beats is None or tile.capture is not None:
            return
        capture = tile.beats[1] + 1
        if k:
            if T[k - 1].switch is None:
                return                            # the shadow is still full
            capture = max(capture, self._guard(T[k - 1].switch))
        tile.capture = capture

    def switch_ready(self, k):
        """First cycle a row switching to tile `k` can enter the array."""
        self.compute(k)
        self._capture(k)
        return self.tiles[k].capture + 1

    def switched(self, k, cycle):
        self.tiles[k].switch = cycle
        if k + 1 < len(self.tiles):
            self._capture(k + 1)


def estimate_cycles(config, program, *, host_latency=0, schedule=False, host=None):
    """Estimate the core's cycles and performance counters for `program`.

    Parameters
    ----------
    config : TPUConfig
    program : bytes or list of instructions
        The encoded program (or `tpu.isa` instructions).
    host_latency : int
        Extra cycles before the first row of each RHM arrives (0: the ideal
        host of ``sim/bench/bench_core.py``).
    host : HostLink or None
        None: the ideal host above (the RTL core's benchmark). A
        `tpu.models.link_model.HostLink`: the whole chip behind its
        PCIe-style link and a deterministic host (the program fetched by DMA,
        RHM rows and WHM rows at the link's pace), as `tpu.driver` runs it on
        the RTL with ``host_latency``; `host_latency` is then ignored.
    schedule : bool
        Also return, per instruction, its decode-done (``ready``) and issue
        cycles, the cycle its unit is done with it, the cycles it waited by
        cause (``waits``: ``unit busy``, ``raw``, ``weight``, ``host``) and
        for an MMC its ``rows`` (first and last entry into the array); and
        per weight tile its request, reads, beats, capture and switch cycles
        (``weight_tiles``).

    Returns
    -------
    dict
        ``cycles`` (as the RTL's ``cycles`` counter: until halted), ``counters``
        (the estimated value of every performance counter), ``matrix_phase``
        (``first_row``, ``last_row``, ``cycles``: from the first row into the
        array to the last), ``utilisation`` (``matrix_phase`` and
        ``program``), and with `schedule` the lists ``schedule`` and
        ``weight_tiles``.
    """
    if not isinstance(config, TPUConfig):
        raise TypeError(f"estimate_cycles needs a TPUConfig, not {config!r}")
    if host is not None and not isinstance(host, HostLink):
        raise TypeError(f"estimate_cycles: host must be a HostLink or None, not {host!r}")
    if isinstance(program, (bytes, bytearray)):
        words = [bytes(program[i:i + INSTRUCTION_BYTES])
                 for i in range(0, len(program) - INSTRUCTION_BYTES + 1, INSTRUCTION_BYTES)]
    else:
        words = [ins.encode() for ins in program]
    # A model's runs repeat whole programs: estimate each once.
    key = (config, host_latency, schedule, host, b"".join(words))
    if key not in _ESTIMATES:
        if len(_ESTIMATES) >= _ESTIMATES_KEPT:
            _ESTIMATES.pop(next(iter(_ESTIMATES)))
        if host is None:
            _ESTIMATES[key] = _estimate(config, words, host_latency, schedule)
        else:
            _ESTIMATES[key] = _estimate_on_link(config, words, host, schedule)
    return _copy(_ESTIMATES[key])


def _copy(estimate):
    """A copy of `estimate` its caller may change (its dicts and the schedule's entries)."""
    return {name: dict(value) if isinstance(value, dict)
            else [dict(entry) for entry in value] if isinstance(value, list) else value
            for name, value in estimate.items()}


#: estimates by (config, host latency, schedule, program), oldest first
_ESTIMATES = {}
_ESTIMATES_KEPT = 64


def _estimate_on_link(config, words, host, schedule):
    """`_estimate` behind the host link. The reader serves fetch chunks and
    RHMs in the order it takes them; a chunk's turn depends on when the core
    makes room for it, known only as the estimate runs, so the estimate is
    repeated with the previous pass's chunk times until they agree."""
    guesses = {}
    for _ in range(_LINK_PASSES):
        result, fetch_valid = _estimate(config, words, 0, schedule, host, guesses)
        if fetch_valid == guesses:
            break
        guesses = fetch_valid
    return result


#: passes of `_estimate_on_link` at most (two or three settle every program measured)
_LINK_PASSES = 6


class _Fetch:
    """The program fetcher and the core's instruction queue behind the link:
    when each instruction is handed to the core."""

    def __init__(self, config, link, host, length, guesses):
        self.link = link
        self.host = host
        self.chunks = fetch_chunks(length)
        self.guesses = guesses
        self.valid = {}          # chunk -> the cycle its job was offered
        self.data = {}           # instruction -> the cycle its last byte left the reader
        self.written = []        # instruction -> the cycle it was handed to the core
        self.submitted = 0       # chunks given to the reader
        self.core_queue = Sequencer.queue_depth(config)

    def _valid(self, j):
        """The cycle chunk `j`'s job is offered, or None while unknown."""
        first, count = self.chunks[j]
        room = first + count - LINK_TIMING["fetch_queue"]    # instructions handed first
        if room <= 0:
            return 0
        if room - 1 < len(self.written):
            return self.written[room - 1] + 1
        return None

    def submit(self, upto=None, before=None):
        """Give the reader the chunks up to `upto`, or those offered no later
        than `before` (by their known time, else last pass's)."""
        while self.submitted < len(self.chunks):
            j = self.submitted
            valid = self._valid(j)
            if upto is not None and j <= upto:
                valid = valid if valid is not None else self.guesses.get(j, 0)
            elif before is not None:
                guess = valid if valid is not None else self.guesses.get(j)
                if guess is None or guess > max(before, self.link.reader_free):
                    return
                valid = guess
            else:
                return
            self.valid[j] = valid
            first, count = self.chunks[j]
            beats = self.link.read(valid, self.host.program_addr + first * INSTRUCTION_BYTES,
                                   count * INSTRUCTION_BYTES)
            B = self.host.beat_bytes
            for i in range(count):
                self.data[first + i] = beats[((i + 1) * INSTRUCTION_BYTES - 1) // B]
            self.submitted += 1

    def offered(self):
        """The cycle each chunk's job was offered, as this pass's schedule says
        (where the pass had to guess, the next pass uses these)."""
        return {j: self._valid(j) if self._valid(j) is not None else self.valid[j]
                for j in self.valid}

    def write(self, index, loads):
        """The cycle instruction `index` is handed to the core (`loads`: the
        cycles the earlier ones were loaded into the decoder)."""
        self.submit(upto=index // LINK_TIMING["fetch_chunk"])
        t = self.data[index] + LINK_TIMING["data_to_instruction"]
        if self.written:
            t = max(t, self.written[-1] + 1)
        room = index - self.core_queue
        if room >= 0:
            t = max(t, loads[room] + 1)
        self.written.append(t)
        return t


def _estimate(config, words, host_latency, schedule, host=None, guesses=None):
    cfg = config
    link = LinkTiming(host, cfg.rows) if host is not None else None
    fetch = _Fetch(cfg, link, host, len(words), guesses) if host is not None else None
    loads = []
    latency = cfg.matrix_latency
    units = {name: _Unit() for name in ("rhm", "whm", "mmc", "act")}
    weights = _WeightPath(cfg)
    requested = switched = 0
    counters = dict.fromkeys(("mxu_active", "weight_stall", "raw_stall", "host_stall"), 0)
    rows_entered = []        # entry cycles of the last three rows into the array
    stored = 0               # all rows so far stored by then
    act_writes = []          # (first, last) cycles of ACT writes into the UB
    pipe_free = 0            # the activation pipeline takes new settings from this cycle
    in_flight = []           # the sequencer's accumulator slots: [rows, free from], oldest first
    rhm_rows = None          # first row cycle and rows of the last RHM (with the link:
                             # its issue and its rows' arrivals)
    rhm_stall = 0            # host stall counted for the last RHM (with the link)
    first_row = last_row = None
    issue_prev = None
    log = []
    halt = None

    def all_idle():
        return max(units["rhm"].idle, units["whm"].idle, units["act"].idle, units["mmc"].idle,
                   stored + 1)

    for index, word in enumerate(words):
        written = index if fetch is None else fetch.write(index, loads)
        load = written + TIMING["queue"] if issue_prev is None else max(issue_prev,
                                                                         written + TIMING["queue"])
        loads.append(load)
        fault, ins = checked_decode(word, cfg)
        ready = load + decode_cycles(word, cfg)
        if isinstance(ins, Rw) and requested - switched + ins.count > cfg.weight_fifo_tiles + 2:
            fault = Fault.WEIGHT_FIFO_OVERFLOW
        if isinstance(ins, Mmc) and ins.switch and ins.rows and requested == switched:
            fault = Fault.WEIGHT_FIFO_UNDERFLOW
        if fault != Fault.NONE:
            halt = max(ready, all_idle())
            log.append({"index": index, "instruction": f"fault {Fault(fault).name}",
                        "ready": ready, "issue": None, "done": halt, "waits": {}})
            break

        target = _TARGETS.get(type(ins))
        ranges = _ranges(ins, cfg)
        if isinstance(ins, (Sync, Int, Halt)):
            unit_ready = all_idle()
        elif target is not None:
            unit_ready = units[target].ready
        else:
            unit_ready = 0
        hazard = 0
        if cfg.serial_issue:
            # One unit at a time: every other unit idle, and every row stored
            # (the engine drained) but for an MMC.
            if target is not None:
                hazard = max(unit.idle for name, unit in units.items() if name != target)
                if target != "mmc":
                    hazard = max(hazard, stored + 1)
        else:
            for name, unit in units.items():
                if name != target and unit.ranges and _conflict(ranges, unit.ranges):
                    hazard = max(hazard, unit.idle + TIMING["range_clear"])
            # Host memory: an RHM waits while a WHM runs and a WHM while an
            # RHM runs (from the cycle the other unit is idle).
            if target in ("rhm", "whm"):
                hazard = max(hazard, units["whm" if target == "rhm" else "rhm"].idle)
            if target != "mmc":
                hazard = max([hazard] + [clear for rows, clear in in_flight
                                         if _overlap(ranges.get("acc_r"), rows)
                                         or _overlap(ranges.get("acc_w"), rows)])
        issue = max(ready, unit_ready, hazard)
        counters["raw_stall"] += max(0, issue - max(ready, unit_ready))
        done = issue
        # Why it waited after its decode (the trace's stall tracks): its unit
        # busy, then a hazard; an MMC's tile and an RHM's host are added below.
        waits = {"unit busy": max(0, unit_ready - ready),
                 "raw": max(0, issue - max(ready, unit_ready))}
        more = {}

        if isinstance(ins, Halt):
            halt = issue
            log.append({"index": index, "instruction": ins, "ready": ready, "issue": issue,
                        "done": issue, "waits": {k: v for k, v in waits.items() if v}})
            break
        elif isinstance(ins, Rhm):
            u = units["rhm"]
            if ins.rows and link is not None:
                fetch.submit(before=issue + 1)
                arrivals = link.rhm_rows(issue + 1, ins.host, ins.rows)
                rhm_rows = (issue, arrivals)
                done, stall = _rhm_link_end(issue, arrivals, act_writes)
                rhm_stall = stall
                counters["host_stall"] += stall
                waits["host"] = stall
            elif ins.rows:
                first = issue + TIMING["rhm_first_row"] + host_latency
                rhm_rows = (first, ins.rows)
                done = _rhm_end(first, ins.rows, act_writes)
                counters["host_stall"] += 1 + host_latency
                waits["host"] = 1 + host_latency
            u.ready = u.idle = done
            u.ranges = ranges
        elif isinstance(ins, Whm):
            u = units["whm"]
            if ins.rows and link is not None:
                fetch.submit(before=issue + TIMING["whm_idle"])     # their MRds go first on tx
                taken = link.whm_rows(issue + TIMING["whm_idle"], ins.host, ins.rows)
                done = taken[-1] + 1
                # Rows held back by the writer's buffer count; waiting for the
                # writer to take the job does not (no row is offered yet).
                counters["host_stall"] += done - taken[0] - ins.rows
            elif ins.rows:
                done = issue + TIMING["whm_idle"] + ins.rows
            u.ready = u.idle = done
            u.ranges = ranges
        elif isinstance(ins, Rw):
            if ins.count:
                weights.request(issue, ins.count)
                requested += ins.count
        elif isinstance(ins, Mmc):
            u = units["mmc"]
            if ins.rows:
                n = ins.rows
                before = rows_entered          # entry cycles of the last rows before it

                def entered(j):                # entry of row j of this MMC (j < 0: before it)
                    if j >= 0:
                        return e0 + j
                    return before[j] if len(before) >= -j else None

                # Row 0: read when the reader has room, at the array two cycles
                # later, entering when the row before it has and its tile is there.
                behind = entered(-3)
                read0 = issue + TIMING["mmc_first_read"]
                if behind is not None:
                    read0 = max(read0, behind + 1)
                head = read0 + TIMING["mmc_read_to_row"]
                if before:
                    head = max(head, before[-1] + 1)
                e0 = head
                if ins.switch:
                    e0 = max(e0, weights.switch_ready(switched))
                    counters["weight_stall"] += e0 - head
                    waits["weight"] = e0 - head
                    weights.switched(switched, e0)
                    switched += 1
                # Later rows enter one per cycle; each is read once the row
                # three before it has entered.
                read = read0
                for r in range(1, min(n, 3)):
                    behind = entered(r - 3)
                    read = max(read + 1, behind + 1 if behind is not None else 0)
                last_read = read if n <= 3 else max(read + n - 3, e0 + n - 3)
                last_entry = e0 + n - 1
                rows_entered = (rows_entered + list(range(max(e0, last_entry - 2),
                                                          last_entry + 1)))[-3:]
                counters["mxu_active"] += n
                more["rows"] = (e0, last_entry)
                first_row = e0 if first_row is None else first_row
                last_row = last_entry
                u.ready = last_read
                u.idle = last_read + 1
                u.ranges = {k: v for k, v in ranges.items() if k == "ub_r"}
                # Accumulator rows held until this MMC's last row is stored.
                stored = last_entry + latency
                clear = stored + TIMING["drain_clear"]
                in_flight = [s for s in in_flight if s[1] > issue]
                if len(in_flight) < ACC_SLOTS:
                    in_flight.append([ranges["acc_w"], clear])
                else:
                    rows = in_flight[-1][0]
                    in_flight[-1] = [(min(rows[0], ranges["acc_w"][0]),
                                      max(rows[1], ranges["acc_w"][1])), clear]
                done = stored
        elif isinstance(ins, Act):
            u = units["act"]
            if ins.rows:
                extra = TIMING["act_reciprocal"] if ins.pool in (Pool.AVG, Pool.GLOBAL_AVG) else 0
                # The settings are written once the pipeline has finished the
                # rows of the previous ACT; rows are read from the next cycle.
                start = max(issue + TIMING["act_settings"] + extra, pipe_free)
                # Done when every row is read and the last result (from the
                # row that completes the last pooling window) is written.
                # A slower pipeline takes a row every `step` cycles, and its
                # latency grows by `step - 1`; the ACT is done once the
                # pipeline has taken the last row (at a row per cycle, once
                # it is read).
                step = cfg.act_row_cycles
                # The pooling's average takes 3 registered stages (4 cycles
                # in the small form, `serial_act`) and, but in the small
                # form, its input is registered once more: every result that
                # much later than in the 10-cycle pipeline `TIMING` counts.
                later = ActivationPipeline.extra_latency(cfg)
                completing = _last_completing_row(ins)
                last_read = ins.rows if step == 1 else (
                    TIMING["act_first_row_taken"] + (ins.rows - 1) * step)
                done = max(start + last_read + TIMING["act_read_done"],
                           start + completing * step + TIMING["act_last_write"] + step - 1 + later)
                pipe_free = start + ins.rows * step + TIMING["act_pipeline_free"] + later
                first_write = start + TIMING["act_first_write"] + step - 1 + later
                _add_writes(act_writes, (first_write + j * step for j in _completing_rows(ins)))
                # An RHM still running loses a cycle for every UB write of this ACT.
                r = units["rhm"]
                if rhm_rows is not None and r.idle > first_write:
                    if link is None:
                        r.idle = r.ready = _rhm_end(*rhm_rows, act_writes)
                    else:
                        r.idle, stall = _rhm_link_end(*rhm_rows, act_writes)
                        r.ready = r.idle
                        counters["host_stall"] += stall - rhm_stall
                        rhm_stall = stall
            else:
                done = issue + 1
            u.ready = u.idle = done
            u.ranges = ranges
        elif isinstance(ins, Cfg):
            u = units["act"]
            done = issue + 1
            u.ready = u.idle = done
            u.ranges = ranges
        elif isinstance(ins, Ldq):
            u = units["act"]
            done = issue + TIMING["ldq_column"] * cfg.cols + 1 + max(
                0, pipe_free - issue - TIMING["ldq_first_channel"])
            u.ready = u.idle = done
            u.ranges = ranges
        elif isinstance(ins, Ldl):
            u = units["act"]
            done = issue + 2 * _ceil_div(256, cfg.rows) + 257 + max(
                0, pipe_free - issue - TIMING["ldl_first_entry"])
            u.ready = u.idle = done
            u.ranges = ranges
        # NOP, SYNC, INT: nothing to do after issue.
        if schedule:       # (only asked for: a dict per instruction costs)
            log.append({"index": index, "instruction": ins, "ready": ready, "issue": issue,
                        "done": done, "waits": {k: v for k, v in waits.items() if v}, **more})
        issue_prev = issue

    if halt is None:
        halt = all_idle() - 1 if words else 0
    cycles = halt + 1
    counters["cycles"] = cycles
    counters["useful_macs"] = counters["mxu_active"] * cfg.rows * cfg.cols
    counters["non_matrix"] = cycles - counters["mxu_active"]
    # Tiles shift in ahead of use: every tile switched to and up to two more
    # (transit and shadow registers). The counter is not stopped by the halt,
    # so it ends with all of them.
    counters["weight_shift"] = min(requested, switched + 2) * cfg.rows
    order = ("cycles", "mxu_active", "useful_macs", "weight_stall", "weight_shift", "non_matrix",
             "raw_stall", "host_stall")
    span = last_row - first_row + 1 if first_row is not None else 0
    result = {
        "cycles": cycles,
        "counters": {name: counters[name] for name in order},
        "matrix_phase": {"first_row": first_row, "last_row": last_row, "cycles": span},
        "utilisation": {
            "matrix_phase": counters["mxu_active"] / span if span else 0.0,
            "program": counters["mxu_active"] / cycles if cycles else 0.0,
        },
    }
    if schedule:
        # (formatted only when asked for: most callers want the counters)
        result["schedule"] = [{**e, "instruction": str(e["instruction"])} for e in log]
        result["weight_tiles"] = [
            {"request": t.request, "reads": t.reads, "beats": t.beats, "capture": t.capture,
             "switch": t.switch} for t in weights.tiles if t.beats is not None]
    if fetch is not None:
        fetch.submit(before=1 << 62)
        return result, fetch.offered()
    return result
