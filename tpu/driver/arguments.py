"""Checks of the arguments the driver's public API takes.

Every public `Device`, `GoldenLink` and `tpu.driver.run` argument goes
through one of these before anything reaches the chip or the link, so a
wrong type or value is a `TypeError` or `ValueError` whose one-line message
names the call, the argument and the value, and nothing is ever cast: a float
is not an int, a bool is neither, a string is not a number.
"""

import math
import numbers

import numpy as np


__all__ = ["integer", "seconds", "positive_real", "flag", "show"]


def show(value):
    """`value` for a message: its repr (cut short) and, when that does not
    make it plain, its type."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    kind = type(value).__name__
    if isinstance(value, (bool, float, complex, np.generic)) or not text.startswith(kind):
        if kind not in text:
            text += f" ({kind})"
    return text


def _is_integer(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def integer(value, what, low=0, high=None):
    """`value` as an int in ``low..high`` (None: unbounded); `what` names it."""
    if not _is_integer(value):
        raise TypeError(f"{what} must be an int, not {show(value)}")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        if high is None:
            bounds = f">= {low}"
        elif low is None:
            bounds = f"<= {high}"
        else:
            bounds = f"in {low}..{high}"
        raise ValueError(f"{what} must be {bounds}, not {value}")
    return value


def positive_real(value, what, unit=""):
    """`value` as a float that is finite and > 0; `what` names it."""
    if not isinstance(value, numbers.Real) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what} must be a real number{unit}, not {show(value)}")
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"{what} must be a finite number{unit} > 0, not {value!r}")
    return number


def seconds(value, what):
    """A timeout or interval: a finite number of seconds > 0."""
    return positive_real(value, what, " of seconds")


def flag(value, what):
    """`value`, which must be a bool."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what} must be True or False, not {show(value)}")
    return bool(value)
