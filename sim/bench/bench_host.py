"""cocotb benchmark of the chip behind its host link: DMA throughput and what
the host costs a matmul-heavy program.

Launched by `tpu.sim.harness.run` from ``scripts/bench_host.py`` on the whole
chip (`tpu.hdl.HostInterface`), with cocotbext-pcie's root complex as the host
and the driver (`tpu.driver.Device`) doing what it does for any program. The
host is made as fast and as regular as the bridge of `tpu.sim.host.pcie_host`
allows: no idle cycles, no back-pressure, completions in request order,
completions as large as the chip's max_payload (never split at every RCB),
plus a fixed extra latency (`TPU_BENCH_LATENCY` cycles) added to every
completion, to show what a real host's read latency does.

`LinkMonitor` watches both link streams cycle by cycle and records every TLP
with the cycles of its first and last beat; a run's numbers are taken from
the TLPs addressed to its buffers, so program fetches, MMIO and MSIs are kept
apart. Cycle 1 is the first clock after reset; a beat "in cycle c" is one
whose valid and ready were both high at the rising edge ending cycle c.

Tests:

``dma``
    For each size N of ``TPU_BENCH_SIZES``: a program of RHMs reading N
    host bytes into the unified buffer (repeated over it when N is larger),
    then HALT; then a program of WHMs writing N bytes from the buffer to the
    host. The bytes written are checked against those read.
``programs``
    Each program of ``TPU_BENCH_PROGRAMS`` (see `PROGRAM_CASES`) with its
    weights loaded by WFILL and its input read by RHM; its counters, link
    windows and `tpu.models.cycle_model.estimate_cycles` (the core with an ideal
    host, equal to the RTL core cycle for cycle: docs/core_performance.md).

Environment: ``TPU_BENCH_OUT`` (JSON file the results are merged into, under
``TPU_BENCH_KEY``), ``TPU_BENCH_SIZES`` (JSON list of byte counts),
``TPU_BENCH_PROGRAMS`` (JSON list of names), ``TPU_BENCH_LATENCY``, and
``TPU_BENCH_TIMELINE`` (optional: a path prefix; every TLP of each program's
run is saved to ``<prefix>-<program>.json``, for seeing where cycles go).
"""

import json
import logging
import os
import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly

from ...hdl.tlp import LinkBeat
from ...host_registers import COUNTER_NAMES
from ...isa import Halt, Rhm, Rw, Whm, encode_program
from ...models.cycle_model import HostLink, estimate_cycles
from ..harness import config_from_env
from ..host.pcie_host import CLOCK_NS, PcieBridge, RtlLink, attach_root_complex


__all__ = ["LinkMonitor", "LatencyBridge", "open_bench_link", "PROGRAM_CASES", "read_program",
           "write_program"]

_MRD = (0x00, 0x20)
_MWR = (0x40, 0x60)
_CPLD = 0x4A


class LatencyBridge(PcieBridge):
    """`PcieBridge` that holds every completion `latency` cycles before
    offering it to the chip, in the order the root complex sent them."""

    def __init__(self, *args, latency=0, **kwargs):
        super().__init__(*args, **kwargs)
        self.latency = latency

    async def upstream_recv(self, tlp):
        await super().upstream_recv(tlp)
        queue = self.completions.get(tlp.tag)
        if queue and queue[-1][1] is tlp:
            ready, _ = queue[-1]
            queue[-1] = (ready + self.latency, tlp)


async def open_bench_link(dut, config, *, latency=0, memory_bytes=4 << 20):
    """Like `tpu.sim.host.pcie_host.open_rtl_link`, with a deterministic host:
    `LatencyBridge` without idle cycles, back-pressure or reordering, and a
    root complex that answers a read with completions of max_payload bytes."""
    cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
    dut.rst.value = 1
    bridge = LatencyBridge(dut, config, random.Random(0), idle=0.0, backpressure=0.0,
                           reorder=False, max_delay=0, latency=latency)
    rc, pci_device = await attach_root_complex(dut, config, bridge, split_on_all_rcb=False,
                                               rcb_128=True)
    # The root complex logs every memory access at INFO: millions of lines.
    logging.getLogger("cocotb.pcie").setLevel(logging.WARNING)
    return RtlLink(dut, rc, pci_device, bridge, memory_bytes, "rtl")


class LinkMonitor:
    """Every TLP on ``tx`` (chip to host) and ``rx`` (host to chip), with the
    cycles of its first and last beat, decoded from its header words."""

    def __init__(self, dut, config):
        self.dut = dut
        self.dw = config.link_dw
        self.cycle = 0
        self.clear()

    def clear(self):
        self.requests = []      # MRd: {first, last, addr, bytes, tag, cpl (first CplD's first beat)}
        self.writes = []        # MWr: {first, last, addr, bytes}
        self.completions = []   # CplD: {first, last, addr (of its request), bytes}
        self.beats = {"tx": 0, "rx": 0}
        self._open = {}         # tag -> its MRd record

    def start(self):
        self._packets = {"tx": None, "rx": None}
        cocotb.start_soon(self._run())

    async def _run(self):
        dut = self.dut
        layout = LinkBeat(self.dw)
        data_at, data_mask = layout["data"].offset, (1 << layout["data"].width) - 1
        last_at = layout["last"].offset
        while True:
            await FallingEdge(dut.clk)
            self.cycle += 1
            await ReadOnly()
            # Requests before completions: a completion never shares a cycle
            # with the last beat of its own request.
            for side in ("tx", "rx"):
                if not (int(getattr(dut, f"{side}__valid").value) and
                        int(getattr(dut, f"{side}__ready").value)):
                    continue
                self.beats[side] += 1
                word = int(getattr(dut, f"{side}__payload").value)
                packet = self._packets[side]
                if packet is None:
                    packet = self._packets[side] = {"first": self.cycle, "words": []}
                if len(packet["words"]) < 4:
                    data = (word >> data_at) & data_mask
                    packet["words"] += [(data >> (32 * i)) & 0xFFFF_FFFF for i in range(self.dw)]
                if (word >> last_at) & 1:
                    self._packets[side] = None
                    self._finish(side, packet["first"], packet["words"])

    def _finish(self, side, first, w):
        fmt_type, length = w[0] >> 24, (w[0] & 0x3FF) or 1024
        if side == "tx" and fmt_type in _MRD + _MWR:
            addr = (w[2] << 32 | w[3]) if fmt_type & 0x20 else w[2]
            addr &= ~3
            record = {"first": first, "last": self.cycle, "addr": addr, "bytes": 4 * length}
            if fmt_type in _MRD:
                record.update(tag=(w[1] >> 8) & 0xFF, cpl=None)
                self._open[record["tag"]] = record
                self.requests.append(record)
            else:
                self.writes.append(record)
        elif side == "rx" and fmt_type == _CPLD:
            request = self._open.get((w[2] >> 8) & 0xFF)
            if request is None:
                return
            if request["cpl"] is None:
                request["cpl"] = first
            self.completions.append({"first": first, "last": self.cycle, "addr": request["addr"],
                                     "bytes": 4 * length})

    # Windows -------------------------------------------------------------------

    @staticmethod
    def _inside(records, lo, hi):
        return [r for r in records if lo <= r["addr"] < hi]

    def read_window(self, lo, hi):
        """The reads of host bytes ``[lo, hi)``: from the first MRd's first
        beat to the last CplD's last beat, and the latency of each request
        (its last beat to its first completion's first beat)."""
        requests = self._inside(self.requests, lo, hi)
        completions = self._inside(self.completions, lo, hi)
        if not requests or not completions:
            return None
        latencies = [r["cpl"] - r["last"] for r in requests if r["cpl"] is not None]
        first_cpl = completions[0]["first"]
        end = completions[-1]["last"]
        payload = sum(c["bytes"] for c in completions)
        return {
            "first_request": requests[0]["first"], "first_completion": first_cpl, "end": end,
            "cycles": end - requests[0]["first"] + 1,
            "steady_cycles": end - first_cpl + 1,
            "requests": len(requests), "completions": len(completions), "payload_bytes": payload,
            "first_latency": requests[0]["cpl"] - requests[0]["last"],
            "latency_min": min(latencies), "latency_max": max(latencies),
            "latency_mean": sum(latencies) / len(latencies),
        }

    def write_window(self, lo, hi):
        """The writes of host bytes ``[lo, hi)``: first MWr's first beat to
        the last MWr's last beat."""
        writes = self._inside(self.writes, lo, hi)
        if not writes:
            return None
        start, end = writes[0]["first"], writes[-1]["last"]
        beats = sum(w["last"] - w["first"] + 1 for w in writes)
        return {"start": start, "end": end, "cycles": end - start + 1, "tlps": len(writes),
                "header_dw": 4 if writes[0]["addr"] >> 32 else 3,
                "payload_bytes": sum(w["bytes"] for w in writes), "tlp_beat_cycles": beats}


# Programs -------------------------------------------------------------------

def _chunks(config, nbytes):
    """``(offset, rows)`` of each RHM/WHM moving `nbytes` through the whole UB."""
    ub_bytes = config.ub_rows * config.rows
    if nbytes % config.rows:
        raise ValueError(f"{nbytes} bytes are not whole UB rows of {config.rows} bytes")
    return [(offset, min(ub_bytes, nbytes - offset) // config.rows)
            for offset in range(0, nbytes, ub_bytes)]


def read_program(config, nbytes, host):
    """RHMs reading `nbytes` from `host` on into the UB (from row 0, again and
    again when it is smaller), then HALT."""
    return [Rhm(0, rows, host + offset) for offset, rows in _chunks(config, nbytes)] + [Halt()]


def write_program(config, nbytes, host):
    """WHMs writing the UB (from row 0, again and again) to `nbytes` host
    bytes from `host` on, then HALT."""
    return [Whm(0, rows, host + offset) for offset, rows in _chunks(config, nbytes)] + [Halt()]


def _stream_case(config, **kwargs):
    from .bench_core import HOST_IN, HOST_OUT, stream_program
    return stream_program(config, **kwargs), HOST_IN, HOST_OUT


def _layer_case(config, **kwargs):
    from .bench_core import HOST_IN, HOST_OUT, layer_program
    return layer_program(config, **kwargs), HOST_IN, HOST_OUT


#: name -> (builder, arguments): the programs of ``programs``. `compute` and
#: `layer` are the cases of the same names in docs/core_performance.md.
PROGRAM_CASES = {
    "mlp": (None, {}),
    "compute": (_stream_case, {"tiles": 128, "batch": 64}),
    "layer": (_layer_case, {"blocks": 4, "k_tiles": 4, "batch": 64, "act_lag": 1}),
}


# The benchmark ------------------------------------------------------------

def _save(result):
    path = os.environ.get("TPU_BENCH_OUT")
    if not path:
        return
    key = os.environ.get("TPU_BENCH_KEY", "run")
    merged = json.load(open(path)) if os.path.exists(path) else {}
    merged.setdefault(key, {}).update(result)
    with open(path, "w") as f:
        json.dump(merged, f, indent=2)


async def _setup(dut):
    from ...driver import Device
    config = config_from_env()
    latency = int(os.environ.get("TPU_BENCH_LATENCY", "0"))
    link = await open_bench_link(dut, config, latency=latency)
    monitor = LinkMonitor(dut, config)
    monitor.start()
    device = await Device.open(link, config, arena_bytes=(4 << 20) - 8192)
    return config, latency, link, monitor, device


def _common(config, latency):
    return {"config": config.to_dict(), "latency": latency,
            "simulator": f"{cocotb.SIM_NAME} {cocotb.SIM_VERSION}", "clock_ns": CLOCK_NS}


@cocotb.test()
async def dma(dut):
    """RHM and WHM throughput for each size of TPU_BENCH_SIZES."""
    config, latency, link, monitor, device = await _setup(dut)
    sizes = json.loads(os.environ.get("TPU_BENCH_SIZES", "[64, 1024, 16384]"))
    rng = np.random.default_rng(1)
    ub_bytes = config.ub_rows * config.rows
    results = []
    for nbytes in sizes:
        source, dest = device.alloc(nbytes, 4096), device.alloc(nbytes, 4096)
        data = rng.integers(0, 256, nbytes, dtype=np.uint8).tobytes()
        device.write(source, data)
        entry = {"bytes": nbytes}
        for direction, program, buffer in (
                ("read", read_program(config, nbytes, source.addr), source),
                ("write", write_program(config, nbytes, dest.addr), dest)):
            monitor.clear()
            result = await device.run(program, timeout=0.1)
            assert result.halted, result
            window = (monitor.read_window if direction == "read" else monitor.write_window)(
                buffer.addr, buffer.end)
            entry[direction] = {"instructions": len(program), "counters": result.counters,
                                "link": window, "elapsed_cycles": round(result.elapsed * 1e9 / CLOCK_NS)}
            dut._log.info("%d bytes %s: %s", nbytes, direction, json.dumps(entry[direction]))
        # Each WHM wrote the UB as the RHMs left it.
        ub = bytearray(ub_bytes)
        chunks = _chunks(config, nbytes)
        for offset, rows in chunks:
            ub[:rows * config.rows] = data[offset:offset + rows * config.rows]
        got = device.read(dest)
        for offset, rows in chunks:
            assert got[offset:offset + rows * config.rows] == ub[:rows * config.rows], \
                f"{nbytes} bytes: host bytes written from offset {offset} differ from those read"
        device.free(source)
        device.free(dest)
        results.append(entry)
    _save({"dma": results, **_common(config, latency)})


@cocotb.test()
async def programs(dut):
    """The programs of TPU_BENCH_PROGRAMS through the host link."""
    from ...programs import relocate
    from ...selftest.checks import load_program_data
    from ..stimulus.programs import mlp_program
    config, latency, link, monitor, device = await _setup(dut)
    names = json.loads(os.environ.get("TPU_BENCH_PROGRAMS", '["mlp", "compute"]'))
    rng = np.random.default_rng(2)
    results = {}
    for name in names:
        builder, kwargs = PROGRAM_CASES[name]
        expected = None
        if builder is None:
            p = mlp_program(1, config=config)
            weights = np.asarray(p.weights, dtype=np.int8)
            program, buffers = load_program_data(device, p)
            (out_addr, expected), = p.expected_host.items()
            out = buffers[out_addr]
            inputs = [b for addr, b in buffers.items() if addr != out_addr]
        else:
            program, host_in, host_out = builder(config, **kwargs)
            tiles = max(t for i in program if isinstance(i, Rw) for t in range(i.tile, i.tile + i.count)) + 1
            weights = rng.integers(-128, 128, (tiles, config.rows, config.cols), dtype=np.int8)
            in_bytes = sum(i.rows for i in program if isinstance(i, Rhm)) * config.rows
            out_bytes = sum(i.rows for i in program if isinstance(i, Whm)) * config.rows
            source, out = device.alloc(in_bytes), device.alloc(out_bytes)
            device.write(source, rng.integers(0, 256, in_bytes, dtype=np.uint8).tobytes())
            program = relocate(program, [(host_in, in_bytes, source), (host_out, out_bytes, out)])
            buffers = {host_in: source, host_out: out}
            inputs = [source]

        monitor.clear()
        fill = await device.load_weights(weights, timeout=0.1)
        fill_reads = _other_reads(monitor, exclude=[])
        monitor.clear()
        result = await device.run(program, timeout=0.1)
        assert result.halted, result
        if expected is not None:
            assert device.read(out) == expected, f"{name}: output differs from the reference"
        reads = [monitor.read_window(b.addr, b.end) for b in inputs]
        write = monitor.write_window(out.addr, out.end)
        fetch = _other_reads(monitor, exclude=[(b.addr, b.end) for b in inputs])
        estimate = estimate_cycles(config, encode_program(program))
        # The same program with the link model (this host is the deterministic one it models).
        on_link = estimate_cycles(config, encode_program(program),
                                  host=HostLink.of(config, latency))
        chip = result.counters
        core = estimate["counters"]
        mismatched = [c for c in ("mxu_active", "useful_macs", "weight_shift") if chip[c] != core[c]]
        assert not mismatched, f"{name}: {mismatched} differ from the estimate: {chip} {core}"
        results[name] = {
            "instructions": len(program), "weight_tiles": int(weights.shape[0]),
            "weight_bytes": int(weights.nbytes),
            "input_bytes": sum(b.size for b in inputs), "output_bytes": out.size,
            "counters": chip, "core_alone": {n: core[n] for n in COUNTER_NAMES},
            "link_model": {n: on_link["counters"][n] for n in COUNTER_NAMES},
            "reads": [r for r in reads if r], "write": write, "fetch": fetch, "wfill": fill_reads,
            "wfill_elapsed_cycles": round(fill.elapsed * 1e9 / CLOCK_NS),
            "elapsed_cycles": round(result.elapsed * 1e9 / CLOCK_NS),
        }
        dut._log.info("%s: %s", name, json.dumps(results[name]))
        if os.environ.get("TPU_BENCH_TIMELINE"):
            with open(f"{os.environ['TPU_BENCH_TIMELINE']}-{name}.json", "w") as f:
                json.dump({"requests": monitor.requests, "completions": monitor.completions,
                           "writes": monitor.writes,
                           "buffers": {b.addr: b.size for b in buffers.values()}}, f)
        for b in set(buffers.values()):
            device.free(b)
    _save({"programs": results, **_common(config, latency)})


def _other_reads(monitor, exclude):
    """The window of every read outside the `exclude` ranges (program fetch,
    weight fill): first MRd to last CplD, with counts."""
    def outside(r):
        return not any(lo <= r["addr"] < hi for lo, hi in exclude)
    requests = [r for r in monitor.requests if outside(r)]
    completions = [c for c in monitor.completions if outside(c)]
    if not requests or not completions:
        return None
    return {"first_request": requests[0]["first"], "end": completions[-1]["last"],
            "cycles": completions[-1]["last"] - requests[0]["first"] + 1,
            "requests": len(requests), "payload_bytes": sum(c["bytes"] for c in completions),
            "first_latency": requests[0]["cpl"] - requests[0]["last"]}
