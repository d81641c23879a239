"""The per-layer performance report of a model run on the chip.

`build_report(graph, config, profile, samples)` sums the back end's profile
(per chunk, per program part: the chip's eight counters and the cycle
model's estimate) over the chunks of a run and turns it into a `Report`:
one row per chip layer (program part) or host step, with

* ``cycles`` (the chip's ``cycles`` counter) and ``estimate`` (the cycle
  model's, `tpu.models.cycle_model.estimate_cycles`);
* ``macs``: the model's multiply-accumulates in the layer (the IR's
  ``K x N`` per sample of a Dense, ``OH x OW x KH x KW x Cin x Cout`` of a
  Conv2D, ``OH x OW x KH x KW x Cout`` of a depthwise one, whose
  block-diagonal weights' zero taps are no work: `conv_macs_per_pixel`), so
  that padding lanes and identity layers do not count as work;
* ``performed``: the multiply-accumulates the array performed (``rows x
  cols`` for every row that entered it: the chip's ``useful_macs``
  counter, padding lanes and structural zeros included), and ``skipped``:
  the weight tiles left out because they are all zero, with
  ``skipped_macs`` the model's multiply-accumulates in them (a zero weight
  times anything: no cell did them, and they are not counted as done);
* ``utilisation`` = done / (cycles x rows x cols) and ``active_utilisation``
  = done / (mxu_active x rows x cols), where done = the model's MACs less
  the skipped ones, at most the performed ones: how much of the array did
  model work over the whole layer, and while rows were entering it. Neither
  exceeds 100%;
* TPU v1's counter breakdown (Table 3): ``mxu_active``, ``weight_stall``,
  ``weight_shift``, ``non_matrix``, ``raw_stall``, ``host_stall``.

Totals add the rows; inferences per second are ``samples / (total cycles /
clock)`` at a stated chip clock (default 100 MHz): the programs' cycles only.
Host steps and the weight fills before parts (``weight_tiles_loaded``, in
the JSON) are not timed.

A host step's work is counted in element operations, ``host_ops``: the
elements it reads (an ADD reads two tensors, a softmax one). Its ``share``
of the work is ``host_ops / (MACs + all host_ops)`` (`Report.host_operators`):
one element operation weighs as one multiply-accumulate.
"""

from dataclasses import asdict, dataclass, field

import numpy as np

from ..host_registers import COUNTER_NAMES
from . import ir


__all__ = ["LayerRow", "Report", "build_report", "layer_macs", "conv_macs_per_pixel",
           "host_layer_ops", "BREAKDOWN", "DEFAULT_CLOCK_HZ"]

DEFAULT_CLOCK_HZ = 100e6
#: TPU v1's breakdown of the cycles, in the chip's counter names
BREAKDOWN = ("mxu_active", "weight_stall", "weight_shift", "non_matrix", "raw_stall", "host_stall")
_HEADINGS = {"mxu_active": "active", "weight_stall": "w.stall", "weight_shift": "w.shift",
             "non_matrix": "non-mx", "raw_stall": "RAW", "host_stall": "host"}


def layer_macs(graph, layer):
    """The model's multiply-accumulates of `layer` for one sample."""
    if isinstance(layer, ir.Dense):
        return int(layer.weight.shape[0] * layer.weight.shape[1])
    if isinstance(layer, ir.Conv2D):
        out = graph.tensor(layer.output).shape
        pixels = int(np.prod(out[:-1])) if len(out) == 3 else 1
        return pixels * conv_macs_per_pixel(layer.weight)
    return 0


def conv_macs_per_pixel(weight):
    """Multiply-accumulates per output pixel of a convolution with `weight`
    ``(KH, KW, Cin, Cout)``: ``KH x KW x Cin x Cout``, or ``KH x KW x Cout``
    for a depthwise convolution, whose weights (block-diagonal, as the
    TFLite front end imports DEPTHWISE_CONV_2D) are zero except
    ``weight[:, :, c, c*m + j]``: its other taps multiply by a structural
    zero and are not the model's work."""
    kh, kw, cin, cout = weight.shape
    if cin > 1 and cout % cin == 0:
        diagonal = weight[:, :, np.arange(cout) // (cout // cin), np.arange(cout)]
        if np.count_nonzero(weight) == np.count_nonzero(diagonal):
            return kh * kw * cout
    return kh * kw * cin * cout


def host_layer_ops(graph, layer):
    """Element operations of host `layer` for one sample: the elements it reads."""
    return sum(int(np.prod(graph.tensor(name).shape)) for name in layer.inputs)


def host_op_name(layer):
    """What a host layer computes, for the report: a HostOp's ``op``, else the
    layer's type (``Add``)."""
    return getattr(layer, "op", None) or type(layer).__name__


@dataclass
class LayerRow:
    """One program part (chip layer) or host step, summed over a run's chunks."""
    name: str
    layers: list
    where: str                      #: "chip" or "host"
    cycles: int = 0
    estimate: int = 0
    macs: int = 0
    counters: dict = field(default_factory=dict)
    weight_tiles_loaded: int = 0    #: tiles filled into weight memory before the part
    rows: int = 1
    cols: int = 1
    op: str = ""                    #: host steps: what the host computes
    host_ops: int = 0               #: host steps: element operations (`host_layer_ops`)
    performed: int = 0              #: MACs the array performed (rows x cols a row)
    skipped: int = 0                #: all-zero weight tiles left out (per run of the part)
    skipped_macs: int = 0           #: the model's MACs in those tiles

    @property
    def done_macs(self):
        """The model's MACs the array did: not those of skipped tiles, and
        never more than it performed."""
        done = max(self.macs - self.skipped_macs, 0)
        return min(done, self.performed) if self.performed else done

    @property
    def utilisation(self):
        return self.done_macs / (self.cycles * self.rows * self.cols) if self.cycles else 0.0

    @property
    def active_utilisation(self):
        active = self.counters.get("mxu_active", 0)
        return self.done_macs / (active * self.rows * self.cols) if active else 0.0

    def to_dict(self):
        d = asdict(self)
        d.pop("rows"), d.pop("cols")
        d["done_macs"] = self.done_macs
        d["utilisation"] = self.utilisation
        d["active_utilisation"] = self.active_utilisation
        return d


def _get(part, key, default=None):
    if isinstance(part, dict):
        return part.get(key, default)
    return getattr(part, key, default)


def _estimate_cycles(value):
    if isinstance(value, dict):
        return int(value.get("cycles", 0))
    return int(value or 0)


@dataclass
class Report:
    """Rows, totals and throughput of one run."""
    rows: list
    samples: int
    config: object
    clock_hz: float = DEFAULT_CLOCK_HZ

    @property
    def total(self):
        rows, cols = self.config.rows, self.config.cols
        total = LayerRow("total", [], "", rows=rows, cols=cols)
        for row in self.rows:
            total.cycles += row.cycles
            total.estimate += row.estimate
            total.macs += row.macs
            total.performed += row.performed
            total.skipped += row.skipped
            total.skipped_macs += row.skipped_macs
            total.weight_tiles_loaded += row.weight_tiles_loaded
            for name, value in row.counters.items():
                total.counters[name] = total.counters.get(name, 0) + value
        return total

    @property
    def cycles_per_inference(self):
        return self.total.cycles / self.samples if self.samples else 0.0

    @property
    def inferences_per_second(self):
        cycles = self.total.cycles
        return self.samples * self.clock_hz / cycles if cycles else float("inf")

    def host_operators(self):
        """The host steps with their share of the work: dicts of ``name``, ``op``,
        ``ops`` (element operations over the run) and ``share`` (of MACs plus
        host element operations)."""
        host = [row for row in self.rows if row.where == "host"]
        work = sum(row.macs for row in self.rows) + sum(row.host_ops for row in host)
        return [dict(name=row.name, op=row.op, ops=row.host_ops,
                     share=row.host_ops / work if work else 0.0) for row in host]

    def to_json(self):
        """A JSON-ready dict: rows, totals, throughput and how they were measured."""
        total = self.total
        return {
            "host_operators": self.host_operators(),
            "samples": self.samples,
            "array": [self.config.rows, self.config.cols],
            "clock_hz": self.clock_hz,
            "layers": [row.to_dict() for row in self.rows],
            "total": total.to_dict(),
            "cycles_per_inference": self.cycles_per_inference,
            "inferences_per_second": self.inferences_per_second,
        }

    def format_table(self):
        """The per-layer table as text."""
        head = ["layer", "where", "cycles", "estimate", "MACs", "performed", "skipped", "util",
                "util(act)",
                *(_HEADINGS[n] for n in BREAKDOWN)]
        lines = []
        shares = {h["name"]: h["share"] for h in self.host_operators()}

        def cells(row):
            where = row.where
            if where == "host":
                return [row.name, where, "-", "-", f"{row.host_ops} ops", "-", "-",
                        f"{100 * shares[row.name]:.2f}%", "-", *("-" for _ in BREAKDOWN)]
            return [row.name, where, str(row.cycles), str(row.estimate), str(row.macs),
                    str(row.performed), str(row.skipped),
                    f"{100 * row.utilisation:.1f}%", f"{100 * row.active_utilisation:.1f}%",
                    *(str(row.counters.get(n, 0)) for n in BREAKDOWN)]
        body = [cells(row) for row in self.rows]
        body.append(cells(self.total))
        widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
        fmt = lambda r: "  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                                  for i, (c, w) in enumerate(zip(r, widths))).rstrip()
        lines.append(fmt(head))
        lines.extend(fmt(r) for r in body[:-1])
        lines.append("-" * len(lines[0]))
        lines.append(fmt(body[-1]))
        lines.append(f"{self.samples} inferences on the {self.config.rows}x{self.config.cols} "
                     f"array: {self.cycles_per_inference:.0f} cycles each, "
                     f"{self.inferences_per_second:,.0f} inferences/s at "
                     f"{self.clock_hz / 1e6:g} MHz (programs only: host steps and weight fills "
                     f"not timed)")
        host = self.host_operators()
        if host:
            lines[-1] += "; host operators: " + ", ".join(
                f"{h['name']} ({h['op']}) {100 * h['share']:.2f}% of the work" for h in host)
        return "\n".join(lines)


def build_report(graph, config, profile, samples, clock_hz=DEFAULT_CLOCK_HZ, batch=None):
    """A `Report` of `profile`: per chunk of `batch` samples, a list of parts
    as the back end's `execute` returns them (``name``, ``kind`` "chip" or
    "host", ``layers``: IR layer names, ``counters``: the chip's,
    ``estimated_cycles``, ``useful_macs``: the model's MACs of the chunk).
    Only `samples` of the chunks' samples are real: the padding of the last
    chunk costs cycles but its MACs are not useful. Without ``useful_macs``
    the MACs come from `graph`'s layers."""
    if not (clock_hz > 0):
        raise ValueError(f"the clock must be a positive frequency, not {clock_hz!r}")
    by_name = {layer.name: layer for layer in graph.layers}
    chunks = list(profile or [])
    real = samples / (batch * len(chunks)) if batch and chunks else 1.0
    per_chunk = batch * real if batch and chunks else samples     # real samples in a chunk
    rows = {}
    for chunk in chunks:
        for part in chunk:
            name = _get(part, "name")
            row = rows.get(name)
            if row is None:
                layers = list(_get(part, "layers", None) or [name])
                host = _get(part, "kind") == "host" or bool(_get(part, "host", False))
                row = rows[name] = LayerRow(name, layers, "host" if host else "chip",
                                            rows=config.rows, cols=config.cols)
                if _get(part, "useful_macs") is None:
                    row.macs = samples * sum(layer_macs(graph, by_name[n])
                                             for n in layers if n in by_name)
            if _get(part, "useful_macs") is not None:
                row.macs += int(round(int(_get(part, "useful_macs")) * real))
            counters = _get(part, "counters", None) or {}
            # (the array's work: the chip's counter, else the compiler's count)
            row.performed += int(counters.get("useful_macs", _get(part, "performed_macs", 0) or 0))
            row.skipped += int(_get(part, "skipped_tiles", 0) or 0)
            row.skipped_macs += int(round(int(_get(part, "skipped_macs", 0) or 0) * real))
            row.cycles += int(counters.get("cycles", 0))
            row.weight_tiles_loaded += int(_get(part, "weights_loaded", 0) or 0)
            row.estimate += _estimate_cycles(_get(part, "estimated_cycles",
                                                  _get(part, "estimate", 0)))
            if row.where == "host":
                layer = by_name.get(row.layers[0])
                if layer is not None:
                    row.op = host_op_name(layer)
                    row.host_ops += int(round(host_layer_ops(graph, layer) * per_chunk))
            for counter in COUNTER_NAMES:
                if counter in counters:
                    row.counters[counter] = row.counters.get(counter, 0) + int(counters[counter])
    return Report(list(rows.values()), samples, config, clock_hz)
