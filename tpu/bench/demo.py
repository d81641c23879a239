"""The demo's digits MLP and CNN across batch sizes and arrays, as `tpu demo`
prepares them (`tpu.demo`): compile time, cycles per inference, MXU
utilisation over the program and while the array is active, inferences per
second, cycles per layer, on the golden chip (the cycle model's counters: an
ideal host). `scripts/bench_demo.py` is its command line."""

import contextlib
import io
import time


__all__ = ["measure", "TABLE_HEAD", "table_row"]

TABLE_HEAD = ("| model | array | batch | compile (s) | cycles/inference | MXU util (program) "
              "| (while active) | inferences/s at 100 MHz | cycles per inference by layer |\n"
              "|---|---|---|---|---|---|---|---|---|")


def measure(name, float_model, split, config, batch, out_dir):
    """One batch of test digits through demo model `name` compiled for `config` at `batch`."""
    from ..compiler.report import build_report
    from ..demo import CLOCK_HZ, _prepare, _run_on_chip
    started = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):
        m = _prepare(name, float_model, split, config=config, batch=batch, out_dir=out_dir)
        results = _run_on_chip({name: (m["compiled"], m["chunks"][:1])}, "golden", name)[name]
    report = build_report(m["graph"], config, [p for _, p in results], m["batch"],
                          clock_hz=CLOCK_HZ, batch=m["batch"])
    total = report.total
    return {"batch": m["batch"], "compile_s": m["timings"]["compile"],
            "cycles": report.cycles_per_inference, "util": total.utilisation,
            "active": total.active_utilisation, "ips": report.inferences_per_second,
            "layers": ", ".join(f"{row.name} {row.cycles / m['batch']:.0f}" for row in report.rows),
            "seconds": time.perf_counter() - started}


def table_row(name, config, asked_batch, r):
    """A Markdown row of `measure`'s result `r`."""
    asked = "" if r["batch"] == asked_batch else f" (asked {asked_batch})"
    return (f"| {name} | {config.rows}x{config.cols} | {r['batch']}{asked} | {r['compile_s']:.2f} "
            f"| {r['cycles']:.0f} | {100 * r['util']:.1f}% | {100 * r['active']:.1f}% "
            f"| {r['ips']:,.0f} | {r['layers']} |")
