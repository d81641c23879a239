"""`CompiledModel`: what the back end produces and the runtime runs.

A compiled model is a list of steps over one host-memory region:

* **chip parts**, each a program (host addresses are offsets into the host
  region; the runtime relocates them) and the weight tiles it needs resident
  (a range of the weight image at a weight-memory tile). Every fused layer
  is its own part, so the chip's counters after each run are that layer's;
  the unified buffer, accumulators and weight memory persist between runs;
* **host steps**, an IR layer that `tpu.compiler.reference` runs on values
  read from (and written back to) the host region.

The host region starts with constants (LDQ tables, lookup tables, padding
fill rows); graph inputs, outputs, spilled tensors and host-step tensors
follow, each in its stored layout (`tpu.compiler.layout.Layout`).

`save` writes one ``.tpu`` file: an npz (no pickles) holding a JSON manifest,
the weight image, the constants, each part's program and the arrays of the
IR layers that host steps run.
"""

import dataclasses
import json
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from ..config import TPUConfig
from ..isa import INSTRUCTION_BYTES
from . import ir
from .errors import ModelError
from .layout import Layout, im2col


__all__ = ["CompiledModel", "TensorSpec", "ChipStep", "HostStep", "FORMAT_VERSION"]

# 2: Adds fused as ONNX Runtime fuses them run its QLinearAdd arithmetic
# (`ir.Add.semantics`); a version-1 file's Adds would run the old rounding.
FORMAT_VERSION = 2


@dataclass
class TensorSpec:
    """A graph input or output: the IR tensor, the model's view of it, and
    where and how a batch of it is stored in the host region."""
    tensor: str
    shape: tuple                  # IR per-sample shape
    quant: ir.QuantType
    model_name: str
    model_shape: tuple
    model_dtype: str
    model_layout: str
    storage: Layout
    host_offset: int
    im2col: dict = None           # input stored as convolution patches

    def pack(self, values):
        """Quantized values ``(batch, *shape)`` -> host bytes."""
        v = np.asarray(values, dtype=np.int64)
        if self.im2col is not None:
            c = self.im2col
            v = im2col(v.reshape(v.shape[0], *self._image()), c["kernel"], c["stride"],
                       c["padding"], c["fill"], c.get("rows"))
        return self.storage.pack(v)

    def unpack(self, data):
        """Host bytes -> values ``(batch, *shape)`` in the tensor's dtype."""
        v = self.storage.unpack(data)
        return v.reshape(v.shape[0], *self.shape).astype(self.quant.dtype)

    def _image(self):
        return tuple(self.shape) if len(self.shape) == 3 else (1, 1, self.shape[0])


@dataclass
class ChipStep:
    """A program part: its program (host addresses relative to the host
    region), the weight image tiles ``weights = (first, count)`` it needs
    at weight-memory tile ``weight_base``, and its cycle estimate.

    The work it does, for the report (`tpu.compiler.report`):
    ``useful_macs`` the model's multiply-accumulates of the part,
    ``performed_macs`` those the array performs (``rows x cols`` for each
    row an MMC streams, padding lanes and structural zeros included: the
    chip's ``useful_macs`` counter), ``skipped_tiles`` the weight tiles left
    out as all zero and ``skipped_macs`` the model's multiply-accumulates
    in them (which no cell performs)."""
    name: str
    layers: list
    program: bytes
    weights: tuple
    weight_base: int
    estimated_cycles: int = 0
    useful_macs: int = 0
    performed_macs: int = 0
    skipped_tiles: int = 0
    skipped_macs: int = 0

    @property
    def instructions(self):
        return len(self.program) // INSTRUCTION_BYTES


@dataclass
class HostStep:
    """An IR layer the host runs: ``inputs``/``outputs`` are
    ``(tensor, host offset, Layout)``."""
    name: str
    layer: str
    inputs: list
    outputs: list


@dataclass
class CompiledModel:
    config: TPUConfig
    batch: int
    inputs: list
    outputs: list
    steps: list
    weights: np.ndarray           # (tiles, rows, cols) int8
    host_size: int
    constants: bytes              # host region bytes 0 .. len - 1
    tensors: dict = field(default_factory=dict)     # IR tensors host steps use
    host_layers: dict = field(default_factory=dict)  # IR layers of the host steps
    source: str = ""
    notes: list = field(default_factory=list)

    @property
    def chip_steps(self):
        return [s for s in self.steps if isinstance(s, ChipStep)]

    def host_graph(self):
        """An `ir.Graph` holding the tensors the host steps read and write."""
        return ir.Graph(tensors=self.tensors, layers=list(self.host_layers.values()),
                        inputs=[], outputs=[], source=self.source)

    # Text ------------------------------------------------------------------------------

    def describe(self):
        cfg = self.config
        lines = [f"compiled model {self.source or '(unnamed)'}: {cfg.rows}x{cfg.cols} array, "
                 f"batch {self.batch}, {len(self.weights)} weight tiles "
                 f"({cfg.weight_mem_tiles} in weight memory), host region {self.host_size} bytes "
                 f"({len(self.constants)} constant)"]
        for kind, specs in (("input", self.inputs), ("output", self.outputs)):
            for s in specs:
                extra = ", im2col patches" if s.im2col else ""
                lines.append(f"  {kind} {s.model_name!r} (tensor {s.tensor!r}) {s.shape} "
                             f"{s.quant.dtype} scale {s.quant.scale:.6g} zero {s.quant.zero_point}"
                             f", {s.storage.rows} rows at host +{s.host_offset:#x}{extra}")
        for i, step in enumerate(self.steps):
            if isinstance(step, ChipStep):
                first, count = step.weights
                lines.append(f"  {i:3d} chip {step.name}: {step.instructions} instructions, "
                             f"tiles {first}..{first + count - 1} at {step.weight_base}, "
                             f"~{step.estimated_cycles} cycles, {step.useful_macs} MACs "
                             f"({step.performed_macs} on the array"
                             + (f", {step.skipped_tiles} all-zero tiles skipped" if step.skipped_tiles
                                else "") + ") "
                             f"[{', '.join(step.layers)}]")
            else:
                lines.append(f"  {i:3d} host {step.name}: "
                             f"{', '.join(t for t, _, _ in step.inputs)} -> "
                             f"{', '.join(t for t, _, _ in step.outputs)}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def disassemble(self):
        from ..asm import disassemble
        out = []
        for step in self.steps:
            if isinstance(step, ChipStep):
                out.append(f"; part {step.name} ({', '.join(step.layers)})")
                out.append(disassemble(step.program))
            else:
                out.append(f"; host step {step.name} (layer {step.layer})")
        return "\n".join(out)

    # Files -----------------------------------------------------------------------------

    def save(self, path):
        arrays = {"weights": np.asarray(self.weights, dtype=np.int8),
                  "constants": np.frombuffer(self.constants, dtype=np.uint8)}
        steps = []
        for i, step in enumerate(self.steps):
            if isinstance(step, ChipStep):
                arrays[f"program{i}"] = np.frombuffer(step.program, dtype=np.uint8)
                d = {k: v for k, v in dataclasses.asdict(step).items() if k != "program"}
                steps.append({"kind": "chip", **d})
            else:
                steps.append({"kind": "host", "name": step.name, "layer": step.layer,
                              "inputs": [[t, o, lay.to_json()] for t, o, lay in step.inputs],
                              "outputs": [[t, o, lay.to_json()] for t, o, lay in step.outputs]})
        manifest = {
            "format": "tpu-compiled-model", "version": FORMAT_VERSION,
            "config": self.config.to_dict(), "batch": self.batch, "source": self.source,
            "host_size": self.host_size, "notes": self.notes,
            "inputs": [_spec_json(s) for s in self.inputs],
            "outputs": [_spec_json(s) for s in self.outputs],
            "steps": steps,
            "tensors": _encode(self.tensors, arrays),
            "host_layers": _encode(self.host_layers, arrays),
        }
        arrays["manifest"] = np.array(json.dumps(manifest))
        with open(path, "wb") as f:
            np.savez(f, **arrays)

    @classmethod
    def load(cls, path):
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
            manifest = json.loads(str(arrays["manifest"]))
        except (OSError, ValueError, KeyError) as e:
            raise ModelError(f"{path}: not a compiled model file ({e})") from None
        if manifest.get("format") != "tpu-compiled-model":
            raise ModelError(f"{path}: not a compiled model file (no tpu-compiled-model manifest)")
        if manifest.get("version") != FORMAT_VERSION:
            raise ModelError(f"{path}: a compiled model of format version {manifest.get('version')}, "
                             f"this tpu reads version {FORMAT_VERSION}: compile the model again")
        steps = []
        for i, s in enumerate(manifest["steps"]):
            if s["kind"] == "chip":
                steps.append(ChipStep(name=s["name"], layers=s["layers"],
                                      program=arrays[f"program{i}"].tobytes(),
                                      weights=tuple(s["weights"]), weight_base=s["weight_base"],
                                      estimated_cycles=s["estimated_cycles"],
                                      useful_macs=s["useful_macs"],
                                      performed_macs=s.get("performed_macs", 0),
                                      skipped_tiles=s.get("skipped_tiles", 0),
                                      skipped_macs=s.get("skipped_macs", 0)))
            else:
                steps.append(HostStep(
                    name=s["name"], layer=s["layer"],
                    inputs=[(t, o, Layout.from_json(lay)) for t, o, lay in s["inputs"]],
                    outputs=[(t, o, Layout.from_json(lay)) for t, o, lay in s["outputs"]]))
        return cls(config=TPUConfig(**manifest["config"]), batch=manifest["batch"],
                   inputs=[_spec_from(d) for d in manifest["inputs"]],
                   outputs=[_spec_from(d) for d in manifest["outputs"]],
                   steps=steps, weights=arrays["weights"], host_size=manifest["host_size"],
                   constants=arrays["constants"].tobytes(),
                   tensors=_decode(manifest["tensors"], arrays),
                   host_layers=_decode(manifest["host_layers"], arrays),
                   source=manifest["source"], notes=manifest["notes"])


def _quant_json(q):
    return {"scale": float(q.scale), "zero_point": int(q.zero_point), "unsigned": bool(q.unsigned)}


def _spec_json(s):
    return {"tensor": s.tensor, "shape": list(s.shape), "quant": _quant_json(s.quant),
            "model_name": s.model_name,
            "model_shape": [None if d is None else int(d) for d in s.model_shape],
            "model_dtype": str(np.dtype(s.model_dtype)), "model_layout": s.model_layout,
            "storage": s.storage.to_json(), "host_offset": s.host_offset, "im2col": s.im2col}


def _spec_from(d):
    return TensorSpec(tensor=d["tensor"], shape=tuple(d["shape"]), quant=ir.QuantType(**d["quant"]),
                      model_name=d["model_name"], model_shape=tuple(d["model_shape"]),
                      model_dtype=d["model_dtype"], model_layout=d["model_layout"],
                      storage=Layout.from_json(d["storage"]), host_offset=d["host_offset"],
                      im2col=d["im2col"])


# IR objects <-> JSON (arrays kept aside) ------------------------------------------------

_IR_TYPES = {name: getattr(ir, name) for name in ir.__all__ if isinstance(getattr(ir, name), type)}


def _encode(obj, arrays):
    if isinstance(obj, np.ndarray):
        key = f"ir{len(arrays)}"
        arrays[key] = obj
        return {"__array__": key}
    if isinstance(obj, Enum):
        return {"__enum__": type(obj).__name__, "value": obj.value}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"__ir__": type(obj).__name__,
                "fields": {f.name: _encode(getattr(obj, f.name), arrays)
                           for f in dataclasses.fields(obj)}}
    if isinstance(obj, dict):
        return {"__dict__": [[_encode(k, arrays), _encode(v, arrays)] for k, v in obj.items()]}
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v, arrays) for v in obj]}
    if isinstance(obj, list):
        return [_encode(v, arrays) for v in obj]
    if isinstance(obj, np.dtype):
        return {"__dtype__": str(obj)}
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def _decode(obj, arrays):
    if isinstance(obj, list):
        return [_decode(v, arrays) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if "__array__" in obj:
        return arrays[obj["__array__"]]
    if "__enum__" in obj:
        return _IR_TYPES[obj["__enum__"]](obj["value"])
    if "__ir__" in obj:
        fields = {k: _decode(v, arrays) for k, v in obj["fields"].items()}
        return _IR_TYPES[obj["__ir__"]](**fields)
    if "__dict__" in obj:
        return {_decode(k, arrays): _decode(v, arrays) for k, v in obj["__dict__"]}
    if "__tuple__" in obj:
        return tuple(_decode(v, arrays) for v in obj["__tuple__"])
    if "__dtype__" in obj:
        return np.dtype(obj["__dtype__"])
    return obj
