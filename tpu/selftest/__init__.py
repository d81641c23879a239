"""The chip's self-test: the checks of `tpu.selftest.checks` run through
`tpu.driver` on any backend (the golden model, the RTL under Icarus or
Verilator, a board over its serial port), as ``tpu selftest`` does.

`selftest(backend, config, names)` runs each check on a freshly opened
device and returns one `Outcome` a check: passed, failed (with the first
line of what went wrong) or not for this configuration (with the reason).
"""

import time
from dataclasses import dataclass

from .checks import CHECKS, why_not


__all__ = ["CHECKS", "Outcome", "selftest", "why_not"]


@dataclass(frozen=True)
class Outcome:
    """What one check gave: `kind` is "pass", "fail" or "skip" (not for
    this configuration: `message` says why)."""
    name: str
    kind: str
    seconds: float = 0.0
    message: str = ""


def selftest(backend, config, names=None, *, log=None, **options):
    """Run the checks `names` (default: all of `CHECKS`, in order) on
    `backend` with `config`, each on a freshly opened device (``options``
    go to `tpu.driver.run`); `log` (if given) is called with each `Outcome`
    as it comes. Returns the outcomes."""
    from ..driver import run
    names = list(CHECKS) if names is None else list(names)
    unknown = [name for name in names if name not in CHECKS]
    if unknown:
        raise ValueError(f"unknown check {', '.join(unknown)}; the checks are {', '.join(CHECKS)}")
    outcomes = []
    for name in names:
        reason = why_not(name, config)
        if reason:
            outcome = Outcome(name, "skip", message=reason)
        else:
            started = time.perf_counter()
            try:
                run(CHECKS[name], backend=backend, config=config, **options)
            except Exception as error:      # noqa: BLE001 -- a failing check is an outcome
                text = str(error).strip().splitlines()
                outcome = Outcome(name, "fail", time.perf_counter() - started,
                                  f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": "))
            else:
                outcome = Outcome(name, "pass", time.perf_counter() - started)
        outcomes.append(outcome)
        if log:
            log(outcome)
    return outcomes
