#!/usr/bin/env python3
"""Where the C++ of a Verilator model of the chip goes, by part of the design.

Each line of the model's ``*.cpp`` files is counted for the first design
signal it names (``tpu_chip__DOT__core__DOT__engine__...``), or else for
the line before's, and each signal for the first part below whose pattern
its path matches; the files of a module Verilator keeps as a class count
for that module's part. A hierarchical build's block libraries (the systolic row,
in a directory of its own) are counted apart.

The parts that grow with rows x cols are the array glue (the row instances'
ports: a hierarchical block's inputs and outputs are copied word by word
into and out of its library, and its inputs compared with their last values
to trigger it) and the staircases; the activation and pooling lanes grow
with cols.

Example::

    python scripts/verilated_cpp_parts.py build/sim/verilator/tpu_chip-128x128-<digest>
"""

import argparse
import re
import sys
from pathlib import Path

#: (part, pattern of the signal's path), first match wins. Paths are
#: Verilator's with ``__DOT__`` as ``.``, below the top module.
PARTS = [
    ("array glue: the row instances' ports", r"core\.engine\.array\.(row_\d+\.|_*Vcell(inp|out)__row_|below|psum_in|psum_out|transit)"),
    ("staircases (skews, deskew)", r"core\.engine\.array\.(skew_|deskew)"),
    ("rest of the array", r"core\.engine\.array\."),
    ("pooling lanes", r"core\.act\.pipeline\.pooling"),
    ("rest of the activation pipeline", r"core\.act\."),
]
OTHER = "everything else (host interface, DMA, sequencer, memories, ...)"
#: Modules Verilator keeps as classes of their own (``Vtop_<module>*.cpp``):
#: their code names their own signals, so the class says the part.
CLASSES = [
    ("rows (flat build: each instance's code apart)", "tpu_systolic_row_"),
    ("staircases (skews, deskew)", "tpu_staircase_"),
]
_SIGNAL = re.compile(r"tpu_chip__DOT__(\w+)")
_CLASS = re.compile(r"Vtop_([a-z]\w*?)(__\d+)?(__Slow)?\.cpp$")


def part_of(path):
    """The part of the design that signal `path` (dotted) belongs to."""
    for part, pattern in PARTS:
        if re.match(pattern, path):
            return part
    return OTHER


def class_part(file_name):
    """The part of the design a module class's file belongs to, or None
    for the top's files (``Vtop__*``, ``Vtop___024root*``)."""
    found = _CLASS.match(file_name)
    if not found:
        return None
    return next((part for part, prefix in CLASSES if found.group(1).startswith(prefix)), OTHER)


def breakdown(model_dir):
    """{part: bytes} of the C++ in `model_dir`, with the block libraries'
    as ``library <name>``, and the number of files."""
    model_dir = Path(model_dir)
    sizes, files = {}, 0
    for cpp in sorted(model_dir.rglob("*.cpp")):
        files += 1
        if cpp.parent != model_dir:
            key = f"library {cpp.parent.name}"
            sizes[key] = sizes.get(key, 0) + cpp.stat().st_size
            continue
        part = class_part(cpp.name)
        if part:
            sizes[part] = sizes.get(part, 0) + cpp.stat().st_size
            continue
        part = OTHER
        with open(cpp, "rb") as f:
            for line in f:
                found = _SIGNAL.search(line.decode("utf-8", "replace"))
                if found:
                    part = part_of(found.group(1).replace("__DOT__", "."))
                sizes[part] = sizes.get(part, 0) + len(line)
    return sizes, files


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", type=Path, help="a Verilator model's build directory")
    args = parser.parse_args(argv)
    if not args.model_dir.is_dir():
        parser.error(f"{args.model_dir} is not a directory")
    sizes, files = breakdown(args.model_dir)
    if not files:
        parser.error(f"{args.model_dir} holds no .cpp files: is it a Verilator model's directory?")
    total = sum(sizes.values())
    print("| part | C++ |\n| --- | ---: |")
    for part, size in sorted(sizes.items(), key=lambda item: -item[1]):
        print(f"| {part} | {size / 1e6:.2f} MB |")
    print(f"| total | {total / 1e6:.2f} MB in {files} files |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
