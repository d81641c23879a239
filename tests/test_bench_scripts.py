"""scripts/bench_fpga.py and scripts/bench_simspeed.py: command lines around
`tpu.bench.fpga` and `tpu.bench.driver_simspeed`, run as a user runs them."""

import json
import subprocess
import sys
from pathlib import Path

import pytest


SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"

#: A saved bench_fpga result: one build that fits, one that does not.
_SAVED = {"date": "2026-12-01", "tools": {}, "results": [
    {"board": "ulx3s-85f", "device": "ECP5 LFE5U-85F (ULX3S)", "rows": 8, "cols": 8, "dsp": True,
     "multipliers": "auto", "fits": True, "fmax_mhz": 120.5, "seconds": 300.0,
     "logic": {"used": 2050, "available": 83640}, "ffs": {"used": 4548, "available": 83640},
     "dsp_blocks": {"used": 64, "available": 156}, "ram_blocks": {"used": 0, "available": 208},
     "critical_path": {"start": "a.Q", "end": "b.D"}},
    {"board": "ulx3s-85f", "device": "ECP5 LFE5U-85F (ULX3S)", "rows": 16, "cols": 16,
     "dsp": True, "multipliers": "auto", "fits": False, "seconds": 38.0,
     "reason": "no BELs remaining to implement cell type 'MULT18X18D'",
     "needed": {"MULT18X18D": {"used": 256, "available": 156}}}]}


def _script(name, *args, check=True):
    done = subprocess.run([sys.executable, str(SCRIPTS / name), *args], capture_output=True,
                          text=True, timeout=600)
    if check:
        assert done.returncode == 0, done.stderr
    return done


@pytest.mark.parametrize("name, words", [("bench_fpga.py", ["--run", "--from-json", "boards:"]),
                                         ("bench_simspeed.py", ["--shapes", "--programs",
                                                                "compute", "dma"]),
                                         ("bench_small_chips.py", ["--chips", "--backend",
                                                                   "--inputs"]),
                                         ("bench_imagenet.py", ["--chips", "--models", "--run"]),
                                         ("compiler_fingerprints.py", ["--record", "--check",
                                                                       "--only", "--all"])])
def test_help(name, words):
    out = _script(name, "--help").stdout
    assert out.startswith("usage: ") and all(w in out for w in words)


def test_imagenet_chips_are_profiles_or_shapes():
    """bench_imagenet's ``v1`` is the v1 profile (TPU v1's sizes), as everywhere."""
    from script_loader import load_script
    from tpu import TPUConfig
    from tpu.config import V1_PROFILE
    chip = load_script("bench_imagenet").chip
    assert chip("v1") == V1_PROFILE
    assert chip("v1:wbw=8") == V1_PROFILE.replace(weight_mem_bytes_per_cycle=8)
    assert chip("16x16:ub=4096") == TPUConfig(rows=16, cols=16, ub_rows=4096)


def test_fpga_table_from_saved_results(tmp_path):
    saved = tmp_path / "fpga.json"
    saved.write_text(json.dumps(_SAVED))
    lines = _script("bench_fpga.py", "--from-json", str(saved)).stdout.splitlines()
    assert lines[0].split() == ["board", "array", "mult", "fits", "logic", "FFs", "DSP", "blocks",
                                "RAM", "Fmax", "MHz", "GOPS", "time", "s"]
    # 2 x 8 x 8 x 120.5 MHz = 15.4 GOPS
    assert lines[2].split() == ["ulx3s-85f", "8x8", "dsp", "yes", "2050/83640", "4548/83640",
                                "64/156", "0/208", "120.5", "15.4", "300"]
    assert lines[3].split()[:5] == ["ulx3s-85f", "16x16", "dsp", "NO", "-"]
    assert lines[4] == ("ulx3s-85f 16x16 dsp=True does not fit: "
                        "no BELs remaining to implement cell type 'MULT18X18D'")
    markdown = _script("bench_fpga.py", "--from-json", str(saved), "--markdown").stdout
    assert "| ECP5 LFE5U-85F (ULX3S) | 8x8 | DSP | yes | 2050/83640 |" in markdown


def test_fpga_bad_arguments_are_one_line_errors(tmp_path):
    (tmp_path / "bad.json").write_text("{}")
    for args, words in ((["--run", "icebreaker:2y2"], "is not BOARD:ROWSxCOLS"),
                        (["--run", "de10:2x2"], "unknown board 'de10'"),
                        (["--run", "icebreaker:0x2"], "rows and cols must be in 1..256"),
                        (["--from-json", str(tmp_path / "bad.json")], "not a saved bench_fpga result"),
                        (["--from-json", str(tmp_path / "bad.json"), "--run", "icebreaker:2x2"],
                         "takes no --run")):
        done = _script("bench_fpga.py", *args, check=False)
        assert done.returncode == 2 and words in done.stderr.splitlines()[-1], (args, done.stderr)


@pytest.mark.rtl
def test_simspeed_tiny_run(simulator, tmp_path):
    """A short compute program on the 8x8 chip (the model the suite builds)."""
    out = tmp_path / "simspeed.json"
    done = _script("bench_simspeed.py", "--backend", simulator, "--shapes", "8x8", "--programs",
                   "compute", "--cycles", "2000", "--out", str(out))
    [row] = json.loads(out.read_text())
    assert row["shape"] == "8x8" and row["backend"] == simulator and row["program"] == "compute"
    assert row["cycles"] >= 2000 and row["cycles_per_s"] > 0 and row["start_s"] > 0
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["8x8", "compute", "start"] and lines[-1] == f"saved {out}"
