"""Benchmark: how often the chip's results equal ONNX Runtime's, per layer kind.

Runs tests/test_onnx_frontend.py (every layer fed ONNX Runtime's values of
its inputs, and whole models end to end, on models quantized by
quantize_static in both forms) with $TPU_AGREEMENT_LOG set, and prints per
kind of layer how many values were compared, the share equal to ONNX
Runtime's and the most steps any value was off (the table in
docs/onnx_frontend.md).

    .venv/bin/python scripts/bench_onnx_agreement.py [-k PYTEST_EXPRESSION]
"""

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile


def summarise(path):
    totals = collections.defaultdict(lambda: [0, 0, 0])
    with open(path) as log:
        for line in log:
            entry = json.loads(line)
            total = totals[entry["kind"]]
            total[0] += entry["values"]
            total[1] += entry["equal"]
            total[2] = max(total[2], entry["max"])
    print("| layer | values | equal | most steps off |")
    print("|---|---|---|---|")
    for kind, (values, equal, most) in sorted(totals.items()):
        print(f"| {kind} | {values:,} | {100 * equal / values:.2f}% | {most} |")
    return totals


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default=None, help="only the tests pytest -k selects")
    args = parser.parse_args(argv)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "agreement.jsonl")
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   os.path.join(root, "tests", "test_onnx_frontend.py")]
        if args.k:
            command += ["-k", args.k]
        env = {**os.environ, "TPU_AGREEMENT_LOG": log}
        status = subprocess.run(command, cwd=root, env=env).returncode
        if not os.path.exists(log):
            print("no values compared", file=sys.stderr)
            return 1
        summarise(log)
    return status


if __name__ == "__main__":
    sys.exit(main())
