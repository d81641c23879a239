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
  ``tx`` (``ceil(3 / link_dw)``), each when its tag is free (tags are freed
  as the request's last byte is delivered);
* an MRd's beats leave on ``tx`` from the cycle after it issues; the host's
  first completion starts on ``rx`` 2 cycles after the MRd's last beat (with
  added latency, ``latency - 1`` more); completions are cut at
  ``max_payload`` (less the offset in the 128-byte read completion
  boundary), each ``ceil((3 + words) / link_dw)`` beats, back to back;
* `TlpReceiver` forwards a completion from 3 cycles after its last beat, one
  beat of ``link_dw`` words per cycle, and the reader delivers its bytes from
  2 cycles after the forwarded last beat, one beat of ``4 x link_dw`` bytes
  per cycle, in job order (a job's bytes leave the reader's gearbox before
  the next job's enter it, docs/dma.md);
* the RHM unit has a UB row 1 cycle, the core an instruction 3 cycles, after
  the beat holding its last byte leaves the reader;
* the fetcher asks for 16 instructions at a time (with priority over RHMs)
  once its 32-instruction queue has room for them; an instruction enters the
  sequencer's 16-deep queue the cycle after the one 16 places ahead of it
  was loaded into the decoder;
* a WHM's rows leave the core from ``issue + 3`` as on the ideal host, but
  not before the previous WHM's last MWr beat is 2 cycles past (the writer
  takes one job at a time); a row then waits for room in the 5 beats the
  writer and its gearbox hold, which a beat on ``tx`` frees 2 cycles later;
  an MWr's header beats and its last beat of leftover words take no data.
"""

from dataclasses import dataclass

from ...config import TPUConfig


__all__ = ["HostLink", "LinkTiming", "LINK_TIMING"]


#: The link's fixed latencies, in cycles (see the module docstring).
LINK_TIMING = {
    "job_to_request": 1,     # read job taken -> its first MRd issues
    "request_to_tx": 1,      # MRd issued -> its first beat on tx
    "host_turnaround": 2,    # MRd's last beat on tx -> first completion beat on rx (latency 0)
    "rx_to_tlp": 3,          # completion's last beat on rx -> its first beat forwarded
    "tlp_to_data": 2,        # forwarded last beat -> the first data beat out of the reader
    "data_job_gap": 2,       # a job's last beat out -> the next job's first, beyond 1
    "data_to_row": 1,        # reader beat -> UB row at the RHM unit
    "data_to_instruction": 3,  # reader beat -> instruction handed to the core
    "whm_buffer_beats": 5,   # beats the writer and its gearbox hold ahead of tx
    "whm_refill": 2,         # a beat sent -> a row taken into the room it left
    "whm_row_to_tx": 3,      # WHM row out of the core -> the MWr beat carrying it
    "whm_next_job": 2,       # last MWr beat -> the next WHM's first row
    "fetch_chunk": 16,       # instructions per fetch job
    "fetch_queue": 32,       # the fetcher's instruction queue
    "core_queue": 16,        # the sequencer's instruction queue
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

    # -- reads -------------------------------------------------------------
    def read(self, valid, addr, nbytes):
        """A read job offered from cycle `valid`; the cycles in which its
        delivered beats (``4 x link_dw`` bytes, the job's first byte in lane 0)
        leave the reader."""
        L, T = self.link, LINK_TIMING
        B = L.beat_bytes
        hdr_beats = _ceil_div(3 if addr + nbytes <= 1 << 32 else 4, L.link_dw)
        taken = max(valid, self.reader_free)
        issue = taken + T["job_to_request"]
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
            self.tags[tag] = last + 1
            issue += hdr_beats
            pos += size
        # The reader takes the next job once this job's last request issued;
        # its bytes leave the reader's gearbox before the next job's enter.
        self.reader_free = issue - hdr_beats + 1
        if beats:
            self.data_free = max(self.data_free, beats[-1] + 1 + T["data_job_gap"])
        return beats

    def rhm_rows(self, valid, addr, rows):
        """Cycles in which an RHM's UB rows reach the core (its read job offered at `valid`)."""
        beats = self.read(valid, addr, rows * self.rows)
        B = self.link.beat_bytes
        out = []
        for r in range(rows):
            t = beats[((r + 1) * self.rows - 1) // B] + LINK_TIMING["data_to_row"]
            out.append(t if not out else max(t, out[-1] + 1))
        return out

    # -- writes ------------------------------------------------------------
    def whm_rows(self, first, addr, rows):
        """Cycles in which a WHM's rows leave the core, offered from cycle
        `first` (``issue + 3``) one a cycle, as the writer takes them: it
        takes a job once the previous one's last MWr beat is on ``tx``, and
        holds a few beats ahead of ``tx``, where each MWr spends the beats of
        its header (and a last beat of leftover words) without taking data."""
        L, T = self.link, LINK_TIMING
        B, R = L.beat_bytes, self.rows
        first = max(first, self.writer_free)
        nbytes = rows * R
        cap = T["whm_buffer_beats"]
        taken = []                  # row -> cycle it left the core
        consumed = []               # input beat -> tx cycle it went out
        t = None                    # the next tx beat
        beat_index = 0

        def row_time(r):
            while len(taken) <= r:
                k = len(taken)
                c = first + k if not taken else max(first + k, taken[-1] + 1)
                held = (k * R) // B - cap   # the writer holds `cap` beats not yet sent
                if held >= 0:
                    if held >= len(consumed):
                        return None
                    c = max(c, consumed[held] + T["whm_refill"])
                taken.append(c)
            return taken[r]

        pos, end = addr, addr + nbytes
        last_beat = None
        while pos < end:
            size = min(end, (pos // L.max_payload + 1) * L.max_payload) - pos
            words = _ceil_div(pos % 4 + size, 4)
            hdr = 3 if end <= 1 << 32 else 4
            total = _ceil_div(hdr + words, L.link_dw)
            header_only = hdr // L.link_dw
            data_beats = _ceil_div(words, L.link_dw)
            for b in range(total):
                if header_only <= b < header_only + data_beats:
                    last_byte = min((beat_index + 1) * B, nbytes) - 1
                    r = last_byte // R
                    if row_time(r) is None:     # a row behind a beat not yet sent
                        raise AssertionError("the WHM model's writer buffer holds no beat")
                    ready = taken[r] + T["whm_row_to_tx"]
                    t = ready if t is None else max(t, ready)
                    consumed.append(t)
                    beat_index += 1
                elif t is None:
                    t = max(self.tx_free, first + T["whm_row_to_tx"] - header_only)
                t = max(t, self.tx_free)
                last_beat = t
                t += 1
            self.tx_free = t
            pos += size
        for r in range(rows):
            row_time(r)
        self.writer_free = last_beat + T["whm_next_job"]
        return taken


def fetch_chunks(length):
    """``(first instruction, count)`` of the fetcher's read jobs for a program of `length`."""
    chunk = LINK_TIMING["fetch_chunk"]
    return [(i, min(chunk, length - i)) for i in range(0, length, chunk)]

