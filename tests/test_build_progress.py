"""The progress of a Verilator build (`tpu.sim.build_progress`): counted
from the C++ files Verilator lists and the objects make leaves, shown on a
terminal as one line rewritten, in a log as a few lines, and wired into the
harness's builds."""

import io
import time

from tpu import TPUConfig
from tpu.sim import build_progress, harness
from tpu.sim.build_progress import ProgressLines, verilator_progress


def _classes_mk(folder, prefix, fast, slow):
    folder.mkdir(parents=True, exist_ok=True)
    text = ["# Verilated -*- Makefile -*-", "VM_PARALLEL_BUILDS = 1", "VM_CLASSES_FAST += \\"]
    text += [f"  {name} \\" for name in fast] + ["", "VM_CLASSES_SLOW += \\"]
    text += [f"  {name} \\" for name in slow] + ["", "VM_GLOBAL_FAST += \\", "  verilated \\", "",
                                                 "VM_GLOBAL_SLOW += \\", ""]
    (folder / f"{prefix}_classes.mk").write_text("\n".join(text) + "\n")
    return [*fast, *slow, "verilated"]


def test_progress_counts_listed_files_and_their_objects(tmp_path):
    assert verilator_progress(tmp_path) == ("verilating", 0, 0)
    top = _classes_mk(tmp_path, "Vtop", ["Vtop", "Vtop___024root__0"], ["Vtop__Syms__Slow"])
    (tmp_path / "Vtop___024root__0.cpp").write_text("")
    (tmp_path / "unlisted.o").write_text("")
    assert verilator_progress(tmp_path) == ("compiling", 0, 4)
    (tmp_path / "Vtop.o").write_text("")
    (tmp_path / "verilated.o").write_text("")
    assert verilator_progress(tmp_path) == ("compiling", 2, 4)
    # A hierarchical build: each block has its own list in its own directory.
    block = _classes_mk(tmp_path / "Vrow", "Vrow", ["Vrow"], [])
    assert verilator_progress(tmp_path) == ("compiling", 2, 6)
    for name in top:
        (tmp_path / f"{name}.o").write_text("")
    for name in block:
        (tmp_path / "Vrow" / f"{name}.o").write_text("")
    assert verilator_progress(tmp_path) == ("linking", 6, 6)


def test_a_log_gets_a_few_lines():
    out = io.StringIO()
    lines = ProgressLines("building m", out, tty=False)
    lines.update("verilating", 0, 0)
    lines.update("verilating", 0, 0)
    for done in range(41):
        lines.update("compiling", done, 40)
    lines.update("linking", 40, 40)
    lines.close()
    text = out.getvalue().splitlines()
    assert text == ["building m: verilating", "building m: compiling C++ files 0/40",
                    "building m: compiling C++ files 10/40", "building m: compiling C++ files 20/40",
                    "building m: compiling C++ files 30/40", "building m: compiling C++ files 40/40",
                    "building m: linking"]


def test_a_terminal_gets_one_line_rewritten():
    out = io.StringIO()
    lines = ProgressLines("building m", out, tty=True)
    lines.update("verilating", 0, 0)
    for done in range(3):
        lines.update("compiling", done, 2)
    lines.close()
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n") and text.count("\r") == 4
    assert "\rbuilding m: compiling C++ files 2/2" in text


class _FakeVerilator:
    """Stands in for cocotb's runner: writes what a Verilator build writes, slowly."""
    def build(self, *, build_dir, **options):
        time.sleep(0.3)
        names = _classes_mk(build_dir, "Vtop", [f"Vtop__{i}" for i in range(4)], ["Vtop__Slow"])
        for name in names:
            time.sleep(0.15)
            (build_dir / f"{name}.o").write_text("")
        time.sleep(0.3)


def test_a_verilator_build_shows_its_progress(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(harness, "_runner", lambda simulator: _FakeVerilator())
    monkeypatch.setattr(build_progress, "POLL_SECONDS", 0.05)
    monkeypatch.setenv("MAKEFLAGS", "")
    build_dir = tmp_path / "tpu_top-1x1-0123"
    harness._build_model(TPUConfig(rows=1, cols=1), "verilator", "top",
                         "module top(a);\n  input a;\nendmodule\n", build_dir, [], None, None)
    err = capsys.readouterr().err
    assert "building tpu_top-1x1-0123: verilating" in err
    assert "building tpu_top-1x1-0123: compiling C++ files " in err
    assert "building tpu_top-1x1-0123: linking" in err
    assert (build_dir / "built.stamp").exists()
