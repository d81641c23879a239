"""Progress of a Verilator build, read from its build directory while it runs.

A Verilator build has three stages: Verilator translates the Verilog into
C++ (one step, no count), make compiles the C++ files, then links them.
Once translated, the ``*_classes.mk`` files Verilator writes list every C++
file make will compile (classes, support and global files; a hierarchical
build has one per block, in its own directory), and each compiled file
leaves its ``.o`` beside it, so "compiled k of n" is measurable by looking
at the directory, whatever make prints and however many jobs it runs.

`BuildProgress` watches a directory from a thread while the build runs: on
a terminal it rewrites one line (``\\r``); elsewhere (a log, CI) it prints a
line only when the stage changes and at each quarter of the compiling, so
a log gets a handful of lines per build.
"""

import re
import sys
import threading
from pathlib import Path


__all__ = ["verilator_progress", "ProgressLines", "BuildProgress", "POLL_SECONDS"]

#: how often `BuildProgress` looks at the build directory
POLL_SECONDS = 1.0

#: the lists of C++ files in a ``*_classes.mk`` (each ``NAME += \`` then one file per line)
_LISTS = ("VM_CLASSES_FAST", "VM_CLASSES_SLOW", "VM_SUPPORT_FAST", "VM_SUPPORT_SLOW",
          "VM_GLOBAL_FAST", "VM_GLOBAL_SLOW")


def _listed(makefile):
    """The C++ files (stems) a ``*_classes.mk`` lists for make to compile."""
    names, current = [], None
    for line in makefile.read_text(errors="replace").splitlines():
        start = re.match(r"^(\w+)\s*\+?=", line)
        if start:
            current = start.group(1) if start.group(1) in _LISTS else None
            continue
        if current is not None:
            name = line.strip().rstrip("\\").strip()
            if name:
                names.append(name)
            if not line.rstrip().endswith("\\"):
                current = None
    return names


def verilator_progress(build_dir):
    """``(stage, done, total)`` of the Verilator build in `build_dir`:
    ("verilating", 0, 0) until Verilator has written its file lists, then
    ("compiling", files compiled, files to compile), then ("linking", n, n)."""
    build_dir = Path(build_dir)
    done = total = 0
    try:
        makefiles = sorted(build_dir.rglob("*_classes.mk"))
        for makefile in makefiles:
            for name in _listed(makefile):
                total += 1
                done += (makefile.parent / f"{name}.o").exists()
    except OSError:         # files come and go while make runs
        return "verilating", 0, 0
    if not total:
        return "verilating", 0, 0
    return ("linking" if done == total else "compiling"), done, total


class ProgressLines:
    """Turns ``(stage, done, total)`` updates into lines on `stream`: on a
    terminal (`tty`) one line rewritten in place, else a line at each new
    stage and at each quarter of a counted stage."""

    def __init__(self, label, stream=None, tty=None):
        self.label = label
        self.stream = sys.stderr if stream is None else stream
        self.tty = bool(tty if tty is not None else getattr(self.stream, "isatty", bool)())
        self._last = None
        self._quarter = None
        self._written = False

    def _text(self, stage, done, total):
        if stage == "compiling":
            return f"{self.label}: compiling C++ files {done}/{total}"
        return f"{self.label}: {stage}"

    def update(self, stage, done, total):
        if (stage, done, total) == self._last:
            return
        first_of_stage = self._last is None or self._last[0] != stage
        self._last = (stage, done, total)
        text = self._text(stage, done, total)
        if self.tty:
            print(f"\r{text}\033[K", end="", file=self.stream, flush=True)
            self._written = True
            return
        quarter = 4 * done // total if total else 0
        if first_of_stage or (stage == "compiling" and quarter != self._quarter):
            print(text, file=self.stream, flush=True)
        self._quarter = quarter

    def close(self):
        if self.tty and self._written:
            print(file=self.stream, flush=True)
            self._written = False


class BuildProgress:
    """A context manager that reports `verilator_progress(build_dir)` every
    `interval` seconds (`POLL_SECONDS`) while its body (the build) runs."""

    def __init__(self, build_dir, label, stream=None, tty=None, interval=None):
        self.build_dir = Path(build_dir)
        self.lines = ProgressLines(label, stream, tty)
        self.interval = POLL_SECONDS if interval is None else interval
        self._stop = threading.Event()
        self._thread = None

    def _watch(self):
        while not self._stop.is_set():
            self.lines.update(*verilator_progress(self.build_dir))
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread = threading.Thread(target=self._watch, name="build-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.lines.close()
        return False
