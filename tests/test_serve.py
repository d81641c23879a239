"""`tpu serve` as its users see it: an independent client of the Open
Inference Protocol (tritonclient, HTTP and gRPC) and plain HTTP requests
against the command, every answer equal to the model on one golden device;
bad requests among good ones, a chip fault, a device process killed while
requests flow, a full queue; the metrics; a bounded load test; the same on
a Verilator device. Everything stays on 127.0.0.1."""

import asyncio
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

if importlib.util.find_spec("kserve") is None:
    pytest.skip("tpu serve needs the serve extra (pip install '.[serve]')", allow_module_level=True)
httpclient = pytest.importorskip("tritonclient.http",
                                 reason="the tests' client is tritonclient[http] (the test extra)")
psutil = pytest.importorskip("psutil", reason="psutil (a dependency of kserve) finds the "
                                              "device processes")

from tpu.compiler.session import InferenceSession

from conftest import base_seed
from script_loader import load_script
from serve_models import (compiled_conv, compiled_tiny, conv_inputs, faulting, tiny_inputs)


SEED = base_seed()
bench_serve = load_script("bench_serve")
Server = bench_serve.Server


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Three models saved as .tpu files, with one golden device's session each."""
    directory = tmp_path_factory.mktemp("models")
    tiny, conv = compiled_tiny(), compiled_conv()
    paths = {}
    for name, compiled in [("tiny", tiny), ("conv", conv), ("broken", faulting(tiny))]:
        paths[name] = directory / f"{name}.tpu"
        compiled.save(paths[name])
    golden = {"tiny": InferenceSession(tiny, backend="golden"),
              "conv": InferenceSession(conv, backend="golden")}
    return paths, golden


@pytest.fixture(scope="module")
def server(models):
    paths, _ = models
    with Server([f"{n}={p}" for n, p in paths.items()], "golden:2+golden-process:1",
                "--max-delay-ms", "2", grpc=True) as running:
        yield running
        assert running.stop() == 0, running.log_tail()


def inputs_for(name, rng, samples):
    return tiny_inputs(rng, samples) if name == "tiny" else conv_inputs(rng, samples)


def input_name(name):
    return "x" if name == "tiny" else "input"


def output_name(name):
    return "y" if name == "tiny" else "prob"


def post(url, body, content_type="application/json"):
    """``(status, json answer, headers)`` of a POST."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}"), dict(error.headers)


def good_request(server, golden, name, x):
    status, answer, _ = post(f"{server.url}/v2/models/{name}/infer",
                             bench_serve.infer_body(input_name(name), x))
    assert status == 200, answer
    (out,) = answer["outputs"]
    (want,) = golden[name].run(None, {input_name(name): x})
    got = np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])
    np.testing.assert_array_equal(got, want)


def test_tritonclient_answers_equal_one_golden_device(server, models):
    _, golden = models
    print(f"seed {SEED}")
    rng = np.random.default_rng(SEED)
    client = httpclient.InferenceServerClient(server.url.removeprefix("http://"),
                                              concurrency=8)
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("tiny") and not client.is_model_ready("nope")
    meta = client.get_model_metadata("conv")
    assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 2, 6, 6]}]
    assert meta["outputs"] == [{"name": "prob", "datatype": "FP32", "shape": [-1, 4]}]
    pending = []
    for _ in range(40):
        name = str(rng.choice(["tiny", "conv"]))
        x = inputs_for(name, rng, int(rng.integers(1, 10)))
        tensor = httpclient.InferInput(input_name(name), list(x.shape), "FP32")
        tensor.set_data_from_numpy(x, binary_data=bool(rng.integers(2)))
        wanted = [httpclient.InferRequestedOutput(output_name(name),
                                                  binary_data=bool(rng.integers(2)))]
        pending.append((name, x, client.async_infer(name, [tensor], outputs=wanted)))
    for name, x, future in pending:
        got = future.get_result().as_numpy(output_name(name))
        (want,) = golden[name].run(None, {input_name(name): x})
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    client.close()


GRPC_CLIENT = """
import json, sys
import numpy as np
import tritonclient.grpc as grpcclient
port, path = sys.argv[1], sys.argv[2]
x = np.load(path)
client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
assert client.is_server_ready()
tensor = grpcclient.InferInput("input", list(x.shape), "FP32")
tensor.set_data_from_numpy(x)
np.save(path, client.infer("conv", [tensor]).as_numpy("prob"))
"""


def test_grpc_answers_equal_one_golden_device(server, models, tmp_path):
    """tritonclient's gRPC client, in a process of its own: its protocol
    buffers and kserve's define the same names and cannot share one process."""
    pytest.importorskip("tritonclient.grpc", reason="tritonclient's gRPC client needs grpcio")
    _, golden = models
    x = conv_inputs(np.random.default_rng(SEED + 1), 5)
    np.save(tmp_path / "x.npy", x)
    done = subprocess.run([sys.executable, "-c", GRPC_CLIENT, str(server.grpc_port),
                           str(tmp_path / "x.npy")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    got = np.load(tmp_path / "x.npy")
    np.testing.assert_array_equal(got, golden["conv"].run(None, {"input": x})[0])


BAD_REQUESTS = [
    ("tiny", {"inputs": [{"name": "x", "shape": [2, 9], "datatype": "FP32", "data": [0.5] * 18}]},
     400, "input 'x': shape (2, 9) where the model expects (N, 10)"),
    ("tiny", {"inputs": [{"name": "x", "shape": [1, 10], "datatype": "INT8", "data": [1] * 10}]},
     400, "input 'x': dtype int8 where the model expects float32"),
    ("tiny", {"inputs": [{"name": "z", "shape": [1, 10], "datatype": "FP32", "data": [1] * 10}]},
     400, "unknown input 'z'"),
    ("tiny", {"inputs": [{"name": "x", "shape": [2, 10], "datatype": "FP32", "data": [1] * 3}]},
     400, "its data is not 20 FP32 values"),
    ("tiny", {"inputs": [{"name": "x", "shape": [1, 10], "datatype": "FP32",
                          "data": [1] * 9 + ["NaN"]}]}, 400, "NaN"),
    ("tiny", {"inputs": [{"name": "x", "shape": [0, 10], "datatype": "FP32", "data": []}]},
     400, "no samples"),
    ("tiny", {"input": []}, 400, "malformed request"),
    ("tiny", b"{not json", 400, "malformed request"),
    ("nope", {"inputs": []}, 404, "nope does not exist"),
]


def test_bad_requests_among_good_ones(server, models):
    _, golden = models
    rng = np.random.default_rng(SEED + 2)
    goods = [("tiny", tiny_inputs(rng, int(rng.integers(1, 6)))) for _ in range(12)]
    errors = []

    def good(name, x):
        try:
            good_request(server, golden, name, x)
        except BaseException as error:
            errors.append(error)
    threads = [threading.Thread(target=good, args=g) for g in goods]
    for t in threads[:6]:
        t.start()
    for name, body, status, words in BAD_REQUESTS:
        got, answer, _ = post(f"{server.url}/v2/models/{name}/infer", body)
        assert got == status, answer
        assert words in answer["error"] and "\n" not in answer["error"], answer
    for t in threads[6:]:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors


def test_chip_fault_fails_its_request_only(server, models):
    _, golden = models
    rng = np.random.default_rng(SEED + 3)
    x = tiny_inputs(rng, 3)
    errors = []

    def good():
        try:
            good_request(server, golden, "conv", conv_inputs(rng, 2))
        except BaseException as error:
            errors.append(error)
    threads = [threading.Thread(target=good) for _ in range(6)]
    for t in threads:
        t.start()
    status, answer, _ = post(f"{server.url}/v2/models/broken/infer",
                             bench_serve.infer_body("x", x))
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert status == 500 and "WEIGHT_MEM_RANGE" in answer["error"], answer
    # Both attempts are named; the devices were reset and serve on.
    assert answer["error"].count("WEIGHT_MEM_RANGE") == 2, answer
    good_request(server, golden, "tiny", x)
    metrics = server.metrics()
    assert all(v == 1.0 for (n, _), v in metrics.items() if n == "tpu_device_up")


def device_processes(server):
    return [p for p in psutil.Process(server.proc.pid).children(recursive=True)
            if "tpu.runtime.device_process" in " ".join(p.cmdline())]


def test_device_process_killed_while_requests_flow(server, models):
    _, golden = models
    rng = np.random.default_rng(SEED + 4)
    (victim,) = device_processes(server)
    cases = [("tiny", tiny_inputs(rng, int(rng.integers(1, 9)))) for _ in range(60)]
    errors = []

    def client(part):
        for name, x in part:
            try:
                good_request(server, golden, name, x)
            except BaseException as error:
                errors.append(error)
    threads = [threading.Thread(target=client, args=(cases[i::6],)) for i in range(6)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    os.kill(victim.pid, signal.SIGKILL)
    for t in threads:
        t.join(180)
    assert not errors, errors
    # Had the requests ended before the kill, the death shows at the next
    # job the device takes: a few more requests, bounded.
    restarts = lambda: server.metrics()[("tpu_device_restarts_total",
                                         '{device="golden-process#0"}')]
    for _ in range(60):
        if restarts() == 1:
            break
        good_request(server, golden, "tiny", tiny_inputs(rng, 4))
    assert restarts() == 1
    (replacement,) = device_processes(server)
    assert replacement.pid != victim.pid


def test_metrics_count_what_happened(server, models):
    _, golden = models
    before = server.metrics()
    rng = np.random.default_rng(SEED + 5)
    for _ in range(5):
        good_request(server, golden, "conv", conv_inputs(rng, 3))
    post(f"{server.url}/v2/models/conv/infer", BAD_REQUESTS[0][1])
    after = server.metrics()
    delta = lambda key: after.get(key, 0.0) - before.get(key, 0.0)
    assert delta(("tpu_requests_total", '{model="conv",outcome="ok"}')) == 5
    assert delta(("tpu_request_seconds_count", '{model="conv"}')) == 5
    assert delta(("tpu_batch_samples_sum", '{model="conv"}')) == 15
    assert after[("tpu_queue_requests", '{model="conv"}')] == 0
    cycles = sum(v for (n, _), v in after.items() if n == "tpu_device_chip_cycles_total") \
        - sum(v for (n, _), v in before.items() if n == "tpu_device_chip_cycles_total")
    assert cycles > 0
    utils = [v for (n, _), v in after.items() if n == "tpu_device_mxu_utilization"]
    assert utils and all(0 <= u <= 1 for u in utils) and max(utils) > 0


def test_load_small(server, models):
    """The load test of scripts/bench_serve.py, small: every request answered, right."""
    paths, golden = models
    cases = []
    rng = np.random.default_rng(SEED + 6)
    for _ in range(32):
        x = tiny_inputs(rng, int(rng.integers(1, 4)))
        cases.append(("x", x, golden["tiny"].run(None, {"x": x})[0]))
    result = asyncio.run(bench_serve.load(server.url, "tiny", cases, clients=16, requests=400,
                                          time_limit=240, seed=SEED))
    print(bench_serve.format_row({**result, "devices": "golden:2+1", "per_device": []}))
    assert result["sent"] == 400
    assert (result["ok"], result["wrong"], result["failed"], result["lost"]) == (400, 0, 0, 0), \
        result


def test_full_queue_answers_503_with_a_retry_hint(models):
    paths, golden = models
    rng = np.random.default_rng(SEED + 7)
    # Two requests of one sample wait 2 s for a batch of 4: the others find
    # the queue full.
    with Server([f"tiny={paths['tiny']}"], "golden:1", "--max-queue", "2",
                "--max-delay-ms", "2000") as server:
        answers = []

        def one(x):
            answers.append((x, post(f"{server.url}/v2/models/tiny/infer",
                                    bench_serve.infer_body("x", x))))
        xs = [tiny_inputs(rng, 1) for _ in range(8)]
        threads = [threading.Thread(target=one, args=(x,)) for x in xs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        statuses = sorted(status for _, (status, _, _) in answers)
        assert len(answers) == 8 and set(statuses) <= {200, 503} and 503 in statuses, statuses
        assert statuses.count(200) >= 1
        for x, (status, answer, headers) in answers:
            if status == 503:
                assert "queue is full" in answer["error"] and int(headers["retry-after"]) >= 1
            else:
                np.testing.assert_array_equal(
                    np.asarray(answer["outputs"][0]["data"], np.float32).reshape(1, 3),
                    golden["tiny"].run(None, {"x": x})[0])
        after = server.metrics()
        assert after[("tpu_requests_total", '{model="tiny",outcome="overloaded"}')] == \
            statuses.count(503)


def test_serve_command_errors(tmp_path, models, capsys):
    from tpu.cli import main
    paths, _ = models
    for argv, words in [([str(tmp_path / "none.tpu")], "no such model file"),
                        ([str(paths["tiny"]), "--devices", "gold:2"], "unknown backend 'gold'"),
                        ([str(paths["tiny"]), "--devices", "golden:0"], "whole number >= 1"),
                        ([str(paths["tiny"]), "--port", "0"], "--port must be a TCP port"),
                        ([str(paths["tiny"]), "--max-queue", "0"], "--max-queue"),
                        ([f"a={paths['tiny']}", f"a={paths['conv']}"], "same name"),
                        ([f"a b={paths['tiny']}"], "a model's name is letters")]:
        assert main(["serve", *argv]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err


@pytest.mark.rtl
def test_verilator_device_answers_equal_golden(tmp_path):
    """One Verilator device behind tpu serve (the chip the host-interface
    tests build already), tritonclient's requests equal to golden."""
    from tpu.sim.harness import missing_simulator
    reason = missing_simulator("verilator")
    if reason:
        pytest.skip(reason)
    from test_host_interface_rtl import NARROW
    compiled = compiled_tiny(NARROW, batch=2)
    compiled.save(tmp_path / "tiny.tpu")
    golden = InferenceSession(compiled, backend="golden")
    rng = np.random.default_rng(SEED + 8)
    with Server([f"tiny={tmp_path / 'tiny.tpu'}"], "verilator:1", "--max-delay-ms", "50",
                ready_timeout=1800) as server:
        client = httpclient.InferenceServerClient(server.url.removeprefix("http://"),
                                                  concurrency=3)
        pending = []
        for samples in (1, 2, 3):
            x = tiny_inputs(rng, samples)
            tensor = httpclient.InferInput("x", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            pending.append((x, client.async_infer("tiny", [tensor])))
        for x, future in pending:
            np.testing.assert_array_equal(future.get_result().as_numpy("y"),
                                          golden.run(None, {"x": x})[0])
        # The simulation killed (before the request, so that the request
        # surely meets the dead simulation however fast the machine): a new
        # one answers it.
        (worker,) = device_processes(server)
        simulations = worker.children(recursive=True)
        assert simulations, "the device process started no simulation"
        for process in simulations:
            process.kill()
        x = tiny_inputs(rng, 2)
        tensor = httpclient.InferInput("x", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        future = client.async_infer("tiny", [tensor])
        np.testing.assert_array_equal(future.get_result().as_numpy("y"),
                                      golden.run(None, {"x": x})[0])
        client.close()
        metrics = server.metrics()
        assert metrics[("tpu_device_chip_cycles_total", '{device="verilator#0"}')] > 0
        assert metrics[("tpu_device_restarts_total", '{device="verilator#0"}')] == 1
