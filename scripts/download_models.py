"""Download the MLPerf Tiny reference int8 models the TFLite tests and benchmarks use.

    python scripts/download_models.py [--dir DIR] [--force]

Fetches ad01_int8, kws_ref_model and pretrainedResnet_quant from the MLCommons
"tiny" repository (github.com/mlcommons/tiny, Apache License 2.0,
``benchmark/training/*/trained_models/``) into ``DIR/mlperf_tiny/`` (default:
``$TPU_MODELS_DIR`` or ``<repo>/../shared/models``), checks each file's
SHA-256 against the one the tests were written for, and writes a README
naming the source. Files already present with the right checksum are kept.
"""

import argparse
import hashlib
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tpu.compiler.mlperf_tiny import MODELS, models_dir  # noqa: E402


README = """# MLPerf Tiny reference models (int8 TFLite)

Unmodified model files from the MLCommons "tiny" benchmark repository
(github.com/mlcommons/tiny, Apache License 2.0), `benchmark/training/*/trained_models/`,
downloaded by scripts/download_models.py. They are data for tests and benchmarks;
they are not part of the project's source.
"""


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def download(model, target, timeout):
    """Fetch `model` into `target` through a temporary file; raise on a bad checksum."""
    request = urllib.request.Request(model.url, headers={"User-Agent": "tpu-download-models"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        data = response.read()
    actual = hashlib.sha256(data).hexdigest()
    if actual != model.sha256:
        raise ValueError(f"{model.url}: SHA-256 {actual} is not the expected {model.sha256}")
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as f:
        f.write(data)
    Path(f.name).replace(target)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None,
                        help="models directory (default: $TPU_MODELS_DIR or <repo>/../shared/models)")
    parser.add_argument("--force", action="store_true", help="download even if present")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per download")
    args = parser.parse_args(argv)
    folder = (args.dir or models_dir()) / "mlperf_tiny"
    failed = 0
    for model in MODELS.values():
        target = folder / model.file
        if target.is_file() and not args.force and sha256(target) == model.sha256:
            print(f"{model.file}: present in {folder}")
            continue
        try:
            folder.mkdir(parents=True, exist_ok=True)
            download(model, target, args.timeout)
            print(f"{model.file}: downloaded from {model.url}")
        except (urllib.error.URLError, OSError, ValueError) as e:
            print(f"{model.file}: FAILED: {e}", file=sys.stderr)
            failed += 1
            continue
        readme = folder / "README.md"
        if not readme.exists():
            readme.write_text(README)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
