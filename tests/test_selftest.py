"""The chip's self-test on every configuration: every check of
`tpu.selftest` on the golden model for a spread of array shapes and of
small memories (a check that cannot apply says why), the MLP stimulus on
them, and ``tpu selftest``. The RTL runs the same checks through `tpu sim`
(tests/test_cli_sim.py) and tests/test_host_interface_rtl.py."""

import random

import numpy as np
import pytest

from conftest import base_seed
from tpu import TPUConfig
from tpu.cli import main
from tpu.config import UP5K_HOST_FIELDS
from tpu.selftest import CHECKS, selftest, why_not
from tpu.models.chip_model import ChipModel
from tpu.sim.stimulus.programs import mlp_program, mlp_shape


SHAPES = ["1x1", "1x8", "2x2", "3x5", "5x3", "8x8", "16x16", "7x13"]


def _shape(text):
    rows, cols = (int(n) for n in text.split("x"))
    return TPUConfig(rows=rows, cols=cols)


def _failures(outcomes):
    return [f"{o.name}: {o.message}" for o in outcomes if o.kind == "fail"]


@pytest.mark.parametrize("shape", SHAPES)
def test_every_check_on_every_shape(shape):
    """With the default memories every check applies to every shape, and passes."""
    config = _shape(shape)
    outcomes = selftest("golden", config)
    assert [o.name for o in outcomes] == list(CHECKS)
    assert not _failures(outcomes), _failures(outcomes)
    assert all(o.kind == "pass" for o in outcomes), [o for o in outcomes if o.kind != "pass"]


def _small_config(rng):
    """A random configuration with small (down to one-row) memories. (One or
    two accumulator rows work too, but MMCs of so few rows make the checks'
    long programs ten thousand instructions long: slow on the golden model.)"""
    fields = dict(rows=rng.choice([1, 2, 3, 5, 8]), cols=rng.choice([1, 2, 4, 6, 8]),
                  acc_rows=rng.choice([8, 16, 64]), ub_rows=rng.choice([1, 4, 16, 256]),
                  weight_fifo_tiles=rng.choice([1, 2, 4]),
                  weight_mem_tiles=rng.choice([1, 2, 3, 8, 64]), dma_windows=rng.choice([1, 4]))
    if rng.random() < 0.3:
        # 32-bit host addresses, one tag, one window, the small host side
        fields.update(UP5K_HOST_FIELDS, serial_host=1)
    return TPUConfig(**fields)


def test_small_memories():
    """On random small memories every check passes or says why it is not for
    the configuration; none errors."""
    seed = base_seed()
    rng = random.Random(seed)
    for _ in range(4):
        config = _small_config(rng)
        outcomes = selftest("golden", config)
        assert not _failures(outcomes), f"seed {seed}, {config}: {_failures(outcomes)}"
        for o in outcomes:
            assert (o.kind == "skip") == bool(why_not(o.name, config))
            assert o.kind != "skip" or "\n" not in o.message and o.message


def test_why_not_names_the_memory():
    tiny = TPUConfig(rows=4, cols=4, weight_mem_tiles=1)
    assert why_not("mlp", tiny) == "the MLP needs 2 weight tiles, weight_mem_tiles is 1"
    assert "weight_mem_tiles is 1" in why_not("weights_at_tile", tiny)
    assert why_not("faults", tiny) is None
    assert "ub_rows is 1" in why_not("weights_at_tile", TPUConfig(ub_rows=1))
    with pytest.raises(ValueError, match="unknown check 'nope'"):
        why_not("nope", tiny)
    with pytest.raises(ValueError, match="unknown check nope"):
        selftest("golden", tiny, ["nope"])


def _golden_run(p):
    """Run a `ChipProgram` on the golden model; the host bytes it wrote."""
    model = ChipModel(p.config)
    model.weight_memory[:len(p.weights)] = p.weights
    for addr, data in p.host.items():
        model.host.write(addr, data)
    model.run(p.assemble())
    return {addr: model.host.read(addr, len(data)) for addr, data in p.expected_host.items()}


@pytest.mark.parametrize("shape", SHAPES + ["13x7"])
@pytest.mark.parametrize("fifo", [1, 4])
def test_mlp_on_every_shape(shape, fifo):
    """The MLP's reference is what the golden model computes, on square and
    rectangular arrays, with more K tiles than RW may request ahead (the
    RWs split) and with few."""
    config = _shape(shape).replace(weight_fifo_tiles=fifo)
    m = min(config.rows, config.cols)
    for p in (mlp_program(config=config, **mlp_shape(config)),
              mlp_program(5, batch=3, k1=9 * config.rows, n1=2 * m, n2=m, config=config)):
        assert _golden_run(p) == p.expected_host
        r = p.reference
        assert r["y"].shape == (len(r["x"]), r["w2"].shape[1])
        # Never more tiles requested ahead than the FIFO allows.
        requested = switched = 0
        for line in p.text.splitlines():
            if line.startswith("rw"):
                requested += int(line.split("count=")[1].split()[0])
            elif line.startswith("mmc") and "switch" in line:
                switched += 1
            assert requested - switched <= fifo + 2, line
    if 9 > fifo + 2:
        assert p.text.count("rw ") > 2 * m // m + 1      # the 9 K tiles took several RWs


def test_mlp_on_square_chips_is_unchanged():
    """The 8x8 chip's MLP is the documented one (examples/mlp.s)."""
    from pathlib import Path
    text = (Path(__file__).resolve().parent.parent / "examples" / "mlp.s").read_text()
    assert mlp_program().text == text
    assert mlp_shape(TPUConfig()) == dict(batch=16, k1=24, n1=24, n2=16)


def test_mlp_that_cannot_fit():
    with pytest.raises(ValueError, match="the MLP needs 2 weight tiles, weight_mem_tiles is 1"):
        mlp_shape(TPUConfig(weight_mem_tiles=1))
    with pytest.raises(ValueError, match="accumulator rows"):
        mlp_program(config=TPUConfig(acc_rows=8))
    with pytest.raises(ValueError, match="multiple of rows"):
        mlp_program(k1=10, config=TPUConfig(rows=4, cols=4))


def test_selftest_command(capsys):
    assert main(["selftest", "--rows", "3", "--cols", "5", "--check", "mlp", "--check", "faults"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "selftest of 3x5 on the golden backend: 2 checks"
    assert out.splitlines()[-1] == "2 passed, 0 failed"
    assert main(["selftest", "--weight-mem-tiles", "1", "--check", "open", "--list"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()] == list(CHECKS)
    assert "mlp" in out and "[not for this configuration: the MLP needs 2 weight tiles" in out


def test_selftest_command_skips_and_fails(capsys, monkeypatch):
    from tpu.selftest import checks
    assert main(["selftest", "--weight-mem-tiles", "1"]) == 0
    out = capsys.readouterr().out
    assert "skip  mlp: not for this configuration: the MLP needs 2 weight tiles" in out
    assert out.splitlines()[-1] == f"{len(CHECKS) - 6} passed, 0 failed, 6 not for this configuration"

    async def broken(device):
        raise AssertionError("the chip said 3, not 4")
    monkeypatch.setitem(checks.CHECKS, "open", broken)
    assert main(["selftest", "--check", "open"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  open" in out and "AssertionError: the chip said 3, not 4" in out
    assert out.splitlines()[-1] == "0 passed, 1 failed"


@pytest.mark.parametrize("args, words", [
    (["--check", "nope"], "unknown check nope"),
    (["--check", "mlp", "--weight-mem-tiles", "1"], "check mlp cannot run on 8x8 as given"),
    (["--backend", "serial"], "--backend serial needs --port"),
    (["--backend", "serial", "--port", "/nonexistent/tty"], "serial port /nonexistent/tty does not exist"),
    (["--backend", "serial", "--port", "loop://", "--baud", "0"], "--baud: must be a positive integer"),
    (["--port", "/dev/ttyUSB1"], "--port /dev/ttyUSB1 is for --backend serial"),
    (["--seed", "3"], "--seed draws a simulated host's timing"),
    (["--backend", "board"], "invalid choice: 'board'"),
    (["--rows", "0"], "rows = 0 is out of range"),
])
def test_selftest_command_bad_options(capsys, args, words):
    assert main(["selftest", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and words in err, err


@pytest.mark.rtl
def test_selftest_command_on_the_rtl(simulator, capsys):
    """`tpu selftest` on the chip's RTL (the build test_host_interface_rtl shares)."""
    from test_host_interface_rtl import NARROW
    options = [arg for name, value in NARROW.to_dict().items()
               for arg in (f"--{name.replace('_', '-')}", str(value))]
    seed = base_seed()
    status = main(["selftest", "--backend", simulator, *options, "--seed", str(seed),
                   "--check", "open", "--check", "empty_program"])
    out = capsys.readouterr().out
    assert status == 0, f"seed {seed}: {out}"
    assert out.splitlines()[0] == f"selftest of 4x4 on the {simulator} backend: 2 checks"
    assert out.splitlines()[-1] == "2 passed, 0 failed"
