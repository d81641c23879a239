"""Moves the synchronous reset of generated Verilog from the combinational
next-state logic into the flip-flops, for Verilator.

Amaranth (through Yosys) writes each register as a combinational block that
computes its next value, with the reset as the block's last statement, and a
flip-flop that only copies it::

    always @* begin
      \\$188  = \\$155 ;
      if (rst) begin
        \\$188  = 1'h0;
      end
    end
    always @(posedge clk)
      running <= \\$188 ;

``rst`` is an input of the model, and Verilator evaluates all logic that
depends on an input at every evaluation (its "ico" region, run at both clock
edges) as well as after the flip-flops change: with ``rst`` in the next value
of every register, that was most of the chip's logic, three times a cycle
(docs/host_performance.md). Here the reset is taken out of the block and put
in the flip-flop instead::

    always @* begin
      \\$188  = \\$155 ;
    end
    always @(posedge clk)
      if (rst) running <= 1'h0; else running <= \\$188 ;

which stores the same value at every clock edge. It is done only where the
block's result is read by that one flip-flop and nothing else, so no other
signal sees a difference; everything else is left as it was.
"""

import re


__all__ = ["move_resets_into_flops"]

_ASSIGN = re.compile(r"^      (\\\S+ |[A-Za-z_][\w$]*) = ([^;]+);$")
_FLOP = re.compile(r"^    (\\\S+ |[A-Za-z_][\w$]*) <= (\\\S+ |[A-Za-z_][\w$]*);$")
_DECLARATION = re.compile(r"^  (reg|wire)\b")


def move_resets_into_flops(text, reset="rst"):
    """`text` with every movable `reset` moved into its flip-flop (see the
    module docstring); the number moved is `count_moved(text)`."""
    return _move(text, reset)[0]


def count_moved(text, reset="rst"):
    """How many registers of `text` `move_resets_into_flops` changes."""
    return _move(text, reset)[1]


def _move(text, reset):
    lines = text.split("\n")
    moved = 0
    start = 0
    while start < len(lines):
        end = start
        while end < len(lines) and lines[end] != "endmodule":
            end += 1
        moved += _move_in_module(lines, start, end, reset)
        start = end + 1
    return "\n".join(line for line in lines if line is not None), moved


def _token(name):
    # An escaped identifier ends at its space; a plain one at a non-word character.
    return re.compile(re.escape(name) if name.startswith("\\") else rf"(?<![\w$\\]){re.escape(name)}(?![\w$])")


def _move_in_module(lines, start, end, reset):
    """Move the resets of the module in lines[start:end]; None marks a
    removed line. The number moved."""
    guard = f"    if ({reset}) begin"
    candidates = []
    block_start = None
    for index in range(start, end):
        line = lines[index]
        if line == "  always @* begin":
            block_start = index
        elif (line == guard and block_start is not None and index + 3 < end
              and lines[index + 2] == "    end" and lines[index + 3] == "  end"):
            match = _ASSIGN.match(lines[index + 1])
            if match:
                candidates.append((block_start, index, match.group(1), match.group(2)))
    if not candidates:
        return 0
    # Where each name is used outside declarations: one pass over the module.
    uses = {}
    names = {name for _, _, name, _ in candidates}
    plain = [name for name in names if not name.startswith("\\")]
    escaped = {name for name in names if name.startswith("\\")}
    plain_token = re.compile(r"(?<![\w$\\])(" + "|".join(map(re.escape, plain)) + r")(?![\w$])") if plain else None
    for index in range(start, end):
        line = lines[index]
        if line is None or _DECLARATION.match(line):
            continue
        found = [m.group(0) for m in re.finditer(r"\\\S+ ", line) if m.group(0) in escaped]
        if plain_token is not None:
            found += plain_token.findall(line)
        for name in found:
            uses.setdefault(name, []).append(index)
    moved = 0
    for block_start, guard_index, name, value in candidates:
        block_end = guard_index + 3
        outside = [i for i in uses.get(name, []) if not block_start <= i <= block_end]
        if len(outside) != 1:
            continue
        flop_index = outside[0]
        flop = _FLOP.match(lines[flop_index] or "")
        if (flop is None or flop.group(2) != name or lines[flop_index - 1] != "  always @(posedge clk)"
                or len(_token(name).findall(lines[flop_index])) != 1):
            continue
        register = flop.group(1)
        lines[flop_index] = f"    if ({reset}) {register} <= {value}; else {register} <= {name};"
        lines[guard_index:guard_index + 3] = [None, None, None]
        moved += 1
    return moved
