"""The driver's exceptions. Every one derives from `TpuError`."""

from ..host_registers import HostError
from ..isa import Fault


__all__ = ["TpuError", "ChipFault", "ConfigMismatch", "DeviceTimeout", "JobAborted", "NotATpu",
           "HOST_ERROR_MEANINGS", "error_code", "describe_error"]


#: What each `HostError` means, for messages (the register table documents
#: them as comments; this is the same text as data).
HOST_ERROR_MEANINGS = {
    "FETCH_RANGE": "PROG_ADDR/PROG_LEN span host bytes outside the DMA windows",
    "WFILL_RANGE": "WFILL_ADDR/WFILL_TILES span host bytes outside the DMA windows, "
                   "or WFILL_TILE/WFILL_TILES run past weight memory",
    "CPL_STATUS": "a DMA read came back with a completion status other than SC",
    "CPL_UNEXPECTED": "a completion arrived whose tag has no read outstanding",
    "CPL_MALFORMED": "a completion's length or byte count did not fit its read",
    "CPL_TIMEOUT": "a DMA read had no completion for cpl_timeout cycles",
}


def error_code(value):
    """ERROR_CODE `value` as a `Fault` (< 16) or `HostError` member, or the
    plain int when neither enumeration has it."""
    for enum in (Fault, HostError):
        try:
            return enum(value)
        except ValueError:
            pass
    return int(value)


def describe_error(code):
    """``"NAME (value): meaning"`` for an ERROR_CODE."""
    code = error_code(code)
    if isinstance(code, Fault):
        return f"{code.name} ({int(code)}): {code.meaning}"
    if isinstance(code, HostError):
        return f"{code.name} ({int(code)}): {HOST_ERROR_MEANINGS.get(code.name, 'a host-interface error')}"
    return f"unknown error code {code} (neither a tpu.isa.Fault nor a HostError)"


class TpuError(Exception):
    """Base of every error the driver raises."""


class ChipFault(TpuError):
    """The chip stopped with an error (STATUS.ERROR).

    Attributes
    ----------
    code : tpu.isa.Fault, tpu.host_registers.HostError or int
        ERROR_CODE.
    index : int or None
        FAULT_INDEX: the faulting instruction's index in its program, or None
        for an error no instruction caused (a host-interface error).
    instruction : str or None
        The faulting instruction as assembly, when the driver knows the program.
    counters : dict or None
        The eight performance counters as the chip stopped (read before the
        driver aborted it: ABORT resets them), for a program's job; None for
        a weight fill's.
    """

    def __init__(self, code, index=None, instruction=None, counters=None):
        self.code = error_code(code)
        self.index = index
        self.instruction = instruction
        self.counters = counters
        name = self.code.name if hasattr(self.code, "name") else f"error {self.code}"
        where = f" at instruction {index}" if index is not None else ""
        meaning = describe_error(self.code).split(": ", 1)[-1]
        text = f"chip stopped with {name} ({int(self.code)}){where}: {meaning}"
        if instruction is not None:
            text += f" [instruction {index}: {instruction}]"
        super().__init__(text)


class ConfigMismatch(TpuError):
    """The chip reports a configuration other than the driver's `TPUConfig`.

    Attributes
    ----------
    register : str
        The first register that differs.
    chip, expected : int
        What the chip reports and what the driver's configuration gives.
    mismatches : list of (register, chip, expected)
        Every register that differs.
    """

    def __init__(self, mismatches, explain=None):
        self.mismatches = list(mismatches)
        self.register, self.chip, self.expected = self.mismatches[0]
        parts = []
        for register, chip, expected in self.mismatches:
            detail = f"{register} reads 0x{chip:x} ({chip}), the driver's configuration gives 0x{expected:x} ({expected})"
            if explain:
                detail += explain(register, chip, expected)
            parts.append(detail)
        super().__init__("the chip is not the one the driver was configured for: " + "; ".join(parts))


class DeviceTimeout(TpuError):
    """The chip did not finish within the time allowed (measured in link time).

    Attributes
    ----------
    counters : dict or None
        For a program's job, the performance counters read just before the
        driver aborted the chip; the core was still running, so they are read
        one after another (``non_matrix`` read later than ``cycles``).
    """

    def __init__(self, message, counters=None):
        self.counters = counters
        super().__init__(message)


class JobAborted(TpuError):
    """The job was stopped before it ended: `Device.abort`, `Device.reset` or
    `Device.close` ran (in this task or another) while it was in flight, so
    its result is lost. The chip is idle.

    Attributes
    ----------
    by : str
        ``"abort"``, ``"reset"`` or ``"close"``: what stopped it.
    """

    def __init__(self, kind, by):
        self.kind = kind
        self.by = by
        super().__init__(f"the {kind} job was stopped by {by}() before it ended: its result is "
                         f"lost (the chip is idle)")


class NotATpu(TpuError):
    """BAR0's ID register does not identify this chip."""
