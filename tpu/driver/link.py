"""`Link`: what the driver needs from whatever connects it to a chip.

The driver (`tpu.driver.Device`) never touches a transport directly. Every
backend -- the Python golden model (`tpu.driver.golden.GoldenLink`), a cocotb
simulation of the RTL, a board behind a UART bridge -- implements this one
small interface, so the same driver code and the same checks run on all of
them.

The interface is asynchronous because two of its users are event loops that
the driver does not own: cocotb schedules simulation time in its own loop,
and plain asyncio drives the golden model. A blocking transport (a serial
port) implements the coroutines by doing the work inline or in a thread.

The contract
------------
Registers
    ``await read32(offset)`` and ``await write32(offset, value)`` access one
    32-bit BAR0 register (`tpu.host_registers`): `offset` is a byte offset,
    a multiple of 4 below ``BAR0_BYTES``; values are unsigned 32-bit ints.
    A write may be posted (return before the chip has seen it), but reads and
    writes reach the chip in the order they were issued, and a read returns
    only after every earlier write has taken effect -- as on PCIe, where a
    non-posted read pushes earlier posted writes ahead of it. A backend
    raises `ValueError` for an offset that is not 4-byte aligned or not
    inside BAR0, and for a value outside ``0 .. 2**32 - 1`` (`check_offset`,
    `check_value`).

    ``await read64(offset)`` and ``await write64(offset, value)`` access the
    two registers at `offset` and ``offset + 4`` (the first in the low 32
    bits), as if by ``read32`` (or ``write32``) of `offset` then of ``offset +
    4``. The default does exactly that; a transport whose chip serves
    two-word accesses (a PCIe chip without ``serial_host``) does it in one
    request, one round trip instead of two. The chip reads or writes the two
    words in that order either way, so a counter's ``_HI`` then the next
    counter's ``_LO`` is the same pair of reads.

Host memory
    The memory the chip reaches by DMA. ``alloc(nbytes, align)`` reserves
    `nbytes` bytes at an address that is a multiple of `align` (a power of
    two) and returns the address; the bytes start as zeros. Allocations are
    never freed by the link: the driver takes one large arena and manages it
    itself (`Device.alloc`). ``write_memory(addr, data)`` and
    ``read_memory(addr, n)`` are plain synchronous methods: on a board they
    copy to and from a pinned buffer; a backend that must move bytes over a
    slow transport does so there, before returning. Accesses outside memory
    the link allocated are a `ValueError`. Addresses are 64-bit; the chip uses
    them as they are (no IOMMU translation is modelled).

Interrupts
    The chip signals the host with an MSI: a 4-byte memory write of MSI_DATA
    to MSI_ADDR. The link provides the pair it watches, ``msi_address`` and
    ``msi_data``; the driver programs them into the chip. ``await
    wait_interrupt(timeout)`` returns True as soon as at least one such write
    has arrived since the previous call returned (consuming all of them), or
    False once `timeout` seconds of link time have passed without one;
    ``timeout=0`` only checks. A link without interrupts sets ``msi_address``
    to None and returns False from `wait_interrupt` after sleeping; the driver
    then polls STATUS. Interrupts carry no cause: the driver reads IRQ_STATUS.

Time
    ``time()`` is the link's clock in seconds (simulation time for a
    simulator, a monotonic clock for hardware) and ``await sleep(seconds)``
    lets that much of it pass. Every timeout the driver applies is measured
    with `time`, so a simulation never hangs on wall-clock time and a board
    never waits on simulated time. ``clock_hz`` is the chip's clock, so
    callers can turn cycle estimates into link time.

Identity
    ``backend`` names the backend (``"golden"``, ``"icarus"``, ...), for
    messages and test ids.

A board backend (UART bridge)
-----------------------------
Implement `read32`/`write32` as bridge transactions (one request, one
answer; writes may be acknowledged or fire-and-forget as long as ordering
holds), `alloc`/`read_memory`/`write_memory` over the board's DMA-able
buffer (or its host-memory emulation in FPGA RAM, with the bridge moving
the bytes), `wait_interrupt` by polling the bridge for the MSI write (or for
the chip's ``irq_pending`` line) until the timeout, `sleep` with
``asyncio.sleep`` and `time` with ``time.monotonic``.
"""

import abc


__all__ = ["Link", "RamLink", "check_offset", "check_value", "check_pair", "check_value64"]


def check_offset(offset, bar_bytes=4096):
    """`offset` as an int, or `ValueError` if it is not a register offset."""
    if not isinstance(offset, int) or isinstance(offset, bool):
        raise TypeError(f"a BAR0 offset must be an int, not {offset!r}")
    if offset % 4 or not 0 <= offset < bar_bytes:
        raise ValueError(f"BAR0 offset 0x{offset:x} is not a register offset: registers are "
                         f"32-bit words at multiples of 4 below 0x{bar_bytes:x}")
    return offset


def check_value(value, bits=32):
    """`value` as an int, or `ValueError` if it does not fit `bits` bits (a
    register's 32, or a two-register access's 64)."""
    what = "a register value" if bits == 32 else "a two-register value"
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not {value!r}")
    if not 0 <= value < 1 << bits:
        raise ValueError(f"{what[2:]} {value:#x} does not fit {bits} bits")
    return value


def check_pair(offset, bar_bytes=4096):
    """`offset` as an int, or `ValueError` if it and ``offset + 4`` are not
    both register offsets (`read64`, `write64`)."""
    check_offset(offset, bar_bytes)
    if offset + 4 >= bar_bytes:
        raise ValueError(f"BAR0 offset 0x{offset:x} is the last register: a two-register access "
                         f"needs 0x{offset + 4:x} too, and BAR0 ends at 0x{bar_bytes:x}")
    return offset


def check_value64(value):
    """`value` as an int, or `ValueError` if it does not fit 64 bits."""
    return check_value(value, 64)


class Link(abc.ABC):
    """The transport between the driver and one chip; see the module docstring.

    Attributes
    ----------
    backend : str
        The backend's name.
    msi_address : int or None
        The host address whose 4-byte write of `msi_data` is an interrupt.
    msi_data : int
    clock_hz : float
        The chip's clock frequency.
    """

    backend = "abstract"
    msi_address = None
    msi_data = 0
    clock_hz = 100e6

    # BAR0 -----------------------------------------------------------------

    @abc.abstractmethod
    async def read32(self, offset):
        """The 32-bit register at byte `offset` of BAR0."""

    @abc.abstractmethod
    async def write32(self, offset, value):
        """Write the 32-bit register at byte `offset` of BAR0."""

    async def read64(self, offset):
        """The registers at byte `offset` (bits 31:0) and ``offset + 4`` (63:32)."""
        check_pair(offset, self._bar_bytes)
        low = await self.read32(offset)
        return await self.read32(offset + 4) << 32 | low

    async def write64(self, offset, value):
        """Write bits 31:0 of `value` to the register at `offset`, then bits
        63:32 to the one at ``offset + 4``."""
        check_pair(offset, self._bar_bytes)
        check_value64(value)
        await self.write32(offset, value & 0xFFFF_FFFF)
        await self.write32(offset + 4, value >> 32)

    #: BAR0's size for `read64` and `write64`'s checks
    _bar_bytes = 4096

    # Host memory ------------------------------------------------------------

    @abc.abstractmethod
    def alloc(self, nbytes, align=64):
        """Reserve `nbytes` zeroed bytes of DMA-able host memory; their address."""

    @abc.abstractmethod
    def write_memory(self, addr, data):
        """Copy `data` (bytes-like) to host memory at `addr`."""

    @abc.abstractmethod
    def read_memory(self, addr, n):
        """`n` bytes of host memory from `addr`, as `bytes`."""

    # Interrupts and time ----------------------------------------------------

    @abc.abstractmethod
    async def wait_interrupt(self, timeout):
        """True once an MSI has arrived since the last call, False after `timeout` seconds."""

    @abc.abstractmethod
    async def sleep(self, seconds):
        """Let `seconds` of link time pass."""

    @abc.abstractmethod
    def time(self):
        """The link's clock, in seconds."""

    async def close(self):
        """Release the transport. The default does nothing."""

    def __repr__(self):
        return f"<{type(self).__name__} backend={self.backend!r}>"


class RamLink(Link):
    """A `Link` whose host memory is one bytearray at a base address: the
    memory half of the contract (`alloc`, `read_memory`, `write_memory`,
    `memory_range`), for links that keep the host's RAM themselves. A
    subclass calls `_attach_ram` before use."""

    def _attach_ram(self, base, memory, first_free=None):
        """Host RAM `memory` (a bytearray) at address `base`; `alloc` hands
        out addresses from `first_free` (default `base`) up."""
        self._base = base
        self._memory = memory
        self._next = base if first_free is None else first_free

    def _inside(self, addr, nbytes):
        return self._base <= addr and addr + nbytes <= self._base + len(self._memory)

    def _offset(self, addr, nbytes):
        if not self._inside(addr, nbytes):
            raise ValueError(f"host bytes 0x{addr:x} + {nbytes} are outside the link's RAM "
                             f"(0x{self._base:x} + {len(self._memory)})")
        return addr - self._base

    def alloc(self, nbytes, align=64):
        addr = -(-self._next // align) * align
        if addr + nbytes > self._base + len(self._memory):
            raise MemoryError(f"host memory exhausted: {nbytes} bytes asked, "
                              f"{self._base + len(self._memory) - addr} left")
        self._next = addr + nbytes
        return addr

    def write_memory(self, addr, data):
        offset = self._offset(addr, len(data))
        self._memory[offset:offset + len(data)] = bytes(data)

    def read_memory(self, addr, n):
        offset = self._offset(addr, n)
        return bytes(self._memory[offset:offset + n])

    @property
    def memory_range(self):
        return self._base, len(self._memory)
