"""`SerialLink`: the driver's `Link` to a chip behind a UART (docs/serial_link.md).

The chip on a board (``hdl/serial_chip.py``) speaks TLPs over its UART in
frames (`tpu.driver.serial_framing`). This link is the host end:

* BAR0 accesses are MRd/MWr TLPs; a read returns with its completion.
  With the config's ``narrow_host`` the link speaks the narrow host
  protocol's messages instead (`tpu.driver.narrow_messages`): REG_READ and
  REG_WRITE, READ_DATA or READ_ERROR for the chip's READ_REQ, and the
  chip's WRITEs applied, the same host memory, interrupt and timeouts.
* Host memory is RAM held here: the chip's DMA read requests are answered
  with completions from it, its DMA writes applied to it, and its write of
  `msi_data` to `msi_address` is an interrupt.
* Each direction is stop-and-wait with one sequence bit: a TLP frame is sent
  again when no ACK came within `ack_timeout` or a NAK came, up to
  `retries` times; a damaged frame from the chip is answered with NAK, a
  repeated one with ACK only, so nothing runs twice or damaged.

The link does its work whenever the driver awaits one of its coroutines:
frames from the chip are served only then. On a board, keep the chip's
``cpl_timeout`` long enough for the host's answers to cross the UART.

The transport is anything with ``write(data)``, ``async read(timeout)``
(the bytes received, waiting up to `timeout` seconds for the first),
``time()`` and ``async sleep(seconds)``: `PySerialTransport` for a serial
port, a UART model in simulation (`tpu.sim.host.serial_host`).
"""

import asyncio
import time
from collections import deque

from .errors import TpuError
from .link import RamLink, check_offset, check_value
from .narrow_messages import MessageKind, encode as encode_message, parse as parse_message
from .serial_framing import MAX_HEADER_BYTES, Deframer, Kind, encode_frame
from .tlp_bytes import CPL_SC, CPL_UR, byte_range, completion, memory_read, memory_write, parse


__all__ = ["SerialLink", "PySerialTransport", "LinkError", "frame_seconds"]


class LinkError(TpuError):
    """The serial link failed: no answer after every retry, or a bad completion."""


def frame_seconds(nbytes, baudrate):
    """Time `nbytes` bytes take on an 8N1 UART (10 bits a byte)."""
    return 10 * nbytes / baudrate


class PySerialTransport:
    """A pyserial port as a transport: `port` is a device name or a pyserial
    URL such as ``socket://host:port`` (opened at `baudrate`, 8N1), or an
    open ``serial.Serial``."""

    def __init__(self, port, baudrate=115200, poll_interval=1e-3):
        if isinstance(port, str):
            import serial
            try:
                port = serial.serial_for_url(port, baudrate=baudrate, timeout=0)
            except (serial.SerialException, ValueError) as error:
                raise LinkError(f"cannot open serial port {port}: {error}") from None
        self.port = port
        self.poll_interval = poll_interval

    def write(self, data):
        self.port.write(bytes(data))

    async def read(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            waiting = self.port.in_waiting
            if waiting:
                return self.port.read(waiting)
            left = deadline - time.monotonic()
            if left <= 0:
                return b""
            await asyncio.sleep(min(left, self.poll_interval))

    def time(self):
        return time.monotonic()

    async def sleep(self, seconds):
        await asyncio.sleep(seconds)

    def close(self):
        self.port.close()

    def __repr__(self):
        return f"serial port {self.port.name}"


class SerialLink(RamLink):
    """The `Link` contract over a UART; see the module docstring.

    Parameters
    ----------
    transport : str or transport
        A serial port name (opened with pyserial at `baudrate`) or a transport.
    config : TPUConfig
        The chip's configuration (its ``max_payload`` bounds the frames).
    baudrate : float
        The UART's bit rate, for the retransmission timeout.
    clock_hz : float
        The chip's clock.
    ram_base, ram_bytes : int
        Where the host memory the chip reaches by DMA lives, and how much.
    msi_address, msi_data : int
        The chip's interrupt write (outside the RAM).
    ack_timeout : float or None
        Seconds without an ACK before a frame is sent again; by default the
        time of the frame and of a longest frame from the chip, times 3,
        plus `host_latency`.
    read_timeout : float
        Seconds a register read may take in all.
    retries : int
        Sends of one frame before `LinkError`.
    completion_bytes : int
        Largest completion payload sent (split at 64-byte boundaries as a
        root complex's read completion boundary does).
    host_latency : float
        Seconds the host side adds to a round trip (USB, the OS), for the
        default `ack_timeout`.
    """

    backend = "serial"

    def __init__(self, transport, config, *, baudrate=115200, clock_hz=12e6, ram_base=0x10000,
                 ram_bytes=2 << 20, msi_address=0xFEE0_0000, msi_data=0x4D51, ack_timeout=None,
                 read_timeout=1.0, retries=16, completion_bytes=64, host_latency=0.02):
        if isinstance(transport, str):
            transport = PySerialTransport(transport, baudrate)
        if completion_bytes % 64 or not 64 <= completion_bytes <= config.max_payload:
            raise ValueError(f"completion_bytes {completion_bytes} must be a multiple of 64 "
                             f"from 64 to the chip's max_payload {config.max_payload}")
        if ram_base <= msi_address < ram_base + ram_bytes or ram_base == 0:
            raise ValueError("the MSI address must lie outside the host RAM, which must not start at 0")
        self.transport = transport
        self.config = config
        self.baudrate = baudrate
        self.clock_hz = clock_hz
        self.msi_address = msi_address
        self.msi_data = msi_data
        self.read_timeout = read_timeout
        self.retries = retries
        self.completion_bytes = completion_bytes
        self._attach_ram(ram_base, bytearray(ram_bytes))
        # The longest frame either side sends, stuffing aside: a header, a
        # payload, ctrl, length, CRC and SOF.
        self._max_frame = MAX_HEADER_BYTES + config.max_payload + 6
        self._host_latency = host_latency
        self._ack_timeout = ack_timeout
        self._deframer = Deframer(max_payload=MAX_HEADER_BYTES + config.max_payload)
        self._queue = deque()         # TLP payloads waiting to be sent, in order
        self._outstanding = None      # [seq, frame bytes, time sent, sends]
        self._tx_seq = 0
        self._rx_expected = None      # any sequence bit is new until the first frame
        self._synced = False
        self._completions = {}        # tag -> Tlp
        self._narrow = bool(getattr(config, "narrow_host", 0))
        self._reg_read = None         # narrow: the offset of the register read waiting
        self._reg_value = None        # ... and its value once it came
        self._tag = 0
        self._interrupt = False
        #: what happened on the wire, for tests and diagnostics
        self.stats = dict.fromkeys(["frames_sent", "resent", "naks_sent", "naks_received",
                                    "acks_received", "repeats", "bad_tlps", "stray_writes",
                                    "interrupts", "dma_reads", "dma_writes"], 0)

    # -- the wire ------------------------------------------------------------

    def _timeout_for(self, frame):
        if self._ack_timeout is not None:
            return self._ack_timeout
        return 3 * frame_seconds(len(frame) + self._max_frame, self.baudrate) + self._host_latency

    def _service(self):
        now = self.transport.time()
        out = self._outstanding
        if out is None and self._queue:
            payload = self._queue.popleft()
            frame = encode_frame(Kind.TLP, self._tx_seq, payload)
            self._outstanding = out = [self._tx_seq, frame, None, 0]
        # >=, as `_pump` waits exactly until the timeout: with > a wake-up
        # right on it would neither resend nor wait, and spin in zero time.
        if out is not None and (out[2] is None or now - out[2] >= self._timeout_for(out[1])):
            if out[3] > self.retries:
                raise LinkError(f"the chip did not acknowledge a frame after {out[3]} sends "
                                f"over {self.transport!r}")
            self.transport.write(out[1])
            self.stats["frames_sent"] += 1
            self.stats["resent"] += out[3] > 0
            out[2], out[3] = now, out[3] + 1

    def _on_frame(self, frame):
        if frame is None:
            self.stats["naks_sent"] += 1
            self.transport.write(encode_frame(Kind.NAK))
            return
        if frame.kind == Kind.ACK:
            self.stats["acks_received"] += 1
            if self._outstanding is not None and frame.seq == self._outstanding[0]:
                self._outstanding = None
                self._tx_seq ^= 1
        elif frame.kind == Kind.NAK:
            self.stats["naks_received"] += 1
            if self._outstanding is not None:
                self._outstanding[2] = None     # send again now
        elif frame.kind == Kind.SYNC:
            self._synced = True
        elif frame.kind == Kind.TLP:
            self.transport.write(encode_frame(Kind.ACK, frame.seq))
            if self._rx_expected is not None and frame.seq != self._rx_expected:
                self.stats["repeats"] += 1      # our ACK was lost: the chip sent it again
                return
            self._rx_expected = frame.seq ^ 1
            self._on_tlp(frame.payload)

    async def _pump(self, until, timeout):
        """Serve the wire until ``until()`` is true (True) or `timeout` link
        seconds passed (False)."""
        deadline = self.transport.time() + max(timeout, 0)
        while True:
            self._service()
            if until():
                return True
            now = self.transport.time()
            wait = max(deadline - now, 0)
            if self._outstanding is not None:
                wait = min(wait, max(self._timeout_for(self._outstanding[1]) -
                                     (now - self._outstanding[2]), 0))
            # Even with no time left, the bytes already here are served.
            data = await self.transport.read(wait)
            for frame in self._deframer.feed(data):
                self._on_frame(frame)
            if not data and self.transport.time() >= deadline:
                self._service()
                return until()

    async def _sync(self):
        if self._synced:
            return
        for _ in range(self.retries + 1):
            self.transport.write(encode_frame(Kind.SYNC))
            if await self._pump(lambda: self._synced, self._timeout_for(b"")):
                self._tx_seq = 0
                return
        raise LinkError(f"no answer from a chip over {self.transport!r} (is the board "
                        f"programmed, and the port and baud rate right?)")

    async def _send(self, payload, timeout):
        """Queue a TLP and serve the wire until every queued frame is acknowledged."""
        await self._sync()
        self._queue.append(payload)
        idle = lambda: self._outstanding is None and not self._queue
        if not await self._pump(idle, timeout):
            raise LinkError(f"the chip took no frame for {timeout:g} s")

    # -- TLPs from the chip ------------------------------------------------

    def _on_tlp(self, raw):
        if self._narrow:
            self._on_message(raw)
            return
        try:
            tlp = parse(raw)
        except ValueError:
            self.stats["bad_tlps"] += 1
            return
        if tlp.is_completion:
            self._completions[tlp.tag] = tlp
        elif tlp.is_read:
            self.stats["dma_reads"] += 1
            self._answer_read(tlp)
        elif tlp.is_write:
            self._apply_write(tlp)

    def _answer_read(self, tlp):
        start, nbytes = byte_range(tlp)
        ids = dict(requester_id=tlp.requester_id, tag=tlp.tag)
        if not self._inside(start & ~3, (start & 3) + nbytes + 3 & ~3):
            self._queue.append(completion(**ids, status=CPL_UR, byte_count=nbytes & 0xFFF,
                                          lower_address=start))
            return
        end, pos = start + nbytes, start
        while pos < end:
            stop = min(end, (pos // 64) * 64 + self.completion_bytes)
            lo, hi = pos & ~3, (stop + 3) & ~3
            data = self._memory[lo - self._base:hi - self._base]
            self._queue.append(completion(**ids, status=CPL_SC, byte_count=(end - pos) & 0xFFF,
                                          lower_address=pos, data=data))
            pos = stop

    def _apply_write(self, tlp):
        data = tlp.payload
        if tlp.address == self.msi_address and len(data) == 4:
            if int.from_bytes(data, "little") == self.msi_data:
                self.stats["interrupts"] += 1
                self._interrupt = True
                return
        self.stats["dma_writes"] += 1
        if not self._inside(tlp.address, len(data)):
            self.stats["stray_writes"] += 1
            return
        words = len(data) // 4
        for i in range(len(data)):
            be = tlp.first_be if i < 4 else tlp.last_be if i >= 4 * (words - 1) else 0xF
            if be >> (i % 4) & 1:
                self._memory[tlp.address - self._base + i] = data[i]

    # -- messages from a narrow_host chip ----------------------------------

    def _on_message(self, raw):
        try:
            msg = parse_message(raw)
        except ValueError as error:
            self.stats["bad_tlps"] += 1
            raise LinkError(f"a malformed message from the chip over {self.transport!r}: {error}") from None
        if msg.kind == MessageKind.REG_VALUE:
            if self._reg_read is None or msg.address != self._reg_read or self._reg_value is not None:
                raise LinkError(f"the chip answered a register read of BAR0 offset 0x{msg.address:03x}, "
                                f"but the link waits for " + ("none" if self._reg_read is None else
                                                              f"0x{self._reg_read:03x}"))
            self._reg_value = msg.value
        elif msg.kind == MessageKind.READ_REQ:
            self.stats["dma_reads"] += 1
            self._answer_read_request(msg.address, msg.count)
        elif msg.kind == MessageKind.WRITE:
            self._apply_message_write(msg.address, msg.data)
        else:
            self.stats["bad_tlps"] += 1
            raise LinkError(f"a {msg.kind.name} message from the chip, which only the host sends")

    def _answer_read_request(self, start, nbytes):
        if nbytes == 0 or not self._inside(start, nbytes):
            self._queue.append(encode_message(MessageKind.READ_ERROR, start))
            return
        # Pieces of completion_bytes, each but the last whole words, in order.
        for pos in range(start, start + nbytes, self.completion_bytes):
            piece = self._memory[pos - self._base:min(pos + self.completion_bytes, start + nbytes) - self._base]
            self._queue.append(encode_message(MessageKind.READ_DATA, pos, data=bytes(piece)))

    def _apply_message_write(self, address, data):
        if address == self.msi_address and len(data) == 4 and \
                int.from_bytes(data, "little") == self.msi_data:
            self.stats["interrupts"] += 1
            self._interrupt = True
            return
        self.stats["dma_writes"] += 1
        if not self._inside(address, len(data)):
            self.stats["stray_writes"] += 1
            return
        self._memory[address - self._base:address - self._base + len(data)] = data

    # -- the Link contract -------------------------------------------------

    async def read32(self, offset):
        check_offset(offset)
        if self._narrow:
            return await self._read_register(offset)
        self._tag = tag = (self._tag + 1) % 32
        self._completions.pop(tag, None)
        deadline = self.transport.time() + self.read_timeout
        await self._send(memory_read(offset, 1, tag=tag), self.read_timeout)
        if not await self._pump(lambda: tag in self._completions, deadline - self.transport.time()):
            raise LinkError(f"no completion for the read of BAR0 offset 0x{offset:03x} "
                            f"within {self.read_timeout:g} s")
        cpl = self._completions.pop(tag)
        if cpl.status != CPL_SC or len(cpl.payload) != 4:
            raise LinkError(f"the read of BAR0 offset 0x{offset:03x} completed with status "
                            f"{cpl.status} and {len(cpl.payload)} bytes")
        return int.from_bytes(cpl.payload, "little")

    async def _read_register(self, offset):
        deadline = self.transport.time() + self.read_timeout
        self._reg_read, self._reg_value = offset, None
        try:
            await self._send(encode_message(MessageKind.REG_READ, offset), self.read_timeout)
            if not await self._pump(lambda: self._reg_value is not None, deadline - self.transport.time()):
                raise LinkError(f"no answer to the read of BAR0 offset 0x{offset:03x} "
                                f"within {self.read_timeout:g} s")
            return self._reg_value
        finally:
            self._reg_read = None

    async def write32(self, offset, value):
        check_offset(offset)
        check_value(value)
        if self._narrow:
            await self._send(encode_message(MessageKind.REG_WRITE, offset, value), self.read_timeout)
            return
        await self._send(memory_write(offset, value.to_bytes(4, "little")), self.read_timeout)

    async def wait_interrupt(self, timeout):
        await self._sync()
        await self._pump(lambda: self._interrupt, timeout)
        seen, self._interrupt = self._interrupt, False
        return seen

    async def sleep(self, seconds):
        await self._pump(lambda: False, seconds)

    def time(self):
        return self.transport.time()

    async def close(self):
        closer = getattr(self.transport, "close", None)
        if closer is not None:
            closer()
