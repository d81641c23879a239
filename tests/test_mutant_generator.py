"""The generated mutants of scripts/mutant_generator.py: a small Amaranth
source yields the expected mutants of each kind, each changes exactly one
stretch of the text and still parses, ids are stable, and a sample's seed
replays it."""

import ast
import difflib
import random
from pathlib import Path

import pytest

from script_loader import load_script

ROOT = Path(__file__).resolve().parent.parent

SOURCE = '''\
"""A block."""
from amaranth import *


class Block(Elaboratable):
    def __init__(self, depth):
        if depth < 1:
            raise ValueError("depth")
        self.depth = depth

    def elaborate(self, platform):
        """Its logic."""
        m = Module()
        a, b, ready = Signal(), Signal(), Signal()
        count = Signal(4, init=3)
        flag = Signal(init=True)
        word = Signal(range(self.depth + 1))
        m.d.comb += ready.eq(a & ~b)
        with m.If(count < 5):
            m.d.sync += count.eq(count + 1)
        m.d.comb += word.eq(Cat(a, b))
        assert self.depth != 3
        return m
'''


@pytest.fixture(scope="module")
def generator():
    return load_script("mutant_generator")


def changed_lines(before, after):
    """The (first, last) lines of `before` that differ, in one run of lines."""
    hunks = [op for op in difflib.SequenceMatcher(None, before.splitlines(), after.splitlines()).get_opcodes()
             if op[0] != "equal"]
    assert len(hunks) == 1, hunks
    return hunks[0]


def test_the_mutants_of_a_small_block(generator):
    found = generator.enumerate_mutants(SOURCE, "hdl/block.py")
    described = sorted((m.line, m.kind, m.original, m.replacement) for m in found if m.kind != "delay")
    assert described == sorted([
        (15, "init", "3", "4"), (15, "init", "3", "2"),
        (16, "init", "True", "False"),
        (14, "init", "", "init=1"), (14, "init", "", "init=1"), (14, "init", "", "init=1"),
        (18, "bitop", "&", "|"), (18, "bitop", "a & ~b", "(a)"), (18, "bitop", "a & ~b", "(~b)"),
        (18, "invert", "~b", "b"),
        (19, "cmp", "<", "<="), (19, "cmp", "<", ">="),
        (19, "const", "5", "6"), (19, "const", "5", "4"),
        (19, "invert", "count < 5", "~(count < 5)"),
        (20, "const", "1", "2"), (20, "const", "1", "0"),
        (21, "cat", "a, b", "b, a"),
    ])
    # The argument check, the assert, the docstrings and the width of
    # `word` (one wider is no bug) are left alone.
    assert not [m for m in found if m.line in (7, 8, 17, 22)]
    delays = sorted((m.line, m.description) for m in found if m.kind == "delay")
    assert delays == [(18, "ready one sync clock late"), (20, "count one sync clock late"),
                      (21, "word one sync clock late")]
    assert len({m.id for m in found}) == len(found)
    assert all(m.id.startswith(f"block-{m.kind}-") for m in found)


def test_each_mutant_changes_one_place_and_parses(generator):
    for m in generator.enumerate_mutants(SOURCE, "hdl/block.py"):
        after = generator.apply(SOURCE, m)
        assert after != SOURCE
        ast.parse(after)
        _, first, last, _, _ = changed_lines(SOURCE, after)
        assert first + 1 <= m.line <= last, (m, first, last)
        assert last == first + 1, f"{m.id} changes lines {first + 1} to {last}"
        # The rest of the text is the same, character for character.
        assert after[:m.start] == SOURCE[:m.start]
        assert after[m.start + len(m.replacement):] == SOURCE[m.end:]


def test_a_delay_mutant_elaborates_with_its_register(generator):
    """The extra register is a real one: the mutated block has one more
    flop than the original, named so."""
    from amaranth.back import rtlil
    delay = next(m for m in generator.enumerate_mutants(SOURCE, "hdl/block.py")
                 if m.kind == "delay" and m.line == 18)
    scope = {}
    exec(compile(generator.apply(SOURCE, delay), "block.py", "exec"), scope)
    assert "mutant_delay" in rtlil.convert(scope["Block"](4), ports=[])


def test_ids_do_not_move_with_other_lines(generator):
    before = {m.id: (m.kind, m.original, m.replacement) for m in generator.enumerate_mutants(SOURCE, "hdl/block.py")}
    moved = SOURCE.replace('        """Its logic."""\n', '        """Its logic,\n        on two lines."""\n')
    after = {m.id: (m.kind, m.original, m.replacement) for m in generator.enumerate_mutants(moved, "hdl/block.py")}
    assert before == after


def test_a_mutant_of_a_changed_file_is_refused(generator):
    m = generator.enumerate_mutants(SOURCE, "hdl/block.py")[0]
    with pytest.raises(ValueError, match=f"mutant {m.id} does not apply: hdl/block.py changed"):
        generator.apply("x = 1\n" + SOURCE, m)


def test_a_seed_replays_its_sample(generator):
    mutants = generator.enumerate_mutants(SOURCE, "hdl/block.py")
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    first = generator.sample(mutants, 5, seed)
    assert generator.sample(list(reversed(mutants)), 5, seed) == first
    assert len({m.id for m in first}) == 5
    assert any(generator.sample(mutants, 5, seed + k) != first for k in range(1, 4))
    with pytest.raises(ValueError, match=f"a sample of {len(mutants) + 1} from {len(mutants)} mutants"):
        generator.sample(mutants, len(mutants) + 1, seed)


def test_every_generated_file_has_tests_and_equivalents_are_reasoned():
    """The run maps each hdl/ file to the tests of its hand-written mutants;
    every equivalent entry has a reason."""
    script = load_script("mutants")
    blocks, mutants = script.load()
    tests = script.tests_of_files(blocks, mutants)
    sources = {str(p.relative_to(ROOT)) for p in (ROOT / "hdl").glob("*.py") if p.name != "__init__.py"}
    assert sources <= set(tests)
    assert tests["hdl/sequencer.py"][:len(blocks["core"])] == blocks["core"]
    for reason in script.load_equivalent().values():
        assert len(reason) > 20
