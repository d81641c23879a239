"""Generated RTL mutants: every plausible one-site bug of an Amaranth source
file, found on its syntax tree and applied as one text edit that leaves the
rest of the file as it was.

The Python mutation tools were tried first: mutmut 3 rewrites each function
into a trampoline chosen by an environment variable inside its own pytest
run, and cosmic-ray drives one test command per session; neither knows the
kinds of bug an RTL block has (a swapped ``Cat``, a reset value, an extra
register on an assignment), and neither lets each mutant run the tests of its
own block. So this module enumerates, and scripts/mutants.py runs.

Kinds (inside functions; not in docstrings, ``assert``, ``raise``, nor the
test of an ``if`` whose body only raises: those check arguments, not logic):

- ``cmp``: a relational operator moved across its boundary (``<``/``<=``,
  ``>``/``>=``) or negated (``==``/``!=``, ``<``/``>=``, ``>``/``<=``);
- ``bitop``: ``&``/``|`` swapped (``^`` becomes ``|``), and either operand
  of a ``&``, ``|`` or ``^`` dropped;
- ``boolop``: ``and``/``or`` swapped, an operand dropped;
- ``invert``: a ``~``/``not`` dropped, the condition of ``m.If``/``m.Elif``
  inverted;
- ``const``: an integer constant in a comparison, an arithmetic operation or
  an ``.eq()`` plus and minus one (never below zero);
- ``cat``: two neighbouring operands of ``Cat`` swapped;
- ``init``: an integer or boolean ``init=`` of a ``Signal`` changed by one (a
  boolean flipped), or ``init=1`` given to a ``Signal`` of a constant width
  that had none;
- ``delay``: ``dom += a.eq(b)`` made through an extra register, so ``a``
  follows ``b`` one clock later.

A mutant's id names its file, kind and a hash of the statement it edits and
its replacement (with a count for repeats), so ids do not move when other
lines of the file change.
"""

import ast
import difflib
import hashlib
import random
from dataclasses import dataclass
from pathlib import Path

KINDS = ("cmp", "bitop", "boolop", "invert", "const", "cat", "init", "delay")

_CMP = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_CMP_MUTANTS = {"<": ("<=", ">="), "<=": ("<", ">"), ">": (">=", "<="), ">=": (">", "<"),
                "==": ("!=",), "!=": ("==",)}
_BITOP = {ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^"}
_BITOP_SWAP = {"&": "|", "|": "&", "^": "|"}
_ARITH = (ast.Add, ast.Sub, ast.Mult, ast.LShift, ast.RShift, ast.Mod, ast.FloorDiv)


@dataclass(frozen=True)
class Mutant:
    """One edit of one file: ``text[start:end]`` becomes ``replacement``."""
    id: str
    file: str
    line: int
    kind: str
    start: int
    end: int
    original: str
    replacement: str
    description: str
    source_hash: str    # of the text it was enumerated from


def _hash(text):
    return hashlib.sha1(text.encode()).hexdigest()


def apply(source, mutant):
    """`source` with `mutant`'s edit made."""
    if _hash(source) != mutant.source_hash:
        raise ValueError(f"mutant {mutant.id} does not apply: {mutant.file} changed since it was enumerated")
    return source[:mutant.start] + mutant.replacement + source[mutant.end:]


def diff(source, mutant):
    """The unified diff of `mutant` against `source`."""
    after = apply(source, mutant)
    return "".join(difflib.unified_diff(source.splitlines(True), after.splitlines(True),
                                        f"a/{mutant.file}", f"b/{mutant.file}", n=1))


class _Offsets:
    """Character offsets of (line, column) positions of a source text; the
    syntax tree's columns count UTF-8 bytes, so they are converted."""

    def __init__(self, source):
        self.lines = source.splitlines(True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def __call__(self, line, col):
        text = self.lines[line - 1] if line - 1 < len(self.lines) else ""
        return self.starts[line - 1] + len(text.encode()[:col].decode(errors="ignore"))

    def span(self, node):
        return self(node.lineno, node.col_offset), self(node.end_lineno, node.end_col_offset)


def _is_docstring(node):
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _only_raises(node):
    return isinstance(node, ast.If) and all(isinstance(s, ast.Raise) for s in node.body)


def _call_name(node):
    """``Cat`` of ``Cat(...)``, ``If`` of ``m.If(...)``."""
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name):
            return node.func.id
        if isinstance(node.func, ast.Attribute):
            return node.func.attr
    return None


class _Finder:
    def __init__(self, source, file):
        self.source, self.file = source, file
        self.at = _Offsets(source)
        self.found = []     # (line, kind, start, end, replacement, description)
        self.shapes = set() # the nodes of Signal shapes: a width one wider is no bug

    def text(self, node):
        start, end = self.at.span(node)
        return self.source[start:end]

    def add(self, node, kind, start, end, replacement, description):
        self.found.append((node.lineno, kind, start, end, replacement, description))

    # The walk: statements of functions, skipping argument checks.
    def module(self, tree):
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.body(node.body)

    def body(self, statements):
        for stmt in statements:
            if _is_docstring(stmt) or isinstance(stmt, (ast.Assert, ast.Raise, ast.FunctionDef,
                                                        ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if _only_raises(stmt):
                self.body(stmt.orelse)
                continue
            self.statement(stmt)
            for field in ("body", "orelse", "finalbody"):
                self.body(getattr(stmt, field, []) or [])
            for handler in getattr(stmt, "handlers", []) or []:
                self.body(handler.body)
            for case in getattr(stmt, "cases", []) or []:
                self.body(case.body)

    def statement(self, stmt):
        """The expressions of `stmt` itself (not of its nested statements)."""
        roots = []
        for field, value in ast.iter_fields(stmt):
            if field in ("body", "orelse", "finalbody", "handlers", "cases"):
                continue
            roots.extend(value if isinstance(value, list) else [value])
        for root in roots:
            if isinstance(root, ast.AST):
                for node in ast.walk(root):
                    if isinstance(node, (ast.Lambda, ast.FunctionDef)):
                        continue
                    self.expression(node)
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add):
            self.delays(stmt)

    def expression(self, node):
        if isinstance(node, ast.Compare):
            self.compare(node)
        elif isinstance(node, ast.BinOp):
            self.binop(node)
        elif isinstance(node, ast.BoolOp):
            self.boolop(node)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Invert, ast.Not)):
            start, end = self.at.span(node)
            operand = self.text(node.operand)
            self.add(node, "invert", start, end, operand, f"drop the {'~' if isinstance(node.op, ast.Invert) else 'not'}")
        elif isinstance(node, ast.Call):
            self.call(node)

    def compare(self, node):
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            symbol = _CMP.get(type(op))
            if symbol is not None:
                # The operator is the text between the operands.
                gap_start, gap_end = self.at.span(left)[1], self.at.span(right)[0]
                gap = self.source[gap_start:gap_end]
                index = gap.find(symbol)
                if index >= 0 and gap.count(symbol) == 1:
                    start = gap_start + index
                    for other in _CMP_MUTANTS[symbol]:
                        self.add(node, "cmp", start, start + len(symbol), other, f"{symbol} -> {other}")
            for operand in (left, right):
                if operand is left and op is not node.ops[0]:
                    continue
                self.constant(operand)
            left = right

    def binop(self, node):
        symbol = _BITOP.get(type(node.op))
        start, end = self.at.span(node)
        left, right = self.text(node.left), self.text(node.right)
        if symbol is not None:
            gap_start, gap_end = self.at.span(node.left)[1], self.at.span(node.right)[0]
            gap = self.source[gap_start:gap_end]
            if gap.count(symbol) == 1:
                at = gap_start + gap.find(symbol)
                swap = _BITOP_SWAP[symbol]
                self.add(node, "bitop", at, at + 1, swap, f"{symbol} -> {swap}")
            self.add(node, "bitop", start, end, f"({left})", f"drop the right operand of {symbol}")
            self.add(node, "bitop", start, end, f"({right})", f"drop the left operand of {symbol}")
        elif isinstance(node.op, _ARITH):
            self.constant(node.left)
            self.constant(node.right)

    def boolop(self, node):
        start, end = self.at.span(node)
        word = "and" if isinstance(node.op, ast.And) else "or"
        other = "or" if word == "and" else "and"
        texts = [self.text(v) for v in node.values]
        self.add(node, "boolop", start, end, f" {other} ".join(f"({t})" for t in texts), f"{word} -> {other}")
        for i in range(len(texts)):
            rest = texts[:i] + texts[i + 1:]
            self.add(node, "boolop", start, end, f" {word} ".join(f"({t})" for t in rest),
                     f"drop operand {i + 1} of {word}")

    def constant(self, node):
        if isinstance(node, ast.Constant) and type(node.value) is int and id(node) not in self.shapes:
            start, end = self.at.span(node)
            self.add(node, "const", start, end, str(node.value + 1), f"{node.value} -> {node.value + 1}")
            if node.value > 0:
                self.add(node, "const", start, end, str(node.value - 1), f"{node.value} -> {node.value - 1}")

    def call(self, node):
        name = _call_name(node)
        if name == "Cat":
            for a, b in zip(node.args, node.args[1:]):
                if isinstance(a, ast.Starred) or isinstance(b, ast.Starred):
                    continue
                start, end = self.at(a.lineno, a.col_offset), self.at(b.end_lineno, b.end_col_offset)
                between = self.source[self.at.span(a)[1]:self.at.span(b)[0]]
                self.add(node, "cat", start, end, self.text(b) + between + self.text(a),
                         f"Cat operands {self.text(a)} and {self.text(b)} swapped")
        elif name in ("If", "Elif") and len(node.args) == 1 and isinstance(node.func, ast.Attribute):
            start, end = self.at.span(node.args[0])
            self.add(node, "invert", start, end, f"~({self.text(node.args[0])})", f"{name} condition inverted")
        elif name == "eq" and len(node.args) == 1:
            self.constant(node.args[0])
        elif name == "Signal":
            if node.args:
                self.shapes.update(id(n) for n in ast.walk(node.args[0]))
            self.reset(node)

    def reset(self, node):
        init = next((k for k in node.keywords if k.arg == "init"), None)
        if init is None:
            width = node.args[0] if node.args else None
            if node.args and not (isinstance(width, ast.Constant) and type(width.value) is int and width.value > 0):
                return
            end = self.at(node.end_lineno, node.end_col_offset) - 1     # the closing parenthesis
            self.add(node, "init", end, end, ", init=1" if node.args or node.keywords else "init=1",
                     "reset value 1 instead of 0")
            return
        value = init.value
        if isinstance(value, ast.Constant) and type(value.value) in (int, bool):
            start, end = self.at.span(value)
            if type(value.value) is bool:
                self.add(node, "init", start, end, str(not value.value), f"init={value.value} -> {not value.value}")
            else:
                self.add(node, "init", start, end, str(value.value + 1), f"init={value.value} -> {value.value + 1}")
                if value.value > 0:
                    self.add(node, "init", start, end, str(value.value - 1), f"init={value.value} -> {value.value - 1}")

    def delays(self, stmt):
        """``m.d.DOM += a.eq(b)`` (or a list of such) through an extra
        register: the register is made and assigned in front of the
        statement, on its line, so the edit is one stretch of text."""
        target = stmt.target
        if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Attribute)
                and target.value.attr == "d"):
            return
        if target.attr == "comb":
            domain = self.text(target.value) + ".sync"
        else:
            domain = self.text(target)
        values = stmt.value.elts if isinstance(stmt.value, (ast.List, ast.Tuple)) else [stmt.value]
        stmt_start = self.at(stmt.lineno, stmt.col_offset)
        for element in values:
            if not (_call_name(element) == "eq" and len(element.args) == 1 and not element.keywords
                    and isinstance(element.func, ast.Attribute)):
                continue
            value = element.args[0]
            value_start, value_end = self.at.span(value)
            prefix = ("_mutant_value = " + self.text(value).replace("\n", " ") + "; "
                      "_mutant_reg = __import__('amaranth').Signal.like("
                      "__import__('amaranth').Value.cast(_mutant_value), name='mutant_delay'); "
                      f"{domain} += _mutant_reg.eq(_mutant_value); ")
            replacement = prefix + self.source[stmt_start:value_start] + "_mutant_reg"
            self.add(stmt, "delay", stmt_start, value_end, replacement,
                     f"{self.text(element.func.value)} one {domain.rsplit('.', 1)[-1]} clock late")


def enumerate_mutants(source, file):
    """Every mutant of `source` (the text of `file`, a path as the ids and
    reports name it), in the order of the text."""
    finder = _Finder(source, file)
    finder.module(ast.parse(source))
    stem = Path(file).stem
    lines = source.splitlines()
    mutants, seen, counts, source_hash = [], set(), {}, _hash(source)
    for line, kind, start, end, replacement, description in sorted(finder.found, key=lambda f: (f[2], f[3], f[4])):
        if (start, end, replacement) in seen or source[start:end] == replacement:
            continue
        seen.add((start, end, replacement))
        try:
            ast.parse(source[:start] + replacement + source[end:])
        except SyntaxError:
            continue        # e.g. a multi-line value with a comment inside, put on one line
        key = f"{kind}|{lines[line - 1].strip()}|{source[start:end]}|{replacement}"
        counts[key] = counts.get(key, 0) + 1
        digest = hashlib.sha1(f"{key}|{counts[key]}".encode()).hexdigest()[:8]
        mutants.append(Mutant(id=f"{stem}-{kind}-{digest}", file=file, line=line, kind=kind, start=start,
                              end=end, original=source[start:end], replacement=replacement,
                              description=description, source_hash=source_hash))
    return mutants


def all_mutants(root, files=None):
    """The mutants of every hdl/ file under `root` (or of `files`, paths
    relative to it), sorted by id."""
    root = Path(root)
    paths = files or sorted(str(p.relative_to(root)) for p in (root / "hdl").glob("*.py")
                            if p.name != "__init__.py")
    found = []
    for path in paths:
        found += enumerate_mutants((root / path).read_text(), path)
    return sorted(found, key=lambda m: m.id)


def sample(mutants, count, seed):
    """`count` of `mutants` drawn at random with `seed`, in id order."""
    if count > len(mutants):
        raise ValueError(f"a sample of {count} from {len(mutants)} mutants")
    chosen = random.Random(seed).sample(sorted(mutants, key=lambda m: m.id), count)
    return sorted(chosen, key=lambda m: m.id)
