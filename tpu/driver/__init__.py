"""The host driver: `Device` over a `Link`, and the golden backend.

``tpu.driver.run(main, backend="golden", config=TPUConfig())`` runs the
coroutine function ``main(device)`` on a freshly opened `Device` of the
named backend and returns what it returns. A backend is a factory
``factory(main, config, **options) -> main's result`` that builds the link,
opens the device and drives its event loop to the end; the golden backend
uses plain asyncio. The simulation backends "icarus" and "verilator"
run `main` inside a cocotb simulation of the whole chip, whose event loop
cocotb owns; `main` must then be a module-level function, and what it
returns must pickle. They are not the driver's: the simulation package
declares them as entry points of the group ``tpu.driver.backends``
(pyproject.toml), found by name when first asked for, so the driver never
imports the simulation package (nor Amaranth's simulator, nor cocotb).
The "serial" backend
(`tpu.driver.serial_link`) talks to a chip on a board over a UART:
``run(main, backend="serial", port="/dev/ttyUSB1", clock_hz=12e6)``.
"""

import asyncio
from collections.abc import MutableMapping
from importlib.metadata import entry_points

from ..config import TPUConfig
from .device import Device, DeviceStatus, HostBuffer, Job, RunResult
from .errors import ChipFault, ConfigMismatch, DeviceTimeout, JobAborted, NotATpu, TpuError
from .link import Link


__all__ = ["run", "register_backend", "BACKENDS", "Device", "DeviceStatus", "HostBuffer", "Job",
           "RunResult", "Link", "GoldenLink", "TpuError", "ChipFault", "ConfigMismatch",
           "DeviceTimeout", "JobAborted", "NotATpu"]


#: The entry-point group other packages declare driver backends in.
BACKEND_GROUP = "tpu.driver.backends"


class _Backends(MutableMapping):
    """Backend name -> factory(main, config, **options) -> main's result.

    Holds the backends registered in this process and, by name, those
    declared as entry points of `BACKEND_GROUP`; an entry point is loaded
    (its module imported) only when its factory is asked for, so listing or
    testing a name imports nothing."""

    def __init__(self):
        self._registered = {}
        self._declared = None

    def _entry_points(self):
        if self._declared is None:
            self._declared = {point.name: point for point in entry_points(group=BACKEND_GROUP)}
        return self._declared

    def __setitem__(self, name, factory):
        self._registered[name] = factory

    def __delitem__(self, name):
        del self._registered[name]

    def __getitem__(self, name):
        if name not in self._registered:
            point = self._entry_points()[name]
            self._registered[name] = point.load()
        return self._registered[name]

    def __contains__(self, name):
        return name in self._registered or name in self._entry_points()

    def __iter__(self):
        return iter(sorted({*self._registered, *self._entry_points()}))

    def __len__(self):
        return len({*self._registered, *self._entry_points()})


#: backend name -> factory(main, config, **options) -> the result of main(device)
BACKENDS = _Backends()


def __getattr__(name):
    # GoldenLink is imported on first use: its golden model imports the RTL's
    # constants and with them Amaranth, which a simulation process (where
    # the driver runs against the RTL itself) would otherwise load at every start.
    if name == "GoldenLink":
        from .golden import GoldenLink
        return GoldenLink
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register_backend(name, factory):
    """Make `run(main, backend=name)` call ``factory(main, config, **options)``."""
    if not callable(factory):
        raise TypeError(f"the factory of backend {name!r} is not callable: {factory!r}")
    BACKENDS[name] = factory


def run(main, backend="golden", config=TPUConfig(), **options):
    """Run ``await main(device)`` on a `Device` of `backend`; its result.

    `options` go to the backend (for "golden": `GoldenLink` parameters, and
    ``open``: a dict of `Device.open` keywords)."""
    if not callable(main):
        raise TypeError(f"run: main must be an async function main(device), not {main!r}")
    if not isinstance(config, TPUConfig):
        raise TypeError(f"run: config must be a TPUConfig, not {config!r}")
    if not isinstance(backend, str):
        raise TypeError(f"run: backend must be a backend name (str), not {backend!r}")
    try:
        factory = BACKENDS[backend]
    except KeyError:
        raise ValueError(f"unknown backend {backend!r}; registered: "
                         f"{', '.join(BACKENDS) or 'none'} (installed packages declare more as "
                         f"entry points of {BACKEND_GROUP!r}; reinstall one whose are "
                         f"missing)") from None
    return factory(main, config, **options)


def _golden(main, config, *, open=None, **link_options):
    if open is not None and not isinstance(open, dict):
        raise TypeError(f"the golden backend's open option must be a dict of Device.open "
                        f"keywords, not {open!r}")
    from .golden import GoldenLink

    async def session():
        link = GoldenLink(config, **link_options)
        device = await Device.open(link, config, **(open or {}))
        try:
            return await main(device)
        finally:
            await link.close()
    return asyncio.run(session())


register_backend("golden", _golden)


def _serial(main, config, *, port, baudrate=115200, open=None, **link_options):
    # Imported on use: pyserial is needed only to talk to a board.
    from .serial_link import SerialLink

    async def session():
        link = SerialLink(port, config, baudrate=baudrate, **link_options)
        try:
            device = await Device.open(link, config, **(open or {}))
            return await main(device)
        finally:
            await link.close()
    return asyncio.run(session())


register_backend("serial", _serial)
