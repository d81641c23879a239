"""A Chrome/Perfetto trace of a compiled model from the cycle model's schedule.

One process per model, one track per unit (host reads RHM, host writes WHM,
weights RW, matrix MMC, activation ACT, control for the rest) and a track of
program parts; each instruction is a slice from its issue to the cycle its
unit is done with it. Time is in cycles, written as microseconds (Perfetto's
unit), so "1 us" on the timeline is one chip cycle. Open the file at
ui.perfetto.dev or chrome://tracing."""

import json

from ..sim.models.cycle_model import estimate_cycles


__all__ = ["model_trace", "write_trace", "UNITS"]

#: instruction mnemonic -> track
UNITS = {"rhm": "RHM (host -> UB)", "whm": "WHM (UB -> host)", "rw": "RW (weight FIFO)",
         "mmc": "MMC (matrix unit)", "act": "ACT (activation unit)"}
_TRACKS = ["parts", *UNITS.values(), "control (CFG, LDQ, LDL, SYNC, HALT)"]


def model_trace(compiled, name="model"):
    """The trace-event dict of `compiled` (a `CompiledModel`): its chip parts one after
    another, as the cycle model schedules each part's program."""
    events = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": name}}]
    for tid, track in enumerate(_TRACKS):
        events.append({"ph": "M", "pid": 1, "tid": tid, "name": "thread_name",
                       "args": {"name": track}})
    start = 0
    for step in compiled.steps:
        program = getattr(step, "program", None)
        if program is None:
            continue
        result = estimate_cycles(compiled.config, program, schedule=True)
        events.append({"ph": "X", "pid": 1, "tid": 0, "name": step.name, "ts": start,
                       "dur": result["cycles"], "args": result["counters"]})
        for entry in result["schedule"]:
            text = entry["instruction"]
            unit = UNITS.get(text.split()[0], _TRACKS[-1])
            events.append({"ph": "X", "pid": 1, "tid": _TRACKS.index(unit), "name": text,
                           "ts": start + entry["issue"],
                           "dur": max(1, entry["done"] - entry["issue"]),
                           "args": {"part": step.name, "index": entry["index"]}})
        start += result["cycles"]
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"time unit": "1 us = 1 chip cycle",
                          "array": f"{compiled.config.rows}x{compiled.config.cols}"}}


def write_trace(path, compiled, name="model"):
    with open(path, "w") as f:
        json.dump(model_trace(compiled, name), f)
    return path
