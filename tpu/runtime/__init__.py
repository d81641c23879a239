"""The runtime: several chips serving one queue of jobs.

`DevicePool` opens devices of any backends once and keeps them: the golden
model in this process, each RTL simulation in a process of its own, boards
by serial port. It spreads a batch over the devices and runs independent
jobs at once; a device that faults, hangs or dies is reset or restarted and
its job retried once elsewhere. `InferenceSession(model, devices=...)` and
`tpu serve` use it.
"""

from .pool import DEFAULT_TIMEOUTS, DevicePool, DeviceStats, PoolError
from .specs import DeviceSpec, parse_devices


__all__ = ["DevicePool", "DeviceSpec", "DeviceStats", "PoolError", "parse_devices",
           "DEFAULT_TIMEOUTS"]
