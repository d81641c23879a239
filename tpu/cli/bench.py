"""``tpu bench``: the benchmark suite (`tpu.bench.run_bench`).

`add_bench_commands(subparsers, add_config_options)` adds the command to the
``tpu`` parser."""

from pathlib import Path

from ..config import TPUConfig


__all__ = ["add_bench_commands", "cmd_bench"]


def cmd_bench(args):
    from ..bench import run_bench
    from .common import CommandError, _config_from
    if args.publish:
        return _publish(args)
    if args.time_log:
        raise CommandError("--time-log goes with --publish DIR")
    config = _config_from(args)
    if not args.out:
        raise CommandError("--out: the output directory is empty")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise CommandError(f"--out {args.out}: not a directory")
    backends = () if args.golden_only else None
    words = ["tpu bench", *(["--quick"] if args.quick else []),
             *(["--golden-only"] if args.golden_only else []), f"--out {args.out}"]
    words += [f"--profile {args.profile}"] * bool(getattr(args, "profile", None))
    words += [f"--{name.replace('_', '-')} {getattr(args, name)}" for name in TPUConfig.field_names()
              if getattr(args, name, None) is not None]
    run_bench(args.out, quick=args.quick, config=config, backends=backends,
              command=" ".join(words))
    print(f"{args.out}/report.md, {args.out}/results.json and plots written")


def _publish(args):
    from ..bench.report import publish_run
    from .common import CommandError
    run = Path(args.publish)
    if not (run / "results.json").is_file():
        raise CommandError(f"--publish {run}: no results.json of a tpu bench run there")
    if args.time_log and not Path(args.time_log).is_file():
        raise CommandError(f"--time-log {args.time_log}: no such file")
    try:
        doc = publish_run(run, args.time_log)
    except ValueError as error:
        raise CommandError(f"--publish {run}: {error}") from None
    print(f"{doc}, docs/img/bench_* and the generated section of docs/benchmarks.md written "
          f"from {run}")


def add_bench_commands(subparsers, add_config_options):
    """Add ``bench`` to the ``tpu`` parser's `subparsers`."""
    p = subparsers.add_parser(
        "bench", help="measure the chip: GEMM sweep, roofline, models, simulation speed, "
                      "design space",
        description="Run the benchmark suite on the golden model and the RTL (Verilator; "
                    "Icarus too in the full run) and write DIR/report.md, DIR/results.json "
                    "and PNG plots. --quick takes a few minutes on 2 cores.")
    p.add_argument("--quick", action="store_true", help="the short suite (one Verilator run)")
    p.add_argument("--out", default="build/bench/report", metavar="DIR",
                   help="output directory (default build/bench/report)")
    p.add_argument("--golden-only", action="store_true", help="no RTL simulation")
    p.add_argument("--publish", metavar="DIR",
                   help="measure nothing: render the run in DIR again and publish it into "
                        "docs/ (bench_report.md, img/bench_*, benchmarks.md's generated section)")
    p.add_argument("--time-log", metavar="FILE",
                   help="with --publish: /usr/bin/time -v output of the run, for its CPU time "
                        "when the run did not record it")
    add_config_options(p)
    p.set_defaults(func=cmd_bench)
