"""The MLPerf Tiny int8 models through the TFLite front end, against the TFLite
interpreter's reference kernels, and their cycles on the chip (the measuring of
`scripts/bench_tflite.py`, its command line; docs/tflite.md).

For each model present (`tpu.compiler.mlperf_tiny`): the reference
interpreter of the imported IR against TFLite on `reference` random int8
inputs (every output byte); per array size, `chip` inputs through the
compiled model on `backend` in one run (every byte against TFLite) with
cycles, MXU-active cycles, utilisation by the model's own MACs (a depthwise
convolution counts its real taps), the weight-load share and the host
operators; with `batches` (golden only) cycles per inference per batch.
With `up5k`, also on `UP5K_SIZED`: the array and memories an iCE40 UP5K's
hard blocks hold (not a chip that fits the UP5K: its logic does not).
"""

import time

import numpy as np

from ..compiler import reference as reference_interpreter
from ..compiler.errors import CompileError
from ..compiler.mlperf_tiny import MODELS, missing_reason, model_path
from ..compiler.report import layer_macs
from ..compiler.session import InferenceSession
from ..compiler.tflite_frontend import import_tflite
from ..config import PROFILES, TPUConfig
from ..fpga.routed_clocks import ROUTED_CHIPS
from ..hdl.matrix_part import UP5K_MATRIX_PART_FIELDS


__all__ = ["run_tflite", "markdown", "model_macs", "chip_configs", "FMAX_MHZ", "UP5K_SIZED",
           "UP5K_FMAX_MHZ"]

#: Fmax (MHz) measured in docs/fpga.md: the array benchmark on the ECP5-85F
#: (8x8 with MULT18X18D, 16x16 in LUTs) and the whole 2x2 chip on the ECP5-85F
#: (the fastest of its routed builds, `tpu.fpga.routed_clocks`)
FMAX_MHZ = {8: 88.5, 16: 75.0}
CHIP_FMAX_MHZ = max(r.fmax_mhz for r in ROUTED_CHIPS if (r.board, r.rows, r.cols) == ("ulx3s-85f", 2, 2))

#: The chip whose array and memories the iCE40 UP5K's hard blocks hold: the
#: "up5k" profile (one shared requantizer on a 16 x 16-bit multiplier, the
#: UART-sized host fields) with the matrix part's 4x4 array on the 8 SB_MAC16
#: and its memories (UB in 2 SPRAMs, accumulators and weights in EBR),
#: speaking TLPs, as the simulation backends that run it drive them
UP5K_SIZED = TPUConfig(**{**PROFILES["up5k"], **UP5K_MATRIX_PART_FIELDS, "narrow_host": 0})
#: Fmax (MHz) of the matrix part on the UP5K (docs/fpga.md, "What fits the UP5K")
UP5K_FMAX_MHZ = 18.19


def tflite_outputs(path, x):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    interpreter = Interpreter(model_path=str(path),
                              experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    results = []
    for sample in x:
        interpreter.set_tensor(inp["index"], sample[None])
        interpreter.invoke()
        results.append(interpreter.get_tensor(out["index"])[0].copy())
    return np.array(results).reshape(len(x), -1)


def model_macs(graph):
    """The model's own multiply-accumulates per inference (depthwise: real
    taps, as `tpu run`'s report counts them)."""
    return sum(layer_macs(graph, layer) for layer in graph.layers)


def chip_run(graph, x, config, backend, batch=1):
    """Outputs and per-inference measurements of `x` on the chip `config`, in one run."""
    session = InferenceSession(graph, backend=backend, config=config, batch=batch)
    spec = graph.inputs[0]
    (y,) = session.run(None, {spec.model_name: x})
    report = session.report()
    total = report.total
    cycles = total.cycles / len(x)
    stall = total.counters.get("weight_stall", 0) / len(x)
    # tiles shift in while rows wait on them and behind the array's work, so
    # stall + shift bounds the cycles weights cost from above, stall from below
    weight = stall + total.counters.get("weight_shift", 0) / len(x)
    host = report.host_operators()
    return y.reshape(len(x), -1), dict(
        cycles=cycles, mxu_active=total.counters.get("mxu_active", 0) / len(x),
        weight_cycles=weight, weight_share=weight / cycles if cycles else 0.0,
        weight_stall=stall, weight_stall_share=stall / cycles if cycles else 0.0,
        host_operators=[dict(name=h["name"], op=h["op"], ops=h["ops"] / len(x),
                             share=h["share"]) for h in host],
        host_share=sum(h["share"] for h in host), parts=len(session.compiled.chip_steps),
        weight_tiles=len(session.compiled.weights))


def best_batch(graph, x, config, batches, log=print):
    """Golden cycles per inference at each batch that compiles: {batch: cycles}."""
    result = {}
    for batch in batches:
        try:
            _, m = chip_run(graph, x[:batch], config, "golden", batch)
        except CompileError as error:       # too large for this configuration: say so, go on
            log(f"    batch {batch}: {type(error).__name__}: {str(error).splitlines()[0]}")
            continue
        result[batch] = m["cycles"]
    return result


def markdown(results, backend):
    head = ("| model | array | inputs equal | cycles/inference (batch 1) | best batch | "
            "MXU active | MXU util. | weight load (stall+shift; stall) | host operators (share) | "
            "inf/s at Fmax |")
    lines = [head, "|---|---|---|---:|---|---:|---:|---:|---|---:|"]
    for r in results:
        for s in r["sizes"]:
            best = (f"{s['best_batch']['cycles']:,.0f} at {s['best_batch']['batch']}"
                    if s.get("best_batch") else "")
            host = ", ".join(f"{h['op']} {100 * h['share']:.2g}%"
                             for h in s["host_operators"]) or "none"
            stall = (f"; {100 * s['weight_stall_share']:.1f}%"     # not in results saved before
                     if "weight_stall_share" in s else "")
            array = s.get("array") or f"{s['size']}x{s['size']}"     # results saved before UP5K
            lines.append(
                f"| {r['model']} | {array} | {s['equal']}/{s['inputs']} "
                f"({backend}) | {s['cycles']:,.0f} | {best} | {s['mxu_active']:,.0f} | "
                f"{100 * s['utilisation']:.1f}% | {100 * s['weight_share']:.1f}%{stall} | {host} | "
                f"{s['inferences_per_second']:,.0f} at {s['fmax_mhz']} MHz |")
    return "\n".join(lines) + "\n"


def chip_configs(sizes, ub_rows, up5k=False):
    """``(label, config, fmax_mhz)`` per chip to measure: a square array of each
    of `sizes` with `ub_rows`, and with `up5k` the UP5K-sized chip."""
    configs = [(f"{size}x{size}", TPUConfig(rows=size, cols=size, ub_rows=ub_rows),
                FMAX_MHZ.get(size, CHIP_FMAX_MHZ)) for size in sizes]
    if up5k:
        configs.append((f"{UP5K_SIZED.rows}x{UP5K_SIZED.cols} UP5K-sized", UP5K_SIZED,
                        UP5K_FMAX_MHZ))
    return configs


def run_tflite(models=tuple(MODELS), reference=100, chip=5, sizes=(8, 16), ub_rows=8192,
               backend="verilator", batches=(), seed=1, log=print, up5k=False):
    """Measure `models`; ``(results, failures)``: one dict per model measured and
    the number of inputs whose outputs differ from TFLite anywhere."""
    batches = list(batches)
    configs = chip_configs(sizes, ub_rows, up5k)
    failures = 0
    results = []
    for name in models:
        reason = missing_reason(name)
        if reason:
            log(f"{name}: skipped: {reason}")
            continue
        path = model_path(name)
        graph = import_tflite(path)
        spec = graph.inputs[0]
        rng = np.random.default_rng(seed)
        n = max(reference, chip, *batches)
        x = rng.integers(-128, 128, size=(n, *spec.model_shape[1:]), dtype=np.int8)
        want = tflite_outputs(path, x)
        macs = model_macs(graph)
        log(f"{name}: {MODELS[name].task}; {macs:,} MACs per inference")
        result = dict(model=name, macs=macs, seed=seed, sizes=[])
        if reference:
            t = time.time()
            got = reference_interpreter.run(graph, {spec.tensor: x[:reference].reshape(
                reference, *graph.tensor(spec.tensor).shape)}, outputs_only=True)
            got = got[graph.outputs[0].tensor].reshape(reference, -1)
            bad = int((got != want[:reference]).any(axis=1).sum())
            failures += bad
            result["reference"] = dict(inputs=reference, equal=reference - bad)
            log(f"  reference interpreter vs TFLite: {reference - bad}/{reference} "
                  f"inputs equal in every byte ({time.time() - t:.1f} s)")
        for label, config, fmax in configs:
            t = time.time()
            y, m = chip_run(graph, x[:chip], config, backend)
            bad = int((y != want[:chip]).any(axis=1).sum())
            failures += bad
            cells = config.rows * config.cols
            entry = dict(size=config.rows, array=label, backend=backend, inputs=chip,
                         equal=chip - bad,
                         utilisation=macs / (m["cycles"] * cells) if m["cycles"] else 0.0,
                         fmax_mhz=fmax, inferences_per_second=fmax * 1e6 / m["cycles"],
                         seconds=round(time.time() - t, 1), **m)
            if batches and backend == "golden":
                per_batch = best_batch(graph, x, config, batches, log)
                entry["batches"] = per_batch
                if per_batch:
                    b = min(per_batch, key=per_batch.get)
                    entry["best_batch"] = dict(batch=b, cycles=per_batch[b])
            result["sizes"].append(entry)
            host = ", ".join(f"{h['op']} {100 * h['share']:.2g}%" for h in m["host_operators"])
            log(f"  {label} {backend}: {entry['equal']}/{chip} equal to TFLite; "
                  f"{m['cycles']:,.0f} cycles/inference (batch 1), MXU active "
                  f"{m['mxu_active']:,.0f}, utilisation {100 * entry['utilisation']:.1f}%, "
                  f"weight stall+shift {m['weight_cycles']:,.0f} "
                  f"({100 * m['weight_share']:.1f}%; stall alone {100 * m['weight_stall_share']:.1f}%); "
                  f"{m['parts']} chip parts, "
                  f"{m['weight_tiles']} weight tiles; host operators: "
                  f"{host or 'none'}"
                  + (f"; per batch {entry['batches']}" if "batches" in entry else "")
                  + f" ({entry['seconds']} s)")
        results.append(result)
    return results, failures
