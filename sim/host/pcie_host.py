"""The host side of a simulated chip: cocotbext-pcie's root complex, bridged to
the `HostInterface` RTL's link streams, and a driver `Link` over it.

The root complex, its memory and its MSI controller are cocotbext-pcie's own
models, so the TLPs our RTL sends and accepts are checked by code written
independently of ours. Between the two, `PcieBridge` makes the host awkward
on purpose: completions for different tags are reordered and delayed at
random, the root complex splits its completions at random boundaries, and
both link streams see random idle cycles and backpressure. Tests can also make
it misbehave: `PcieBridge.fail_read` spoils the host's answer to one of the
chip's reads (an error status, a lost, stray or malformed completion), and
`PcieBridge.inject_raw` sends link beats that need not be a well-formed TLP.
"""

import logging
import os
import random
import warnings
from dataclasses import dataclass
from typing import Callable, NamedTuple

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import Event, FallingEdge, First, ReadOnly, RisingEdge, Timer
from cocotb.utils import get_sim_time
from cocotbext.pcie.core import Device, RootComplex
from cocotbext.pcie.core.caps import MsiCapability
from cocotbext.pcie.core.tlp import CplStatus, Tlp, TlpType

from ...host_registers import BAR0_BYTES
from ...driver.link import RamLink, check_pair, check_value64
from .tlp_link import (Beat, beats_to_tlp, pack_link_beat, packed_link_beats, tlp_to_words,
                       unpack_link_beat, words_to_beats)


# cocotbext-pcie 0.2 still calls cocotb APIs that cocotb 2 deprecates
# (Task.join); that is its business, and must not fail our runs, which turn
# every warning of our own code into an error.
warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"cocotbext\.")

__all__ = ["PcieBridge", "RtlLink", "open_rtl_link", "attach_root_complex", "CLOCK_NS", "ReadFault", "RawPacket",
           "READ_FAULTS"]

CLOCK_NS = 4          # a 250 MHz core clock, as a PCIe Gen3 x8 block's user clock
VENDOR_ID = 0x1234    # a placeholder vendor ID, as open hardware without one uses
DEVICE_ID = 0x7401

_COMPLETIONS = {TlpType.CPL, TlpType.CPL_DATA, TlpType.CPL_LOCKED, TlpType.CPL_LOCKED_DATA}
_CONFIG = {TlpType.CFG_READ_0, TlpType.CFG_WRITE_0}
_READS = {TlpType.MEM_READ, TlpType.MEM_READ_64}

#: The chip's link outputs the bridge reads at a falling edge, before it
#: drives rx and tx.ready for the next rising edge: each a function of the
#: chip's registers only (TlpReceiver's ready of its buffer's pointers and
#: header count, TlpTransmitter's valid and beat of its state and of
#: registered TLP streams), so their value half a cycle before the edge is
#: their value at it. `PcieBridge.check_sampling` checks this as it runs.
SAMPLED_AT_FALLING_EDGE = ("rx__ready", "tx__valid", "tx__payload")


def _check_sampled(early, late):
    """`early` and `late` (rx.ready, tx.valid, tx.payload or None) agree."""
    for name, a, b in zip(SAMPLED_AT_FALLING_EDGE, early, late):
        if name == "tx__payload" and not late[1]:
            continue
        if (None if a is None else int(a)) != (None if b is None else int(b)):
            raise AssertionError(f"the chip's {name} changed from {a} to {b} after the bridge "
                                 f"drove rx and tx.ready at a falling edge: it depends on them "
                                 f"combinationally, so the bridge cannot sample it at the edge")


#: How `PcieBridge.fail_read` can spoil the answer to a read, and the
#: `HostError` name the chip must report for each.
READ_FAULTS = {
    "status": "CPL_STATUS",           # a completion without data, status UR, CA or CRS
    "poisoned": "CPL_STATUS",         # the right data, but with EP set: it must not be used
    "drop": "CPL_TIMEOUT",            # this completion and the rest of the read never come
    "unexpected": "CPL_UNEXPECTED",   # first a copy with a tag no read can have
    "byte_count": "CPL_MALFORMED",    # byte count off
    "lower_address": "CPL_MALFORMED",
    "length": "CPL_MALFORMED",        # more payload words than the rest of the read
    "no_data": "CPL_MALFORMED",       # a successful completion without data (Cpl, not CplD)
    "link_length": "CPL_TIMEOUT",     # Length disagrees with the payload: the receiver
                                      # drops it (a BAD_REQUEST), so the read never ends
}


class RawPacket(NamedTuple):
    """Link beats sent as they are, well formed or not."""
    beats: list
    note: str = ""


@dataclass(eq=False)
class ReadFault:
    """A spoilt answer to one of the chip's memory reads (`PcieBridge.fail_read`).

    The fault goes to the first read whose MRd `select` accepts among those
    answered from the time it is asked for, and to one of that read's
    completions chosen at random (later ones are dropped, except for ``unexpected``, whose stray
    copy only goes before it). Once it has struck, `read` is that MRd,
    `address` the host address of the first byte of the spoilt completion
    (the chip may deliver the bytes before it, never it or any after),
    `applied` what was done (``length`` falls back to ``byte_count`` when the
    payload cannot grow within `max_payload`) and `note` the details.
    """
    kind: str
    select: Callable
    status: CplStatus = CplStatus.UR
    read: Tlp | None = None
    address: int | None = None
    applied: str | None = None
    note: str = ""


@dataclass(eq=False)
class _Read:
    tlp: Tlp
    fault: ReadFault | None = None
    seen: int = 0             # completions of it so far
    over: bool = False        # the fault struck: the rest is dropped

    @property
    def first_byte(self):
        return self.tlp.address + self.tlp.get_first_be_offset()

    @property
    def nbytes(self):
        return self.tlp.get_be_byte_count()


class PcieBridge(Device):
    """A cocotbext-pcie `Device` whose function's memory requests and
    completions are carried to and from the RTL's ``rx``/``tx`` link streams.

    Config space (BAR0 of `BAR0_BYTES`, an MSI capability) lives in the
    model's function, as it would in a PCIe hard block.

    The bridge wakes once a clock cycle, at the falling edge, while anything
    is on the link or due (and sleeps otherwise): it reads the chip's
    `SAMPLED_AT_FALLING_EDGE` outputs before driving its own. With
    `check_sampling` it also reads them again in the read-only phase after
    its writes and fails if any differs (one more wake a cycle).
    """

    def __init__(self, dut, config, rng, *, idle=0.0, backpressure=0.0, reorder=True,
                 max_delay=0, check_sampling=False):
        super().__init__()
        self.dut = dut
        self.check_sampling = check_sampling
        self.config = config
        self.rng = rng
        self.idle = idle
        self.backpressure = backpressure
        self.reorder = reorder
        self.max_delay = max_delay

        function = self.make_function()
        function.vendor_id = VENDOR_ID
        function.device_id = DEVICE_ID
        function.configure_bar(0, BAR0_BYTES)
        self.msi_cap = MsiCapability()
        self.msi_cap.msi_64bit_address_capable = 1
        self.msi_cap.msi_multiple_message_capable = 0
        function.register_capability(self.msi_cap)

        self.requests = []        # TLPs to BAR0, in order
        self.completions = {}     # tag -> [(ready cycle, TLP)], in order per tag
        self._start_ns = None
        self._wake = Event()      # set when the host queues a packet for the chip
        self.sent = []            # every TLP the chip sent, for tests
        self.received = []        # every TLP (or RawPacket) the chip was given
        self.faults = []          # ReadFaults not yet struck
        self._reads = {}          # tag -> the chip's latest read with it
        self._tx_queue = cocotb.queue.Queue()
        dut.rx__valid.value = 0
        dut.tx__ready.value = 0

    @property
    def function(self):
        return self.functions[0]

    # -- from the root complex ---------------------------------------------
    async def upstream_recv(self, tlp):
        if tlp.fmt_type in _CONFIG:
            self.bus_num = tlp.completer_id.bus
            await self.function.upstream_recv(tlp)
            self._wake.set()    # the chip's pcie_id may have changed
            return
        tlp.release_fc()
        if tlp.fmt_type in _COMPLETIONS:
            delay = self.rng.randint(0, self.max_delay) if self.max_delay else 0
            # Stand-ins for a completion keep its place among its tag's.
            for packet in self._answer(tlp):
                self.completions.setdefault(tlp.tag, []).append((self.cycle + delay, packet))
        else:
            self.requests.append(tlp)
        self._wake.set()

    def inject(self, tlp):
        """Hand the chip a TLP directly (for malformed and unexpected packets)."""
        if tlp.fmt_type in _COMPLETIONS:
            self.completions.setdefault(tlp.tag, []).append((self.cycle, tlp))
        else:
            self.requests.append(tlp)
        self._wake.set()

    def inject_raw(self, beats, note=""):
        """Send link beats ``(data, keep, last)`` as they are, in order with the
        host's requests: for packets no `Tlp` can describe."""
        self.requests.append(RawPacket([Beat(*b) for b in beats], note))
        self._wake.set()

    def fail_read(self, kind, select=lambda tlp: True, status=CplStatus.UR):
        """Spoil the answer to the next read `select` accepts (see `ReadFault`
        and `READ_FAULTS`); returns the `ReadFault`, filled in once it struck."""
        if kind not in READ_FAULTS:
            raise ValueError(f"unknown read fault {kind!r}: one of {sorted(READ_FAULTS)}")
        fault = ReadFault(kind, select, status)
        self.faults.append(fault)
        return fault

    def _answer(self, cpl):
        """What the chip gets instead of the host's completion `cpl`."""
        read = self._reads.get(cpl.tag)
        if read is None:
            return [cpl]
        read.seen += 1
        if read.over:
            return []
        if read.fault is None and read.seen == 1:
            for fault in self.faults:
                if fault.select(read.tlp):
                    self.faults.remove(fault)
                    read.fault = fault
                    break
        fault = read.fault
        final = cpl.byte_count <= 4 * cpl.length - (cpl.lower_address & 3)
        if fault is None or fault.read is not None or not (final or self.rng.random() < 0.5):
            return [cpl]
        fault.read = read.tlp
        fault.address = read.first_byte + read.nbytes - cpl.byte_count
        fault.applied = kind = fault.kind
        read.over = kind != "unexpected"
        spoilt = Tlp(cpl)
        if kind == "status":
            spoilt = Tlp.create_completion_for_tlp(read.tlp, cpl.completer_id, status=fault.status)
            spoilt.byte_count, spoilt.lower_address = cpl.byte_count, cpl.lower_address
            spoilt.requester_id = cpl.requester_id
            fault.note = f"status {fault.status.name}"
        elif kind == "drop":
            fault.note = "dropped"
            return []
        elif kind == "unexpected":
            spoilt.tag = self.rng.randint(self.config.read_tags, 255)
            fault.note = f"a copy with tag {spoilt.tag} first"
            return [spoilt, cpl]
        elif kind == "length":
            need = -(-((cpl.lower_address & 3) + cpl.byte_count) // 4)
            room = self.config.max_payload // 4 - need
            if room >= 1:
                extra = self.rng.randint(1, room)
                spoilt.set_data(bytes(cpl.data[:4 * need]) +
                                self.rng.randbytes(4 * (need - cpl.length + extra)))
                fault.note = f"{spoilt.length} words where {need} end the read"
            else:
                fault.applied = kind = "byte_count"
        if kind == "byte_count":
            wrong = self.rng.choice([n for n in range(cpl.byte_count - 8, cpl.byte_count + 9)
                                     if 0 < n <= 4096 and n != cpl.byte_count])
            spoilt.byte_count = wrong & 0xFFF
            fault.note += f"byte count {wrong} for {cpl.byte_count}"
        elif kind == "lower_address":
            spoilt.lower_address = cpl.lower_address ^ self.rng.randint(1, 127)
            fault.note = f"lower address 0x{spoilt.lower_address:02x} for 0x{cpl.lower_address:02x}"
        elif kind == "poisoned":
            spoilt.ep = True
            fault.note = "EP set"
        elif kind == "no_data":
            spoilt.fmt_type = TlpType.CPL
            spoilt.length, spoilt.data = 0, bytearray()
            fault.note = "Cpl with status SC"
        elif kind == "link_length":
            words = tlp_to_words(cpl)
            if cpl.length > 1 and self.rng.random() < 0.5:
                words = words[:-1]
            else:
                words = words + [self.rng.getrandbits(32)]
            fault.note = f"Length {cpl.length} with {len(words) - 3} payload words"
            return [RawPacket(words_to_beats(words, self.config.link_dw), fault.note)]
        return [spoilt]

    def _next_tlp(self):
        ready = [tag for tag, queue in self.completions.items() if queue and queue[0][0] <= self.cycle]
        choices = [("req", None)] * bool(self.requests) + [("cpl", tag) for tag in ready]
        if not choices:
            return None
        kind, tag = self.rng.choice(choices) if self.reorder else choices[0]
        if kind == "req":
            return self.requests.pop(0)
        tlp = self.completions[tag].pop(0)[1]
        if not self.completions[tag]:
            del self.completions[tag]
        return tlp

    def _packet_beats(self, packet):
        """The link payload bits (`pack_link_beat`) of each of `packet`'s beats."""
        link_dw = self.config.link_dw
        if isinstance(packet, RawPacket):
            return [pack_link_beat(beat, link_dw) for beat in packet.beats]
        return packed_link_beats(tlp_to_words(packet), link_dw)

    # -- cycle by cycle ----------------------------------------------------
    @property
    def cycle(self):
        """Falling clock edges since `start` (the bridge drives at falling edges)."""
        if self._start_ns is None:
            return 0
        return int((get_sim_time("ns") - self._start_ns + CLOCK_NS // 2) // CLOCK_NS)

    def start(self):
        self._start_ns = get_sim_time("ns")
        cocotb.start_soon(self._run())
        cocotb.start_soon(self._send_upstream())

    async def _run(self):
        dut, link_dw = self.dut, self.config.link_dw
        beats = []          # the packet being driven, its beats packed
        gathered = []       # the packet being received
        # What the ports were last driven to: a write through the simulator
        # costs more than the comparison (a beat held by back-pressure is
        # not written again).
        driven_id = driven_payload = None
        driven_valid = driven_ready = 0

        # The handles and triggers, looked up once: a DMA-bound run goes
        # through this loop every cycle.
        pcie_id, rx_payload, rx_valid, rx_ready = dut.pcie_id, dut.rx__payload, dut.rx__valid, dut.rx__ready
        tx_ready, tx_valid_port, tx_payload = dut.tx__ready, dut.tx__valid, dut.tx__payload
        falling, read_only, rng = FallingEdge(dut.clk), ReadOnly(), self.rng
        check = self.check_sampling
        while True:
            await falling
            # One wake a cycle: rx.ready, tx.valid and tx.payload are
            # functions of the chip's registers (`SAMPLED_AT_FALLING_EDGE`),
            # so what they are now, before this edge's writes, is what the
            # next rising edge sees. (`check_sampling` compares them with
            # their values in the read-only phase after the writes.)
            ready_now = rx_ready.value
            tx_valid = tx_valid_port.value
            word = int(tx_payload.value) if tx_valid else None
            requester = int(self.function.pcie_id)
            renamed = requester != driven_id
            if renamed:
                pcie_id.value = driven_id = requester
            # (The idle draw comes first, work or not: a seed's host behaviour
            # stays what it was.)
            if not beats and rng.random() >= self.idle and (self.requests or self.completions):
                tlp = self._next_tlp()
                if tlp is not None:
                    self.received.append(tlp)
                    beats = self._packet_beats(tlp)
            if beats and beats[0] != driven_payload:
                rx_payload.value = driven_payload = beats[0]
            offered = int(bool(beats))
            if offered != driven_valid:
                rx_valid.value = driven_valid = offered
            ready = int(rng.random() >= self.backpressure)
            if ready != driven_ready:
                tx_ready.value = driven_ready = ready
            if renamed or check:
                # A new pcie_id is in the chip's requester ID from now on.
                await read_only
                later = (rx_ready.value, tx_valid_port.value)
                later_word = int(tx_payload.value) if later[1] else None
                if check and not renamed:
                    _check_sampled((ready_now, tx_valid, word), (*later, later_word))
                ready_now, tx_valid, word = *later, later_word
            if offered and ready_now:
                beats.pop(0)
            if tx_valid and driven_ready:
                beat = unpack_link_beat(word, link_dw)
                gathered.append(beat)
                if beat[2]:
                    tlp = beats_to_tlp(gathered)
                    gathered = []
                    self.sent.append(tlp)
                    if tlp.fmt_type in _READS:
                        # A tag comes back only after every completion of its
                        # last read arrived or timed out: completions of a
                        # tag belong to its latest read.
                        self._reads[tlp.tag] = _Read(tlp)
                    self._tx_queue.put_nowait(tlp)
            if not offered and not beats and not gathered and not tx_valid and not self.requests:
                # Nothing offered, nothing to send, nothing coming yet: sleep
                # until the chip raises tx.valid, the host queues a packet or
                # the first held completion is due, instead of waking every
                # cycle (most of a compute-bound run, and of the waits for
                # delayed completions). tx.valid rises only after a rising
                # edge, so the next falling edge still sees its first beat
                # before it is taken.
                due = min((queue[0][0] for queue in self.completions.values() if queue),
                          default=None)
                now = self.cycle
                if due is None or due > now + 1:
                    self._wake.clear()
                    wakes = [RisingEdge(tx_valid_port), self._wake.wait()]
                    if due is not None:
                        # To the rising edge before the falling edge of cycle `due`.
                        wakes.append(Timer((due - now) * CLOCK_NS - CLOCK_NS // 2, "ns"))
                    await First(*wakes)
            # The next falling edge: no need to wake at the rising one.

    async def _send_upstream(self):
        # One sender keeps the chip's TLPs in the order it sent them.
        while True:
            tlp = await self._tx_queue.get()
            await self.send(tlp)


class RtlLink(RamLink):
    """The driver's `Link` to the RTL through the root complex: MMIO through
    BAR0's window, host memory in a region of the root complex's memory, and
    interrupts from its MSI controller."""

    clock_hz = 1e9 / CLOCK_NS

    def __init__(self, dut, rc, pci_device, bridge, memory_bytes, backend):
        self.backend = backend
        self.dut = dut
        self.rc = rc
        self.pci = pci_device
        self.bridge = bridge
        self.bar = pci_device.bar_window[0]
        base, memory = rc.alloc_region(memory_bytes + 4096)
        # Host address 0 means "no MSI" to the chip: keep buffers off it.
        self._attach_ram(base, memory, first_free=base + 4096)
        self._interrupt = Event()
        pci_device.request_irq(0, self._on_msi)

    async def _on_msi(self):
        self._interrupt.set()

    async def read32(self, offset):
        return await self.bar.read_dword(offset)

    async def write32(self, offset, value):
        await self.bar.write_dword(offset, value & 0xFFFFFFFF)

    # One two-word TLP for a pair of registers (the driver's doorbells and
    # counter reads): each MMIO is a round trip through the root complex's
    # tasks, which a part on a small chip spends most of its time on. A
    # `serial_host` chip serves one-word accesses only (docs/host_interface.md).
    async def read64(self, offset):
        if self.bridge.config.serial_host:
            return await super().read64(offset)
        check_pair(offset, BAR0_BYTES)
        return await self.bar.read_qword(offset)

    async def write64(self, offset, value):
        if self.bridge.config.serial_host:
            return await super().write64(offset, value)
        check_pair(offset, BAR0_BYTES)
        await self.bar.write_qword(offset, check_value64(value))

    @property
    def msi_address(self):
        return self.pci.msi_vectors[0].addr

    @property
    def msi_data(self):
        return self.pci.msi_vectors[0].data

    async def wait_interrupt(self, timeout):
        if not self._interrupt.is_set() and timeout > 0:
            await First(self._interrupt.wait(), Timer(self._ns(timeout), "ns"))
        seen = self._interrupt.is_set()
        self._interrupt.clear()
        return seen

    async def sleep(self, seconds):
        await Timer(self._ns(seconds), "ns")

    def time(self):
        return get_sim_time("ns") * 1e-9

    @staticmethod
    def _ns(seconds):
        # Whole clock periods, at least one: the simulator's time is discrete.
        return max(1, round(seconds * 1e9 / CLOCK_NS)) * CLOCK_NS


async def attach_root_complex(dut, config, bridge, *, split_on_all_rcb, rcb_128):
    """Release the RTL's reset and enumerate it behind a new root complex
    through `bridge`, with MSI enabled; ``(root complex, its view of the chip)``.
    The root complex's payloads are as large as the chip allows."""
    rc = RootComplex()
    rc.max_payload_size = (config.max_payload // 128).bit_length() - 1
    rc.split_on_all_rcb = split_on_all_rcb
    rc.read_completion_boundary = rcb_128
    rc.make_port().connect(bridge)
    for _ in range(4):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    bridge.start()
    # cocotbext-pcie logs every step of the enumeration (about 220 lines at
    # INFO, and a warning for each empty slot of bus 0 it probes): a tenth of
    # a run's start. After it, its warnings and errors go to the log again.
    log = logging.getLogger("cocotb.pcie")
    log.setLevel(logging.ERROR)
    await rc.enumerate()
    log.setLevel(logging.WARNING)
    pci_device = rc.find_device(bridge.function.pcie_id)
    await pci_device.enable_device()
    await pci_device.set_master()
    await pci_device.alloc_irq_vectors(1, 1)
    return rc, pci_device


async def open_rtl_link(dut, config, *, seed, backend="rtl", memory_bytes=1 << 21, idle=None,
                        backpressure=None, max_delay=None, check_sampling=None):
    """Start the clock, reset the RTL, enumerate it under a root complex and
    return its `RtlLink`. Random host behaviour is drawn from `seed`.
    `check_sampling` (`PcieBridge`): by default, whether the environment
    sets ``TPU_BRIDGE_CHECK_SAMPLING=1``."""
    if check_sampling is None:
        check_sampling = os.environ.get("TPU_BRIDGE_CHECK_SAMPLING", "") == "1"
    rng = random.Random(seed)
    cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
    dut.rst.value = 1
    bridge = PcieBridge(dut, config, rng,
                        idle=rng.choice([0.0, 0.2, 0.5]) if idle is None else idle,
                        backpressure=rng.choice([0.0, 0.2, 0.5]) if backpressure is None else backpressure,
                        max_delay=rng.choice([0, 8, 40]) if max_delay is None else max_delay,
                        check_sampling=check_sampling)
    # Completions split at every read-completion boundary, sometimes.
    rc, pci_device = await attach_root_complex(dut, config, bridge,
                                               split_on_all_rcb=rng.random() < 0.5,
                                               rcb_128=rng.random() < 0.5)
    link = RtlLink(dut, rc, pci_device, bridge, memory_bytes, backend)
    link.seed = seed        # checks draw their own random choices from it too
    dut._log.info(f"host: seed {seed}, idle {bridge.idle}, backpressure {bridge.backpressure}, "
                  f"completion delay <= {bridge.max_delay}, split on every RCB {rc.split_on_all_rcb}, "
                  f"RCB {128 if rc.read_completion_boundary else 64}")
    return link
