"""`tpu build --top matrix` and `tpu flash --top matrix`: the matrix part's
sizes and bad input, before any synthesis (tests/test_cli_fpga.py covers
the options both tops share)."""

from tpu.cli import fpga as cli_fpga
from tpu.hdl.matrix_part import UP5K_MATRIX_PART_FIELDS


def _error(capsys, argv):
    assert cli_fpga.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tpu: error: ") and "\n" not in err, err
    return err


def test_an_array_larger_than_4x4_is_refused(capsys):
    assert "the matrix part's array is at most 4x4" in \
        _error(capsys, ["build", "--board", "icebreaker", "--top", "matrix", "--rows", "8"])


def test_memories_must_be_powers_of_two(capsys):
    assert "the matrix part's ub_rows must be a power of two" in \
        _error(capsys, ["build", "--board", "icebreaker", "--top", "matrix", "--ub-rows", "100"])


def test_the_part_has_its_own_sizes(monkeypatch, tmp_path):
    """Without options the part is built with `UP5K_MATRIX_PART_FIELDS`, into
    its own directory; options override them."""
    seen = {}

    def fake_build(board, config, *, build_dir, baudrate, top, clock_hz, progress, router, placer):
        seen.update(config=config, build_dir=build_dir, top=top)
        raise RuntimeError("stop here")

    monkeypatch.setattr("tpu.fpga.build.build_chip", fake_build)
    monkeypatch.chdir(tmp_path)
    assert cli_fpga.main(["build", "--board", "icebreaker", "--top", "matrix", "--acc-rows", "128"]) == 2
    assert seen["top"] == "matrix" and str(seen["build_dir"]) == "build/fpga/icebreaker-matrix"
    expected = {**UP5K_MATRIX_PART_FIELDS, "acc_rows": 128}
    assert {name: getattr(seen["config"], name) for name in expected} == expected


def test_flash_default_bitstream_of_the_part(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = _error(capsys, ["flash", "--board", "icebreaker", "--top", "matrix", "--dry-run"])
    assert "no bitstream build/fpga/icebreaker-matrix/tpu_matrix_part.bin" in err
    assert "tpu build --board icebreaker --top matrix" in err
    bitstream = tmp_path / "build" / "fpga" / "icebreaker-matrix" / "tpu_matrix_part.bin"
    bitstream.parent.mkdir(parents=True)
    bitstream.write_bytes(b"\0")
    assert cli_fpga.main(["flash", "--board", "icebreaker", "--top", "matrix", "--dry-run"]) == 0
    assert capsys.readouterr().out.strip().endswith("build/fpga/icebreaker-matrix/tpu_matrix_part.bin")


def test_the_part_runs_from_the_oscillator_or_the_pll(monkeypatch, tmp_path, capsys):
    """The part's default clock is the board's oscillator; `--clock-mhz`
    gets the PLL, as for the whole chip."""
    seen = []

    def fake_build(board, config, *, build_dir, baudrate, top, clock_hz, progress, router, placer):
        seen.append(clock_hz)
        raise RuntimeError("stop here")

    monkeypatch.setattr("tpu.fpga.build.build_chip", fake_build)
    monkeypatch.chdir(tmp_path)
    assert cli_fpga.main(["build", "--board", "icebreaker", "--top", "matrix"]) == 2
    assert "clock 12 MHz from the oscillator" in capsys.readouterr().out
    assert cli_fpga.main(["build", "--board", "icebreaker", "--top", "matrix", "--clock-mhz", "24"]) == 2
    assert "clock 24 MHz made by the PLL from the 12 MHz oscillator" in capsys.readouterr().out
    assert seen == [12e6, 24e6]
    err = _error(capsys, ["build", "--board", "icebreaker", "--top", "matrix", "--clock-mhz", "5"])
    assert err.startswith("tpu: error: --clock-mhz: ") and "16" in err, err
