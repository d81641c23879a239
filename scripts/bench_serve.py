"""Load test and benchmark of `tpu serve` on 127.0.0.1.

For each device pool given (``--devices golden:1 golden:2 golden:4
verilator:1``), start ``tpu serve`` on a free local port with a compiled
model, send `--requests` inference requests (JSON, 1..`--samples` samples
each, drawn from inputs whose single-device golden results are known) from
`--clients` concurrent clients, bounded by `--time-limit` seconds, and check
every answer. Prints, per pool: requests answered, wrong, failed and lost,
requests/s, p50/p99 latency, and what each device did (chip cycles per
second of wall time, MXU utilisation, busy share), read from the server's
/metrics. ``--json FILE`` saves the rows.

    python scripts/bench_serve.py --devices golden:1 golden:2 golden:4 --requests 10000
"""

import argparse
import asyncio
import json
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np


ROOT = Path(__file__).resolve().parent.parent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``tpu serve ARGS`` in a process of its own on a free local port."""

    def __init__(self, models, devices, *extra, log=None, ready_timeout=600.0, grpc=False):
        self.port = free_port()
        self.grpc_port = free_port() if grpc else 0
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log or tempfile.mkstemp(prefix="tpu-serve-", suffix=".log")[1])
        command = [sys.executable, "-m", "tpu", "serve", *models, "--devices", devices,
                   "--port", str(self.port), "--grpc-port", str(self.grpc_port), *extra]
        with open(self.log_path, "wb") as log_file:
            self.proc = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=ROOT)
        deadline = time.monotonic() + ready_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tpu serve ended with status {self.proc.returncode}: "
                                   f"{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/v2/health/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"tpu serve was not ready in {ready_timeout:g} s: "
                                   f"{self.log_tail()}")
            time.sleep(0.2)

    def log_tail(self, lines=8):
        text = self.log_path.read_text(errors="replace").strip().splitlines()
        return " | ".join(text[-lines:])

    def metrics(self):
        """``{(name, labels text): value}`` of the tpu_ metrics."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as r:
            text = r.read().decode()
        values = {}
        for line in text.splitlines():
            m = re.match(r"^(tpu_\w+)(\{[^}]*\})? (\S+)$", line)
            if m:
                values[(m.group(1), m.group(2) or "")] = float(m.group(3))
        return values

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def infer_body(name, x):
    return {"inputs": [{"name": name, "shape": list(x.shape), "datatype": "FP32",
                        "data": x.ravel().tolist()}]}


async def load(url, model, cases, *, clients=32, requests=1000, time_limit=120.0, seed=0):
    """Send `requests` requests for `model` (bounded by `time_limit` seconds)
    from `clients` concurrent clients; `cases` is a list of ``(input name,
    x, expected output)``. Returns counts and latencies."""
    import aiohttp
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(cases), requests)
    bodies = [json.dumps(infer_body(cases[i][0], cases[i][1])).encode() for i in range(len(cases))]
    result = {"sent": 0, "ok": 0, "wrong": 0, "failed": 0, "statuses": {}, "latencies": []}
    next_index = iter(range(requests))
    deadline = time.monotonic() + time_limit
    timeout = aiohttp.ClientTimeout(total=120)

    async def client(session):
        for i in next_index:
            if time.monotonic() > deadline:
                return
            case = picks[i]
            result["sent"] += 1
            started = time.monotonic()
            try:
                async with session.post(f"{url}/v2/models/{model}/infer", data=bodies[case],
                                        headers={"Content-Type": "application/json"}) as r:
                    status = r.status
                    answer = await r.json(content_type=None)
            except (aiohttp.ClientError, asyncio.TimeoutError) as error:
                status, answer = type(error).__name__, None
            elapsed = time.monotonic() - started
            result["statuses"][str(status)] = result["statuses"].get(str(status), 0) + 1
            if status != 200:
                result["failed"] += 1
                continue
            want = cases[case][2]
            got = np.asarray(answer["outputs"][0]["data"], dtype=want.dtype).reshape(want.shape)
            if np.array_equal(got, want):
                result["ok"] += 1
                result["latencies"].append(elapsed)
            else:
                result["wrong"] += 1

    started = time.monotonic()
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(client(session) for _ in range(clients)))
    result["seconds"] = time.monotonic() - started
    lat = np.array(result["latencies"]) if result["latencies"] else np.zeros(1)
    result["p50_ms"] = float(np.percentile(lat, 50) * 1e3)
    result["p99_ms"] = float(np.percentile(lat, 99) * 1e3)
    result["requests_per_s"] = result["ok"] / result["seconds"]
    result["lost"] = result["sent"] - result["ok"] - result["wrong"] - result["failed"]
    del result["latencies"]
    return result


def make_cases(compiled, count, samples, seed=0):
    """`count` inputs of 1..`samples` samples with their single-device golden outputs."""
    from tpu.compiler.session import InferenceSession
    session = InferenceSession(compiled, backend="golden")
    (spec,) = session.get_inputs()
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(count):
        n = int(rng.integers(1, samples + 1))
        x = rng.normal(size=(n, *spec.shape[1:])).astype(np.float32)
        (y,) = session.run(None, {spec.name: x})
        cases.append((spec.name, x, y))
    return cases


def device_rows(before, after, seconds, config):
    rows = {}
    for (name, labels), value in after.items():
        m = re.search(r'device="([^"]+)"', labels)
        if m and name.endswith("_total"):
            rows.setdefault(m.group(1), {})[name] = value - before.get((name, labels), 0.0)
    out = []
    for device, v in sorted(rows.items()):
        cycles = v.get("tpu_device_chip_cycles_total", 0.0)
        macs = v.get("tpu_device_useful_macs_total", 0.0)
        out.append({"device": device, "chip_cycles_per_s": cycles / seconds,
                    "busy_share": v.get("tpu_device_busy_seconds_total", 0.0) / seconds,
                    "mxu_utilization": macs / (cycles * config.rows * config.cols) if cycles else 0,
                    "chunks": v.get("tpu_device_chunks_total", 0.0)})
    return out


def tiny_model(path, config, batch):
    """The benchmark's model: a 64-32-10 MLP of random int8 weights."""
    from tpu.compiler import ir
    from tpu.compiler.backend import compile_graph
    from tpu.compiler.ir import Activation, QuantType
    rng = np.random.default_rng(2)
    q_in, q_h, q_out = QuantType(0.04, 3), QuantType(0.05, -128), QuantType(0.1, 0)
    tensors = {n: ir.Tensor(n, s, q) for n, s, q in
               [("x", (64,), q_in), ("h", (32,), q_h), ("y", (10,), q_out)]}
    layers = [ir.Dense("fc1", "x", "h", rng.integers(-90, 90, (64, 32)).astype(np.int8),
                       rng.uniform(0.002, 0.01, 32), rng.integers(-400, 400, 32),
                       Activation("relu")),
              ir.Dense("fc2", "h", "y", rng.integers(-90, 90, (32, 10)).astype(np.int8), 0.01)]
    graph = ir.Graph(tensors, layers,
                     [ir.GraphInput("x", "x", (None, 64), np.dtype(np.float32), "nc")],
                     [ir.GraphOutput("y", "y", (None, 10), np.dtype(np.float32), "nc")],
                     "mlp64").validate()
    compiled = compile_graph(graph, config, batch)
    compiled.save(path)
    return compiled


#: ``--chip``: the default chip, or the small one the host-interface tests
#: simulate (its Verilator model is built by the test suite already)
CHIPS = {"default": {}, "narrow": dict(rows=4, cols=4, acc_rows=256, ub_rows=1024,
                                       weight_mem_tiles=64, link_dw=1, max_payload=128,
                                       max_read_request=128, read_tags=2, cpl_timeout=2000)}


def bench(devices_list, *, clients, requests, time_limit, samples, batch, max_delay_ms,
          chip="default", log=print):
    from tpu import TPUConfig
    config = TPUConfig(**CHIPS[chip])
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "mlp64.tpu"
        compiled = tiny_model(path, config, batch)
        cases = make_cases(compiled, 128, samples)
        for devices in devices_list:
            with Server([f"mlp64={path}"], devices, "--max-delay-ms", str(max_delay_ms),
                        ready_timeout=3600) as server:
                before = server.metrics()
                result = asyncio.run(load(server.url, "mlp64", cases, clients=clients,
                                          requests=requests, time_limit=time_limit))
                after = server.metrics()
            result["devices"] = devices
            result["per_device"] = device_rows(before, after, result["seconds"], config)
            rows.append(result)
            log(format_row(result))
    return rows


def pool_bench(devices_list, *, chunks, batch, chip="default", log=print):
    """The pool alone, without the server: `chunks` chunks of the model as
    independent jobs; chunks/s and chip cycles/s per device."""
    from tpu import TPUConfig
    from tpu.compiler.session import InferenceSession
    from tpu.runtime import DevicePool
    config = TPUConfig(**CHIPS[chip])
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        compiled = tiny_model(Path(scratch) / "mlp64.tpu", config, batch)
        session = InferenceSession(compiled, backend="golden")
        x = np.random.default_rng(0).normal(size=(batch, 64)).astype(np.float32)
        arrays, samples = session._prepare({"x": x})
        (chunk,) = session._chunks(arrays, samples)
        for devices in devices_list:
            with DevicePool(devices, config) as pool:
                started = time.monotonic()
                futures = [pool.submit(compiled, [chunk]) for _ in range(chunks)]
                for future in futures:
                    future.result()
                seconds = time.monotonic() - started
                per = [{"device": s.name, "chunks": s.chunks,
                        "chip_cycles_per_s": s.cycles / seconds,
                        "busy_share": s.busy_seconds / seconds} for s in pool.stats.values()]
            row = {"devices": devices, "chunks": chunks, "seconds": seconds,
                   "chunks_per_s": chunks / seconds, "samples_per_s": chunks * batch / seconds,
                   "per_device": per}
            rows.append(row)
            log(f"{devices:<18} {chunks} chunks of {batch} in {seconds:.1f} s: "
                f"{row['chunks_per_s']:,.1f} chunks/s, {row['samples_per_s']:,.0f} samples/s | "
                + ", ".join(f"{d['device']} {d['chip_cycles_per_s'] / 1e3:,.1f} kcycles/s "
                            f"busy {d['busy_share']:.0%}" for d in per))
    return rows


def format_row(r):
    per = ", ".join(f"{d['device']} {d['chip_cycles_per_s'] / 1e3:,.1f} kcycles/s "
                    f"util {d['mxu_utilization']:.1%} busy {d['busy_share']:.0%}"
                    for d in r["per_device"])
    return (f"{r['devices']:<14} {r['ok']:>6} ok {r['wrong']} wrong {r['failed']} failed "
            f"{r['lost']} lost in {r['seconds']:.1f} s: {r['requests_per_s']:,.0f} req/s, "
            f"p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms | {per}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", nargs="+", default=["golden:1", "golden:2", "golden:4"])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests", type=int, default=10000)
    parser.add_argument("--time-limit", type=float, default=600.0)
    parser.add_argument("--samples", type=int, default=1, help="most samples in one request")
    parser.add_argument("--batch", type=int, default=16, help="the model's compiled batch")
    parser.add_argument("--max-delay-ms", type=float, default=5.0)
    parser.add_argument("--chip", choices=sorted(CHIPS), default="default",
                        help="the chip configuration (narrow: the 4x4 chip of the tests)")
    parser.add_argument("--pool-only", type=int, metavar="CHUNKS",
                        help="measure the device pool alone: CHUNKS jobs of one chunk each")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    if args.pool_only:
        rows = pool_bench(args.devices, chunks=args.pool_only, batch=args.batch, chip=args.chip)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=2))
        return 0
    rows = bench(args.devices, clients=args.clients, requests=args.requests,
                 time_limit=args.time_limit, samples=args.samples, batch=args.batch,
                 max_delay_ms=args.max_delay_ms, chip=args.chip)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    bad = sum(r["wrong"] + r["lost"] + r["failed"] for r in rows)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
