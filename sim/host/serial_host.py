"""The host side of a simulated `SerialChip`: cocotbext-uart's UART models on
its pins, and the driver's `SerialLink` over them.

`UartTransport` is the byte stream `SerialLink` wants, made of an
independent UART model (cocotbext-uart) driving the chip's ``rx`` pin and
sampling its ``tx`` pin. `NoisyTransport` spoils that stream on purpose:
frames to the chip get a flipped bit, lose a byte, are cut short or follow
garbage; bytes from the chip get flipped or lost.
"""

import logging
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge, Timer
from cocotb.utils import get_sim_time
from cocotbext.uart import UartSink, UartSource

from ...driver.serial_link import SerialLink
from ...hdl.serial_chip import DEFAULT_DIVISOR


__all__ = ["CLOCK_NS", "UartTransport", "NoisyTransport", "open_serial_link"]

CLOCK_NS = 10       # 100 MHz: with the default divisor, a UART bit is 40 ns


def _ns(seconds):
    return max(1, round(seconds * 1e9))


class UartTransport:
    """cocotbext-uart's source on ``dut.rx`` and sink on ``dut.tx``, as a transport."""

    def __init__(self, dut, baud):
        self.source = UartSource(dut.rx, baud=baud, bits=8, stop_bits=1)
        self.sink = UartSink(dut.tx, baud=baud, bits=8, stop_bits=1)
        # They log every byte at INFO: far too much for a whole program.
        self.source.log.setLevel(logging.WARNING)
        self.sink.log.setLevel(logging.WARNING)

    def write(self, data):
        self.source.write_nowait(bytes(data))

    async def read(self, timeout):
        if self.sink.empty() and timeout > 0:
            await self.sink.wait(_ns(timeout), "ns")
        return bytes(self.sink.read_nowait())

    def time(self):
        return get_sim_time("ns") * 1e-9

    async def sleep(self, seconds):
        await Timer(_ns(seconds), "ns")

    def __repr__(self):
        return "the simulated UART"


class NoisyTransport:
    """`inner` with faults: each frame written is spoilt with probability
    `frame_rate` (a flipped bit, a lost byte, cut short, or garbage before
    it), each byte read with probability `byte_rate` (flipped or lost).
    `faults` counts what was done."""

    def __init__(self, inner, rng, *, frame_rate=0.0, byte_rate=0.0):
        self.inner = inner
        self.rng = rng
        self.frame_rate = frame_rate
        self.byte_rate = byte_rate
        self.faults = {"flip": 0, "drop": 0, "truncate": 0, "garbage": 0, "flip_in": 0, "drop_in": 0}

    def write(self, data):
        data = bytearray(data)
        if self.rng.random() < self.frame_rate:
            kind = self.rng.choice(["flip", "drop", "truncate", "garbage"])
            self.faults[kind] += 1
            at = self.rng.randrange(len(data))
            if kind == "flip":
                data[at] ^= 1 << self.rng.randrange(8)
            elif kind == "drop":
                del data[at]
            elif kind == "truncate":
                del data[max(at, 1):]
            else:
                data[:0] = self.rng.randbytes(self.rng.randint(1, 8))
        self.inner.write(data)

    async def read(self, timeout):
        out = bytearray()
        for byte in await self.inner.read(timeout):
            if self.rng.random() < self.byte_rate:
                if self.rng.random() < 0.5:
                    self.faults["flip_in"] += 1
                    out.append(byte ^ 1 << self.rng.randrange(8))
                else:
                    self.faults["drop_in"] += 1
                continue
            out.append(byte)
        return bytes(out)

    def time(self):
        return self.inner.time()

    async def sleep(self, seconds):
        await self.inner.sleep(seconds)

    def __repr__(self):
        return f"a noisy {self.inner!r}"


async def open_serial_link(dut, config, *, seed, divisor=DEFAULT_DIVISOR, frame_rate=0.0,
                           byte_rate=0.0, backend="serial"):
    """Start the clock, reset the `SerialChip`, and return a `SerialLink` to
    it over cocotbext-uart (through a `NoisyTransport` when a rate is set)."""
    cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
    baud = 1e9 / (CLOCK_NS * divisor)
    transport = UartTransport(dut, baud)
    if frame_rate or byte_rate:
        transport = NoisyTransport(transport, random.Random(seed), frame_rate=frame_rate,
                                   byte_rate=byte_rate)
    dut.rst.value = 1
    for _ in range(4):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    link = SerialLink(transport, config, baudrate=baud, clock_hz=1e9 / CLOCK_NS, host_latency=0,
                      read_timeout=5e-3, retries=32, completion_bytes=64)
    link.backend = backend
    link.seed = seed
    return link
