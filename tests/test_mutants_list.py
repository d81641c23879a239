"""The kept mutant list of scripts/mutants.toml still applies to hdl/: every
mutant's original text occurs exactly once in its file, and every hdl/ file
has a mutant. An RTL change that moves a mutant's text fails here, in the
suite, not hours into a mutation run."""

from pathlib import Path

import pytest

from script_loader import load_script

ROOT = Path(__file__).resolve().parent.parent




def test_every_mutant_applies_and_every_hdl_file_has_one():
    blocks, mutants = load_script("mutants").load()
    assert len(mutants) >= 40, f"only {len(mutants)} mutants"
    files = {m["file"] for m in mutants}
    sources = {str(p.relative_to(ROOT)) for p in (ROOT / "hdl").glob("*.py") if p.name != "__init__.py"}
    assert sources <= files, f"hdl files without a mutant: {sorted(sources - files)}"


def test_a_mutant_that_no_longer_applies_is_named(tmp_path):
    script = load_script("mutants")
    text = (ROOT / "scripts" / "mutants.toml").read_text()
    broken = text.replace('original = "(ub_last >= cfg.ub_rows)"', 'original = "(ub_last >== cfg.ub_rows)"')
    assert broken != text
    path = tmp_path / "mutants.toml"
    path.write_text(broken)
    with pytest.raises(SystemExit, match="dec-mmc-last-row: its original text occurs 0 times"):
        script.load(path)
