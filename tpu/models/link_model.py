"""Timing of the chip's host link, for the cycle model of whole-chip runs.

`HostLink` describes the PCIe-style link of `tpu.hdl.host_interface` and a
deterministic host (`tpu.sim.bench.bench_host.open_bench_link`: every
completion as large as ``max_payload`` allows, in order, no idle cycles or
back-pressure, answered `latency` cycles after the first cycle it could be).
`LinkTiming` follows the DMA reader's jobs (program fetch chunks and RHMs)
and the writer's (WHM) over it, in the order the chip takes them, and says
in which cycle each byte beat reaches its unit. `estimate_cycles(...,
host=HostLink(...))` uses it instead of the ideal host.

The rules, in cycles (docs/host_performance.md, docs/dma.md; measured on the
RTL, `tests/test_cycle_model_chip.py` holds them):

* a read job is taken when the reader has issued the previous job's last
  request; its requests issue from the next cycle, one per MRd's beats on
  ``tx`` (``ceil(3 / link_dw)``), each when its tag is free (a tag is free
  from the cycle before the beat holding its request's last byte leaves the
  reader: the reader lets it go as it reads that beat from its buffer);
* an MRd's beats leave on ``tx`` from the cycle after it issues; the host's
  first completion starts on ``rx`` 2 cycles after the MRd's last beat (with
  added latency, ``latency - 1`` more); completions are cut at
  ``max_payload`` (less the offset in the 128-byte read completion
  boundary), each ``ceil((3 + words) / link_dw)`` beats, back to back;
* `TlpReceiver` forwards a completion from 3 cycles after its last beat, one
  beat of ``link_dw`` words per cycle, and the reader delivers its bytes from
  2 cycles after the forwarded last beat, one beat of ``4 x link_dw`` bytes
  per cycle, in job order (a job's bytes leave the reader's gearbox before
  the next job's enter it, docs/dma.md: a program fetch's first beat leaves
  2 cycles after the previous job's last at the earliest, an RHM's 3);
* the RHM unit has a UB row 1 cycle, the core an instruction 3 cycles, after
  the beat holding its last byte leaves the reader;
* the fetcher asks for 16 instructions at a time (with priority over RHMs)
  once its 32-instruction queue has room for them; an instruction enters the
  sequencer's 16-deep queue (2-deep with ``serial_host``,
  `Sequencer.queue_depth`) the cycle after the one 16 (2) places ahead of
  it was loaded into the decoder;
* a WHM's rows leave the core from ``issue + 3`` as on the ideal host, but
  not before the previous WHM's last MWr beat is 2 cycles past (the writer
  takes one job at a time), into the WHM gearbox, which takes a row that
  starts a beat only as it passes its last beat on to the writer; the writer
  takes a beat the cycle after the gearbox has its last byte, holds 3 beats
  not yet on ``tx`` (a beat on ``tx`` makes room from the next cycle) and
  puts a beat on ``tx`` 2 cycles after taking it; it offers an MWr the cycle
  after taking its first beat, and the MWr's header words go first (whole
  beats of them on a narrow link); an MWr's header beats and its last beat
  of leftover words take no data.
"""

from dataclasses import dataclass

from ..config import TPUConfig


__all__ = ["HostLink", "LinkTiming", "LINK_TIMING"]


#: The link's fixed latencies, in cycles (see the module docstring).
LINK_TIMING = {
    "job_to_request": 1,     # read job taken -> its first MRd issues
    "request_to_tx": 1,      # MRd issued -> its first beat on tx
    "host_turnaround": 2,    # MRd's last beat on tx -> first completion beat on rx (latency 0)
    "rx_to_tlp": 3,          # completion's last beat on rx -> its first beat forwarded
    "tlp_to_data": 2,        # forwarded last beat -> the first data beat out of the reader
    "data_job_gap": 1,       # a job's last beat out -> the next job's first, beyond 1
    "data_job_gap_rhm": 2,   # the same when the next job is an RHM's
    "tag_reuse": -1,         # the beat with a request's last byte out -> its tag free
    "data_to_row": 1,        # reader beat -> UB row at the RHM unit
    "data_to_instruction": 3,  # reader beat -> instruction handed to the core
    "whm_writer_beats": 3,   # beats the writer holds ahead of tx
    "whm_refill": 1,         # a beat sent -> the writer takes one into the room it left
    "whm_beat_to_tx": 2,     # the writer takes a beat -> the MWr beat carrying it on tx
    "whm_offer": 1,          # the writer takes an MWr's first beat -> its header on tx
    "whm_next_job": 2,       # last MWr beat -> the next WHM's first row
    "fetch_chunk": 16,       # instructions per fetch job
    "fetch_queue": 32,       # the fetcher's instruction queue
    "rcb": 128,              # the host's read completion boundary
}


def _ceil_div(a, b):
    return -(-a // b)


@dataclass(frozen=True)
class HostLink:
    """The host link of a whole-chip run: the chip's link parameters (from its
    `TPUConfig`) and the deterministic host's `latency` (extra cycles before
    each read's first completion). `program_addr` is the host address of the
    program, as far as it decides where the fetcher's reads split (the driver
    aligns programs to ``max_read_request``: 0 stands for that); the RHMs' and
    WHMs' addresses are taken from the program, as offsets in a 4 KiB-aligned
    region (`tpu.compiler.execute`)."""
    link_dw: int = 2
    max_payload: int = 256
    max_read_request: int = 512
    read_tags: int = 8
    latency: int = 0
    program_addr: int = 0

    @classmethod
    def of(cls, config, latency=0, program_addr=0):
        """The link of `config` behind a host with `latency`."""
        if not isinstance(config, TPUConfig):
            raise TypeError(f"HostLink.of needs a TPUConfig, not {config!r}")
        if not isinstance(latency, int) or isinstance(latency, bool) or latency < 0:
            raise ValueError(f"host latency must be an int >= 0, not {latency!r}")
        return cls(config.link_dw, config.max_payload, config.max_read_request,
                   config.read_tags, latency, program_addr)

    @property
    def beat_bytes(self):
        return 4 * self.link_dw


class LinkTiming:
    """The link's state while the cycle model follows a program: when the
    reader, the tags and the link's two directions are next free."""

    def __init__(self, link, rows):
        self.link = link
        self.rows = rows                    # UB row bytes
        self.reader_free = 0                # the reader takes its next job from here
        self.tx_free = 0                    # tx takes the next packet's first beat from here
        self.rx_free = 0                    # rx takes the next completion's first beat
        self.tlp_free = 0                   # the receiver forwards the next beat
        self.data_free = 0                  # the reader delivers its next beat
        self.writer_free = 0                # the next WHM's first row, at the earliest
        self.tags = [0] * link.read_tags    # each tag free from this cycle
        self.next_tag = 0
        self.last_beat = None               # the last beat of the last read job out of the reader

    # -- reads -------------------------------------------------------------
    def read(self, valid, addr, nbytes, rhm=False):
        """A read job (an RHM's if `rhm`, else a program fetch's) offered from
        cycle `valid`; the cycles in which its delivered beats (``4 x link_dw``
        bytes, the job's first byte in lane 0) leave the reader."""
        L, T = self.link, LINK_TIMING
        B = L.beat_bytes
        hdr_beats = _ceil_div(3 if addr + nbytes <= 1 << 32 else 4, L.link_dw)
        taken = max(valid, self.reader_free)
        issue = taken + T["job_to_request"]
        if self.last_beat is not None:
            self.data_free = max(self.data_free, self.last_beat + 1
                                 + T["data_job_gap_rhm" if rhm else "data_job_gap"])
        beats = []
        pos, end = addr, addr + nbytes
        out_bytes = 0           # job bytes delivered so far (beats are re-packed from lane 0)
        while pos < end:
            size = min(end, (pos // L.max_read_request + 1) * L.max_read_request) - pos
            tag = self.next_tag
            self.next_tag = (tag + 1) % L.read_tags
            issue = max(issue, self.tags[tag])
            tx_first = max(issue + T["request_to_tx"], self.tx_free)
            tx_last = tx_first + hdr_beats - 1
            self.tx_free = tx_last + 1
            # LatencyBridge holds a completion `latency` cycles from the cycle
            # the root complex answered, one cycle into the turnaround.
            ready = tx_last + T["host_turnaround"] + max(0, L.latency - 1)
            # The host's completions, each delivered once all of it is in.
            a, left = pos, size
            request_beats = []
            while left:
                words = _ceil_div(a % 4 + left, 4)
                max_words = L.max_payload // 4
                if words > max_words:
                    words = max_words - (a & (T["rcb"] - 1) & 0xFC) // 4
                cbytes = min(left, 4 * words - a % 4)
                rx_first = max(ready, self.rx_free)
                rx_last = rx_first + _ceil_div(3 + words, L.link_dw) - 1
                self.rx_free = rx_last + 1
                tlp_first = max(rx_last + T["rx_to_tlp"], self.tlp_free)
                tlp_last = tlp_first + _ceil_div(words, L.link_dw) - 1
                self.tlp_free = tlp_last + 1
                avail = tlp_last + T["tlp_to_data"]
                # Job bytes up to the end of this completion, in whole beats.
                out_end = (a + cbytes) - addr
                n_beats = (_ceil_div(out_end, B) if a + cbytes == end else out_end // B) \
                    - out_bytes // B
                for _ in range(max(0, n_beats)):
                    t = max(avail, self.data_free)
                    self.data_free = t + 1
                    request_beats.append(t)
                out_bytes += max(0, n_beats) * B
                a += cbytes
                left -= cbytes
            beats += request_beats
            last = request_beats[-1] if request_beats else self.data_free
            self.tags[tag] = last + T["tag_reuse"]
            issue += hdr_beats
            pos += size
        # The reader takes the next job once this job's last request issued;
        # its bytes leave the reader's gearbox before the next job's enter.
        self.reader_free = issue - hdr_beats + 1
        if beats:
            self.last_beat = beats[-1]
        return beats

    def rhm_rows(self, valid, addr, rows):
        """Cycles in which an RHM's UB rows reach the core (its read job offered at `valid`)."""
        beats = self.read(valid, addr, rows * self.rows, rhm=True)
        B = self.link.beat_bytes
        out = []
        for r in range(rows):
            t = beats[((r + 1) * self.rows - 1) // B] + LINK_TIMING["data_to_row"]
            out.append(t if not out else max(t, out[-1] + 1))
        return out

    # -- writes ------------------------------------------------------------
    def whm_rows(self, first, addr, rows):
        """Cycles in which a WHM's rows leave the core, offered from cycle
        `first` (``issue + 3``) one a cycle, as the WHM gearbox takes them
        (`tpu.hdl.byte_gearbox.BeatShifter` from rows to beats of ``4 x
        link_dw`` bytes) and passes them to the writer: it takes a job once the
        previous one's last MWr beat is on ``tx``, and holds a few beats ahead
        of ``tx``, where each MWr spends the beats of its header (and a last
        beat of leftover words) without taking data."""
        L, T = self.link, LINK_TIMING
        B, R = L.beat_bytes, self.rows
        first = max(first, self.writer_free)
        nbytes = rows * R
        beats = _ceil_div(nbytes, B)
        taken = []                  # row -> cycle the gearbox took it from the core
        entered = []                # beat -> cycle the writer took it from the gearbox
        consumed = []               # beat -> tx cycle it went out
        t = None                    # the next tx beat

        def row_of(byte):
            return min(byte, nbytes - 1) // R

        def take(r):
            """The gearbox takes a row when it has room: once it has passed on
            the beat(s) it holds (the same cycle they leave)."""
            while len(taken) <= r:
                k = len(taken)
                c = first + k if not taken else max(first + k, taken[-1] + 1)
                if k * R % B == 0 and k:            # the row starts a beat
                    c = max(c, enter(k * R // B - 1))
                taken.append(c)
            return taken[r]

        def enter(j):
            """The writer takes beat `j` the cycle after the gearbox has its last
            byte, one a cycle, and while it holds ``whm_writer_beats`` not yet on
            ``tx`` it waits for the oldest's cycle there."""
            while len(entered) <= j:
                k = len(entered)
                c = take(row_of((k + 1) * B - 1)) + 1
                if entered:
                    c = max(c, entered[-1] + 1)
                held = k - T["whm_writer_beats"]
                if held >= 0:
                    if held >= len(consumed):
                        raise AssertionError("the WHM model's writer buffer holds no beat")
                    c = max(c, consumed[held] + T["whm_refill"])
                entered.append(c)
            return entered[j]

        pos, end = addr, addr + nbytes
        last_beat = None
        while pos < end:
            size = min(end, (pos // L.max_payload + 1) * L.max_payload) - pos
            words = _ceil_div(pos % 4 + size, 4)
            hdr = 3 if end <= 1 << 32 else 4
            total = _ceil_div(hdr + words, L.link_dw)
            header_only = hdr // L.link_dw
            data_beats = _ceil_div(words, L.link_dw)
            # The writer offers an MWr once it holds the MWr's first beat; the
            # transmitter then sends the header words (on a narrow link, beats
            # of them) before it takes that beat.
            offered = enter(len(consumed)) + T["whm_offer"]
            t = offered if t is None else max(t, offered)
            for b in range(total):
                if header_only <= b < header_only + data_beats:
                    t = max(t, enter(len(consumed)) + T["whm_beat_to_tx"])
                    consumed.append(t)
                t = max(t, self.tx_free)
                last_beat = t
                t += 1
            self.tx_free = t
            pos += size
        assert len(consumed) == beats, "the WHM model sent a beat count other than the job's"
        take(rows - 1)
        self.writer_free = last_beat + T["whm_next_job"]
        return taken


def fetch_chunks(length):
    """``(first instruction, count)`` of the fetcher's read jobs for a program of `length`."""
    chunk = LINK_TIMING["fetch_chunk"]
    return [(i, min(chunk, length - i)) for i in range(0, length, chunk)]

