"""Device specifications: which chips a pool opens.

``parse_devices("golden:4")`` -> four golden devices; ``"verilator:2"``,
``"icarus:1"``; ``"serial:/dev/ttyUSB1,/dev/ttyUSB3"`` -> a board on each
port; ``"ray:golden:4"`` (any of these after ``ray:``): each device in a
Ray actor; ``"golden-process:2"``: golden models each in a process of its own
(they then use more than one core); several groups joined by ``+``
(``"golden:2+verilator:1"``).
"""

from dataclasses import dataclass, field


__all__ = ["DeviceSpec", "parse_devices", "SIMULATORS", "BACKEND_KINDS"]

#: backends whose chip is an RTL simulation (CPU-bound: one process each)
SIMULATORS = ("icarus", "verilator")
#: every backend a pool opens from a text specification
BACKEND_KINDS = ("golden", "golden-process", *SIMULATORS, "serial")


@dataclass(frozen=True)
class DeviceSpec:
    """One device of a pool.

    backend : a `tpu.driver` backend name
    options : keyword options of `tpu.driver.run` for it (``port=`` for serial,
        ``seed=``/``host_latency=`` for simulators, `GoldenLink` parameters)
    process : run the device in a process of its own (always for simulators;
        for golden, a choice: in-process by default)
    ray : None, or a dict of Ray actor options (``{}`` for the defaults): the
        device runs in a Ray actor (`tpu.runtime.ray_devices`)
    """
    backend: str
    options: dict = field(default_factory=dict, compare=False)
    process: bool | None = None
    ray: dict | None = field(default=None, compare=False)

    def __post_init__(self):
        if not isinstance(self.backend, str) or not self.backend:
            raise TypeError(f"DeviceSpec: backend must be a backend name, not {self.backend!r}")
        if not isinstance(self.options, dict):
            raise TypeError(f"DeviceSpec: options must be a dict, not {self.options!r}")
        if self.process is None:
            object.__setattr__(self, "process", self.backend in SIMULATORS)
        elif self.backend in SIMULATORS and not self.process:
            raise ValueError(f"DeviceSpec: a {self.backend} simulation always runs in a "
                             f"process of its own")

    @property
    def label(self):
        port = self.options.get("port")
        prefix = "ray:" if self.ray is not None else ""
        if port:
            return f"{prefix}{self.backend}:{port}"
        name = "golden-process" if self.backend == "golden" and self.process else self.backend
        return prefix + name


def parse_devices(text):
    """A list of `DeviceSpec` from ``golden:4``, ``verilator:2``,
    ``serial:/dev/ttyUSB1,/dev/ttyUSB3`` or groups joined by ``+``; a
    `ValueError` naming the part that is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"devices: expected e.g. golden:4, verilator:2 or "
                         f"serial:/dev/ttyUSB1,/dev/ttyUSB3, not {text!r}")
    specs = []
    for group in text.split("+"):
        group = group.strip()
        if group.startswith("ray:"):
            specs += [DeviceSpec(s.backend, s.options, s.process, ray={})
                      for s in parse_devices(group[4:])]
            continue
        backend, _, rest = group.partition(":")
        if backend not in BACKEND_KINDS:
            raise ValueError(f"devices: unknown backend {backend!r} in {group!r}; "
                             f"known: {', '.join(BACKEND_KINDS)}")
        if backend == "serial":
            ports = [p.strip() for p in rest.split(",") if p.strip()]
            if not ports:
                raise ValueError(f"devices: {group!r} names no serial port "
                                 f"(serial:/dev/ttyUSB1,/dev/ttyUSB3)")
            specs += [DeviceSpec("serial", {"port": p}) for p in ports]
            continue
        count = rest.strip() or "1"
        if not count.isdigit() or int(count) < 1:
            raise ValueError(f"devices: the count in {group!r} must be a whole number >= 1, "
                             f"not {count!r}")
        if backend == "golden-process":
            specs += [DeviceSpec("golden", process=True) for _ in range(int(count))]
        else:
            specs += [DeviceSpec(backend) for _ in range(int(count))]
    return specs
