"""The program fetcher's queue of the narrow host side (`_WordQueue`) against
`SyncFIFOBuffered`, which it replaces, in Amaranth's simulator: the same
writes, reads and flushes give the same ``r_rdy`` and the same word at the
output in every cycle, so the fetcher's instructions come in the same
cycles as before."""

import random

import pytest
from amaranth import Module, ResetInserter, Signal
from amaranth.lib import fifo
from amaranth.sim import Simulator

from conftest import base_seed
from tpu.hdl.program_fetcher import _WordQueue


DEPTH = 128


@pytest.mark.parametrize("fill", ["trickle", "burst"])
def test_word_queue_matches_sync_fifo_buffered(fill):
    rng = random.Random(base_seed() + (fill == "burst"))
    m = Module()
    flush = Signal()
    m.submodules.new = new = ResetInserter(flush)(_WordQueue(width=32, depth=DEPTH))
    m.submodules.old = old = ResetInserter(flush)(fifo.SyncFIFOBuffered(width=32, depth=DEPTH))
    sim = Simulator(m)
    sim.add_clock(1e-8)

    async def bench(ctx):
        held = 0            # words written and not yet read, as the fetcher's `committed` bounds
        word = 0
        for cycle in range(6000):
            # Phases that fill the queue to its depth and drain it.
            phase = (cycle // 700) % 2
            write_p = (0.9 if phase == 0 else 0.2) if fill == "burst" else 0.5
            read_p = (0.1 if phase == 0 else 0.9) if fill == "burst" else 0.5
            w_en = held < DEPTH and rng.random() < write_p
            r_en = rng.random() < read_p
            do_flush = rng.random() < 0.002
            ctx.set(flush, do_flush)
            for q in (new, old):
                ctx.set(q.w_en, w_en)
                ctx.set(q.w_data, word)
                ctx.set(q.r_en, r_en)
            assert ctx.get(old.w_rdy) or not w_en
            assert ctx.get(new.r_rdy) == ctx.get(old.r_rdy), cycle
            ready = ctx.get(old.r_rdy)
            if ready:
                assert ctx.get(new.r_data) == ctx.get(old.r_data), cycle
            held += w_en - (r_en and ready)
            if do_flush:
                held = 0
            word = rng.getrandbits(32)
            await ctx.tick()

    sim.add_testbench(bench)
    sim.run()


# -- the registered job valid -------------------------------------------------

def _byte_at(addr):
    return (addr * 131 + (addr >> 8) * 7 + 29) & 0xFF


@pytest.mark.parametrize("reader", ["always_ready", "random_ready"])
@pytest.mark.parametrize("form", ["wide", "words", "narrow"])
def test_registered_job_valid_matches_the_comparison(form, reader):
    """The fetcher whose job ``valid`` is a register beside the one that
    compares in the cycle itself (the reference), the same starts, flushes,
    DMA bytes and core handshakes into both: every output equal in every
    cycle. Programs start mostly when the fetcher is idle, now and then in
    the middle of one (a job taken in the START cycle); the core takes
    instructions in phases that fill the queue to its depth and drain it,
    so the queue's room decides jobs, in the cycles entries are popped
    too. A reader always ready takes each job in the cycle it is offered:
    a valid kept a cycle too long is a job more, which the chip's reader,
    busy after each job, would never show. A program's address and length
    are on the ports from the cycle after the START before, as the host's
    PROG_ADDR and PROG_LEN are held."""
    from tpu import TPUConfig
    from tpu.config import ULX3S16_PROFILE, UP5K_PROFILE
    from tpu.hdl.program_fetcher import ProgramFetcher
    from tpu.isa import INSTRUCTION_BYTES

    config = {"wide": TPUConfig(rows=2, cols=2, acc_rows=64), "words": ULX3S16_PROFILE,
              "narrow": UP5K_PROFILE}[form]
    seed = base_seed() + ["wide", "words", "narrow"].index(form) + 3 * (reader == "random_ready")
    print(f"seed {seed} (form {form}, reader {reader})")
    rng = random.Random(seed)
    beat_bytes = 4 * config.link_dw

    m = Module()
    m.submodules.new = new = ProgramFetcher(config, registered_valid=True)
    m.submodules.old = old = ProgramFetcher(config, registered_valid=False)
    sim = Simulator(m)
    sim.add_clock(1e-8)
    lengths = [0, 1, 2, 15, 16, 17, 31, 32, 33, 47, 48, 49, 64, 65]

    async def bench(ctx):
        def both(port, value):
            for dut in (new, old):
                ctx.set(port(dut), value)

        pending = []        # bytes the reader still owes, each job's last marked
        expected = None     # the instructions still due of a program started idle, or None
        jobs = popped_too = 0
        last_start = -1
        for cycle in range(6000):
            def same(port):
                a, b = ctx.get(port(new)), ctx.get(port(old))
                assert a == b, (cycle, a, b)
                return a
            start = flush = False
            busy = same(lambda d: d.busy)
            # `busy` while a program started idle has instructions to hand
            # over, in every cycle of it, and not after its last.
            if expected is not None:
                assert busy == bool(expected), (cycle, busy, len(expected))
            if cycle == last_start + 1:
                # The next program's, on the ports from the cycle after a
                # START (the host's PROG_LEN is held for cycles around one).
                program = rng.choice(lengths + [rng.randrange(1, 120)])
                base = rng.randrange(1 << 20) * INSTRUCTION_BYTES
                both(lambda d: d.addr, base)
                both(lambda d: d.length, program)
            elif rng.random() < (0.05 if not busy else 0.005):
                start = True
                last_start = cycle
                expected = (None if busy else
                            [int.from_bytes(bytes(_byte_at(base + k * INSTRUCTION_BYTES + i)
                                                  for i in range(INSTRUCTION_BYTES)), "little")
                             for k in range(program)])
            elif rng.random() < 0.006:
                flush = True
                pending.clear()
                expected = None
            both(lambda d: d.start, start)
            both(lambda d: d.flush, flush)
            # The core: phases of taking instructions rarely (the queue fills
            # to its depth) and often.
            taking = rng.random() < (0.05 if (cycle // 300) % 2 else 0.9)
            both(lambda d: d.instr.ready, taking)
            job_ready = reader == "always_ready" or rng.random() < 0.6
            both(lambda d: d.job.ready, job_ready)
            beat = bool(pending) and not flush and rng.random() < 0.7
            if beat:
                chunk = pending[:beat_bytes]
                both(lambda d: d.data.payload.data, int.from_bytes(bytes(b for b, _ in chunk), "little"))
                both(lambda d: d.data.payload.count, len(chunk))
                both(lambda d: d.data.payload.last, chunk[-1][1])
            both(lambda d: d.data.valid, beat)

            valid = same(lambda d: d.job.valid)
            if valid:
                addr = same(lambda d: d.job.payload.addr)
                length = same(lambda d: d.job.payload.length)
                if job_ready and not flush:
                    jobs += 1
                    popped_too += taking and same(lambda d: d.instr.valid)
                    pending += [(_byte_at(addr + i), i == length - 1) for i in range(length)]
            data_ready = same(lambda d: d.data.ready)
            if beat and data_ready:
                del pending[:beat_bytes]
            if same(lambda d: d.instr.valid):
                word = same(lambda d: d.instr.payload)
                if taking and expected is not None:
                    assert expected and word == expected.pop(0), cycle
            await ctx.tick()
        print(f"{jobs} jobs, {popped_too} of them as an instruction left")
        assert jobs > 50

    sim.add_testbench(bench)
    sim.run()
