"""The device pool: batches spread over devices and independent jobs at once
equal one golden device bit for bit; a device process killed in a job, a
device that hangs, a chip fault in a job: the job is retried or fails with
a clear error, every other job is answered correctly, nothing hangs."""

import os
import signal
import threading
import time

import numpy as np
import pytest

from tpu.compiler.session import InferenceSession
from tpu.runtime import DevicePool, DeviceSpec, PoolError, parse_devices

from conftest import base_seed
from serve_models import compiled_tiny, faulting, tiny_inputs


SEED = base_seed()
PROCESS = DeviceSpec("golden", process=True)


@pytest.fixture(scope="module")
def tiny():
    return compiled_tiny()


def chunks_of(session, x):
    arrays, samples = session._prepare({"x": x})
    return session._chunks(arrays, samples)


def reference_results(compiled, chunks):
    """Each chunk on one golden device, the way `InferenceSession` runs it."""
    session = InferenceSession(compiled, backend="golden")
    return session._run_chunks(chunks)


def same(results, expected):
    assert len(results) == len(expected)
    for (out, _), (want, _) in zip(results, expected):
        assert out.keys() == want.keys()
        for name in out:
            np.testing.assert_array_equal(out[name], want[name])


def busy_device(pool, limit=30.0):
    """The first device of `pool` seen running a job."""
    deadline = time.monotonic() + limit
    while True:
        for device in pool.devices:
            if pool.stats[device.name].busy:
                return device
        assert time.monotonic() < deadline, "no device started the job"
        time.sleep(0.002)


def test_parse_devices():
    assert [s.backend for s in parse_devices("golden:2+verilator:1")] == \
        ["golden", "golden", "verilator"]
    assert [s.options["port"] for s in parse_devices("serial:/dev/ttyUSB1,/dev/ttyUSB3")] == \
        ["/dev/ttyUSB1", "/dev/ttyUSB3"]
    assert all(s.process for s in parse_devices("golden-process:2"))
    assert not parse_devices("golden")[0].process
    for bad, words in [("gold:2", "unknown backend 'gold'"), ("golden:0", "count"),
                       ("golden:x", "count"), ("serial:", "names no serial port"), ("", "expected")]:
        with pytest.raises(ValueError, match=words):
            parse_devices(bad)
    with pytest.raises(ValueError, match="always runs in a process"):
        DeviceSpec("verilator", process=False)


def test_session_on_a_pool_equals_one_device(tiny):
    print(f"seed {SEED}")
    x = tiny_inputs(np.random.default_rng(SEED), 37)
    (want,) = InferenceSession(tiny, backend="golden").run(None, {"x": x})
    with InferenceSession(tiny, devices=["golden:2", PROCESS]) as session:
        (got,) = session.run(None, {"x": x})
        stats = session.pool.stats.values()
        # 10 chunks in three groups of 4, 4 and 2, taken by the devices as
        # they come free (on a busy machine one device may take two).
        assert sum(s.chunks for s in stats) == 10 and max(s.chunks for s in stats) < 10
        assert all(s.cycles > 0 and s.useful_macs > 0 for s in stats if s.chunks)
        assert "gemm" in session.report().format_table() or session.report().format_table()
    np.testing.assert_array_equal(got, want)


def test_independent_jobs_run_at_once(tiny):
    rng = np.random.default_rng(SEED + 1)
    session = InferenceSession(tiny, backend="golden")
    jobs = [chunks_of(session, tiny_inputs(rng, int(rng.integers(1, 9)))) for _ in range(24)]
    expected = [reference_results(tiny, chunks) for chunks in jobs]
    with DevicePool("golden:3", tiny.config) as pool:
        futures = [pool.submit(tiny, chunks) for chunks in jobs]
        for future, want in zip(futures, expected):
            same(future.result(60), want)
        assert sum(s.jobs for s in pool.stats.values()) == 24
        assert sum(s.jobs > 0 for s in pool.stats.values()) >= 2


def test_device_process_killed_in_a_job(tiny):
    rng = np.random.default_rng(SEED + 2)
    session = InferenceSession(tiny, backend="golden")
    long_job = chunks_of(session, tiny_inputs(rng, 4 * 60))        # 60 chunks: seconds
    short = [chunks_of(session, tiny_inputs(rng, 3)) for _ in range(10)]
    with DevicePool([PROCESS, PROCESS], tiny.config) as pool:
        first = pool.submit(tiny, long_job)
        victim = busy_device(pool)
        pid = victim.pid
        os.kill(pid, signal.SIGKILL)
        others = [pool.submit(tiny, chunks) for chunks in short]
        same(first.result(120), reference_results(tiny, long_job))
        for future, chunks in zip(others, short):
            same(future.result(60), reference_results(tiny, chunks))
        stats = pool.stats[victim.name]
        assert (stats.failures, stats.restarts, stats.alive) == (1, 1, True)
        assert victim.pid != pid
        # The device opened anew serves jobs.
        wait = [pool.submit(tiny, chunks) for chunks in short]
        assert all(f.result(60) for f in wait)


def test_device_that_hangs_is_restarted(tiny):
    rng = np.random.default_rng(SEED + 3)
    session = InferenceSession(tiny, backend="golden")
    job = chunks_of(session, tiny_inputs(rng, 4 * 20))
    short = [chunks_of(session, tiny_inputs(rng, 2)) for _ in range(6)]
    # 0.3 s a chunk: 6 s for the 20-chunk job, several times what it takes.
    with DevicePool([PROCESS, PROCESS], tiny.config, timeout=0.3) as pool:
        first = pool.submit(tiny, job)
        victim = busy_device(pool)
        os.killpg(os.getpgid(victim.pid), signal.SIGSTOP)        # it stops answering
        others = [pool.submit(tiny, chunks) for chunks in short]
        for future, chunks in zip(others, short):
            same(future.result(60), reference_results(tiny, chunks))
        same(first.result(60), reference_results(tiny, job))
        stats = pool.stats[victim.name]
        assert (stats.failures, stats.restarts, stats.alive) == (1, 1, True)


def test_chip_fault_fails_its_job_only(tiny):
    bad = faulting(tiny)
    rng = np.random.default_rng(SEED + 4)
    session = InferenceSession(tiny, backend="golden")
    good = [chunks_of(session, tiny_inputs(rng, 3)) for _ in range(8)]
    with DevicePool("golden:2", tiny.config) as pool:
        failing = pool.submit(bad, good[0])
        futures = [pool.submit(tiny, chunks) for chunks in good]
        with pytest.raises(PoolError) as caught:
            failing.result(60)
        text = str(caught.value)
        # Tried on both devices, each attempt named with the chip's fault.
        assert text.count("WEIGHT_MEM_RANGE") == 2, text
        assert "golden#0" in text and "golden#1" in text, text
        for future, chunks in zip(futures, good):
            same(future.result(60), reference_results(tiny, chunks))
        assert all(s.alive and s.failures == 1 for s in pool.stats.values())
        same(pool.submit(tiny, good[0]).result(60), reference_results(tiny, good[0]))


def test_one_device_retries_on_itself_and_a_dead_pool_says_so(tiny, monkeypatch):
    session = InferenceSession(tiny, backend="golden")
    chunks = chunks_of(session, tiny_inputs(np.random.default_rng(SEED + 5), 5))
    with DevicePool([PROCESS], tiny.config) as pool:
        device = pool.devices[0]
        os.kill(device.pid, signal.SIGKILL)
        same(pool.submit(tiny, chunks).result(60), reference_results(tiny, chunks))
        assert pool.stats[device.name].restarts == 1
        # Killed again, and it cannot be opened any more: a clear error, at once.
        os.kill(device.pid, signal.SIGKILL)

        def broken(*args, **kwargs):
            raise RuntimeError("the board is unplugged")
        monkeypatch.setattr(device, "open", broken)
        with pytest.raises(PoolError, match="unplugged"):
            pool.submit(tiny, chunks).result(60)
        with pytest.raises(PoolError, match="no device of the pool is working"):
            pool.submit(tiny, chunks)


def test_bad_input_is_the_callers_and_not_retried(tiny):
    session = InferenceSession(tiny, backend="golden")
    chunks = chunks_of(session, tiny_inputs(np.random.default_rng(SEED + 6), 4))
    chunks[0]["x"] = chunks[0]["x"][:, :5]
    with DevicePool("golden:2", tiny.config) as pool:
        with pytest.raises(ValueError, match="shape"):
            pool.submit(tiny, chunks).result(60)
        assert all(s.failures == 0 for s in pool.stats.values())
        with pytest.raises(ValueError, match="compiled for"):
            pool.submit(compiled_tiny(tiny.config.replace(rows=4, cols=4)), chunks)


def test_closing_fails_what_is_queued(tiny):
    session = InferenceSession(tiny, backend="golden")
    chunks = chunks_of(session, tiny_inputs(np.random.default_rng(SEED + 7), 4 * 30))
    pool = DevicePool("golden:1", tiny.config)
    futures = [pool.submit(tiny, chunks) for _ in range(3)]
    threading.Thread(target=pool.close).start()
    outcomes = []
    for future in futures:
        try:
            future.result(60)
            outcomes.append("done")
        except PoolError as error:
            assert "closed" in str(error)
            outcomes.append("closed")
    assert "closed" in outcomes


def _start_local_ray(ray, attempts=2):
    """A local Ray instance. Ray gives its node a fixed 30 s to register; on
    a machine whose cores are all busy that can pass, so it is tried again,
    and a Ray that cannot start at all skips the test with Ray's reason
    (nothing of ours has run yet)."""
    for attempt in range(attempts):
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
            return
        except Exception as error:  # Ray raises a bare Exception for this
            ray.shutdown()
            if "timed out during startup" not in str(error):
                raise
            reason = str(error).splitlines()[0]
    pytest.skip(f"a local Ray instance did not start ({attempts} tries): {reason}")


def test_devices_as_ray_actors(tiny):
    """Devices in actors of a local Ray instance: the same answers; an actor
    killed in a job is replaced and the job retried."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install ray)")
    rng = np.random.default_rng(SEED + 8)
    session = InferenceSession(tiny, backend="golden")
    long_job = chunks_of(session, tiny_inputs(rng, 4 * 60))
    short = [chunks_of(session, tiny_inputs(rng, 3)) for _ in range(6)]
    _start_local_ray(ray)
    try:
        with DevicePool("ray:golden:2", tiny.config) as pool:
            assert [d.spec.label for d in pool.devices] == ["ray:golden"] * 2
            first = pool.submit(tiny, long_job)
            victim = busy_device(pool)
            others = [pool.submit(tiny, chunks) for chunks in short]
            victim.kill()
            same(first.result(180), reference_results(tiny, long_job))
            for future, chunks in zip(others, short):
                same(future.result(120), reference_results(tiny, chunks))
            assert pool.stats[victim.name].alive
            assert sum(s.restarts for s in pool.stats.values()) == 1
            with InferenceSession(tiny, devices=pool) as on_ray:
                x = tiny_inputs(rng, 9)
                np.testing.assert_array_equal(on_ray.run(None, {"x": x})[0],
                                              session.run(None, {"x": x})[0])
    finally:
        ray.shutdown()
