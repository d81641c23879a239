"""MLPerf Tiny latency on the ULX3S: each model's cycles per inference on the
16x16 chip of the ``ulx3s16`` profile (batch 1, the golden cycle model,
`tpu.models.cycle_model`, exact against the RTL) divided by the routed clock
of that chip's latest recorded build (`tpu.fpga.routed_clocks`), and at two
clocks for context: issue 25's 75 MHz target for the whole chip and the
16x16 array's own routed 142 MHz. Beside them fpgaConvNet's published
latencies on a ZedBoard.

Only the chip parts are timed: a host operator (a softmax, say) and the
transfers over the board's UART are not in the cycles.
"""

from pathlib import Path

from ..config import ULX3S16_PROFILE


__all__ = ["board_clocks", "board_latency", "load_tiny_models", "markdown", "FPGACONVNET_MS",
           "FPGACONVNET_SOURCE", "TARGET_MHZ"]

#: The whole ``ulx3s16`` chip's clock issue 25 asks for (MHz).
TARGET_MHZ = 75.0

#: fpgaConvNet's published MLPerf Tiny latencies (ms per inference) on a
#: ZedBoard (Zynq-7020), by the MLPerf Tiny model of the same task.
FPGACONVNET_MS = {"pretrainedResnet_quant": 0.411, "kws_ref_model": 0.324}
FPGACONVNET_SOURCE = (
    "fpgaConvNet's MLPerf Tiny latencies on a ZedBoard (Zynq-7020) as issue 25 quotes them: "
    "image classification 0.411 ms, keyword spotting 0.324 ms (fpgaConvNet is the streaming "
    "toolflow of S. I. Venieris and C.-S. Bouganis, \"fpgaConvNet: Mapping Regular and "
    "Irregular Convolutional Neural Networks on FPGAs\", IEEE Trans. Neural Networks and "
    "Learning Systems 30(2), 2019; the MLPerf Tiny figures come from its later MLPerf Tiny "
    "results, not re-checked here)")


def board_clocks(board="ulx3s-85f", profile="ulx3s16", config=ULX3S16_PROFILE):
    """``[(label, MHz)]``: the routed clock of the latest recorded build of
    `profile` on `board` (the slowest of that day's), the 75 MHz target and
    the array's routed clock."""
    from ..fpga.routed_clocks import ARRAY_ROUTED_MHZ, latest_routed
    routed = latest_routed(board, profile)
    if not routed:
        raise ValueError(f"no routed build of profile {profile!r} on {board} is recorded")
    build = routed[0]
    clocks = [(f"routed ({build.date}{', ' + build.commit if build.commit else ''})",
               build.fmax_mhz), ("target", TARGET_MHZ)]
    array = ARRAY_ROUTED_MHZ.get((board, config.rows, config.cols))
    if array is not None:
        clocks.append(("array alone", array))
    return clocks


def load_tiny_models():
    """``(graphs by name, skipped: name -> reason)`` of the MLPerf Tiny models present."""
    from ..compiler import mlperf_tiny
    from ..compiler.tflite_frontend import import_tflite
    graphs, skipped = {}, {}
    for name in mlperf_tiny.MODELS:
        reason = mlperf_tiny.missing_reason(name)
        if reason:
            skipped[name] = reason
            continue
        graphs[name] = import_tflite(Path(mlperf_tiny.model_path(name)))
    return graphs, skipped


def board_latency(graphs, config=ULX3S16_PROFILE, clocks=None):
    """Per model of `graphs` (name -> IR graph): its cycles per inference on
    `config` at batch 1 (the cycle model) and its latency in ms at each of
    `clocks` (default `board_clocks`), with fpgaConvNet's where published.
    A model the compiler refuses for `config` is a row with its ``error``."""
    from .design_space import estimated_cycles
    clocks = board_clocks() if clocks is None else clocks
    rows = []
    for name, graph in graphs.items():
        cycles, reason = estimated_cycles(graph, config, 1)
        row = {"model": name, "cycles": cycles, "fpgaconvnet_ms": FPGACONVNET_MS.get(name)}
        if cycles is None:
            row["error"] = reason
        else:
            row["ms"] = {label: cycles / (mhz * 1e3) for label, mhz in clocks}
        rows.append(row)
    return {"config": config.name, "clocks": [list(c) for c in clocks], "models": rows}


def markdown(result):
    """The table of `board_latency`'s result."""
    clocks = result["clocks"]
    head = ["model", "cycles per inference"] + [f"ms at {mhz:g} MHz ({label})"
                                                for label, mhz in clocks] + \
        ["fpgaConvNet, ZedBoard (ms)"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for row in result["models"]:
        theirs = "-" if row["fpgaconvnet_ms"] is None else f"{row['fpgaconvnet_ms']:g}"
        if "error" in row:
            cells = ["refused: " + row["error"][:60]] + [""] * len(clocks)
        else:
            cells = [f"{row['cycles']:,}"] + [f"{row['ms'][label]:.3f}" for label, _ in clocks]
        lines.append("| " + " | ".join([row["model"], *cells, theirs]) + " |")
    return "\n".join(lines)
