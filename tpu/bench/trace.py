"""A Chrome/Perfetto trace of a compiled model from the cycle model's schedule.

One process per model. Tracks: the program parts; instruction issue (each
instruction from the end of its decode to its issue, so a wide slice is a
wait); one per unit, each instruction a slice from its issue to the cycle its
unit is done with it (host reads RHM, host writes WHM, RW commands, MMC, ACT,
control for the rest); the weight FIFO (each tile from its request to its
capture into the array's shadow registers); the array (the rows of each MMC,
first entry to last); and one track per stall cause (RAW hazard, unit busy,
weight, host). The schedule is `tpu.models.cycle_model.estimate_cycles`,
which equals the RTL core with an ideal host counter for counter, run on each
part's program as it executes (parts one after another). Time is in cycles,
written as microseconds (Perfetto's unit), so "1 us" on the timeline is one
chip cycle. Open the file at ui.perfetto.dev or chrome://tracing.
"""

import json

from ..models.cycle_model import estimate_cycles


__all__ = ["model_trace", "write_trace", "UNITS", "TRACKS", "STALLS"]

#: instruction mnemonic -> track
UNITS = {"rhm": "RHM (host -> UB)", "whm": "WHM (UB -> host)", "rw": "RW (weight commands)",
         "mmc": "MMC (matrix unit)", "act": "ACT (activation unit)"}
CONTROL = "control (CFG, LDQ, LDL, SYNC, HALT)"
#: wait cause in the schedule -> track
STALLS = {"raw": "stall: RAW hazard", "unit busy": "stall: unit busy",
          "weight": "stall: weight (MMC waits for its tile)",
          "host": "stall: host (RHM waits for data)"}
TRACKS = ["parts", "instruction issue", *UNITS.values(), CONTROL,
          "weight FIFO (tile request -> capture)", "array (rows of each MMC)", *STALLS.values()]


def _slice(tid, name, ts, dur, args=None):
    event = {"ph": "X", "pid": 1, "tid": tid, "name": name, "ts": ts, "dur": max(1, dur)}
    if args:
        event["args"] = args
    return event


def part_events(config, program, name, start, host_latency=0):
    """Trace events of one part's `program` starting at cycle `start`, and its cycles."""
    result = estimate_cycles(config, program, host_latency=host_latency, schedule=True)
    tid = TRACKS.index
    events = [_slice(0, name, start, result["cycles"], result["counters"])]
    for entry in result["schedule"]:
        text = entry["instruction"]
        args = {"part": name, "index": entry["index"]}
        if entry["issue"] is None:          # a fault: the chip halts here
            events.append(_slice(tid(CONTROL), text, start + entry["done"], 1, args))
            continue
        mnemonic = text.split()[0]
        events.append(_slice(tid("instruction issue"), mnemonic, start + entry["ready"],
                             entry["issue"] - entry["ready"], args))
        events.append(_slice(tid(UNITS.get(mnemonic, CONTROL)), text, start + entry["issue"],
                             entry["done"] - entry["issue"], args))
        if "rows" in entry:
            first, last = entry["rows"]
            events.append(_slice(tid("array (rows of each MMC)"), text, start + first,
                                 last - first + 1, args))
        # A wait for the unit and for a hazard come before the issue; a weight
        # or host wait after it (the first row's tile or data).
        before = entry["issue"]
        for cause in ("raw", "unit busy"):
            cycles = entry["waits"].get(cause, 0)
            if cycles:
                before -= cycles
                events.append(_slice(tid(STALLS[cause]), mnemonic, start + before, cycles, args))
        if entry["waits"].get("weight"):
            cycles = entry["waits"]["weight"]
            events.append(_slice(tid(STALLS["weight"]), mnemonic,
                                 start + entry["rows"][0] - cycles, cycles, args))
        if entry["waits"].get("host"):
            events.append(_slice(tid(STALLS["host"]), mnemonic, start + entry["issue"],
                                 entry["waits"]["host"], args))
    for k, tile in enumerate(result["weight_tiles"]):
        end = tile["capture"] if tile["capture"] is not None else tile["beats"][1] + 1
        events.append(_slice(tid("weight FIFO (tile request -> capture)"), f"tile {k}",
                             start + tile["request"], end - tile["request"],
                             {"part": name, **{key: value for key, value in tile.items()
                                               if value is not None}}))
    return events, result["cycles"]


def model_trace(compiled, name="model", host_latency=0):
    """The trace-event dict of `compiled` (a `CompiledModel`): its chip parts one after
    another, as the cycle model schedules each part's program."""
    events = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": name}}]
    for tid, track in enumerate(TRACKS):
        events.append({"ph": "M", "pid": 1, "tid": tid, "name": "thread_name",
                       "args": {"name": track}})
        events.append({"ph": "M", "pid": 1, "tid": tid, "name": "thread_sort_index",
                       "args": {"sort_index": tid}})
    start = 0
    for step in compiled.steps:
        program = getattr(step, "program", None)
        if program is None:
            continue
        part, cycles = part_events(compiled.config, program, step.name, start, host_latency)
        events += part
        start += cycles
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"time unit": "1 us = 1 chip cycle", "source": "cycle model schedule",
                          "array": f"{compiled.config.rows}x{compiled.config.cols}",
                          "batch": compiled.batch}}


def write_trace(path, compiled, name="model", host_latency=0):
    """Write `model_trace` of `compiled` as JSON to `path`; returns `path`."""
    with open(path, "w") as f:
        json.dump(model_trace(compiled, name, host_latency), f)
    return path
