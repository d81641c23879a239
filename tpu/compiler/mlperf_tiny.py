"""The MLPerf Tiny reference int8 models: where tests find them and where they come from.

The files are data, not part of the project's source: they live in a models
directory, ``$TPU_MODELS_DIR`` or else ``shared/models`` beside the
repository (`models_dir`), under ``mlperf_tiny/``.
``scripts/download_models.py`` fetches them from the MLCommons "tiny"
repository (Apache License 2.0) and checks their SHA-256.
"""

import os
from dataclasses import dataclass
from pathlib import Path


__all__ = ["MODELS", "TinyModel", "MODELS_VARIABLE", "models_dir", "model_path", "missing_reason"]

#: the environment variable that names the models directory
MODELS_VARIABLE = "TPU_MODELS_DIR"

#: where the files are published: github.com/mlcommons/tiny at this revision
SOURCE = "https://raw.githubusercontent.com/mlcommons/tiny/master/"


@dataclass(frozen=True)
class TinyModel:
    """One reference model: its file name, task, path in the MLCommons
    repository and the SHA-256 of the file this project tests against."""
    name: str
    task: str
    source_path: str
    sha256: str

    @property
    def file(self):
        return f"{self.name}.tflite"

    @property
    def url(self):
        return SOURCE + self.source_path


MODELS = {m.name: m for m in (
    TinyModel("ad01_int8", "anomaly detection (ToyCar autoencoder)",
              "benchmark/training/anomaly_detection/trained_models/ad01_int8.tflite",
              "87cf24194ef93d1d9b11a591d805526b98008e351655d29883c825c9c106ba24"),
    TinyModel("kws_ref_model", "keyword spotting (DS-CNN)",
              "benchmark/training/keyword_spotting/trained_models/kws_ref_model.tflite",
              "aeea436800704fce17b17292e4412630ad856e9d777c044c64ef748a880bd0ae"),
    TinyModel("pretrainedResnet_quant", "image classification (ResNet-8, CIFAR-10)",
              "benchmark/training/image_classification/trained_models/"
              "pretrainedResnet_quant.tflite",
              "3c002613d1b2475eb51dd78dfb85a546c8ae658dee71cf6ade43b022fe205415"),
)}


def _repo_root():
    return Path(__file__).resolve().parents[2]


def models_dir():
    """The models directory: ``$TPU_MODELS_DIR``, else ``shared/models`` in the
    nearest directory above the repository that has one (``<repo>/../shared/models``
    for a checkout beside ``shared``, further up for a worktree nested deeper),
    else ``<repo>/../shared/models``."""
    configured = os.environ.get(MODELS_VARIABLE)
    if configured:
        return Path(configured)
    root = _repo_root()
    for parent in root.parents:
        if (parent / "shared" / "models").is_dir():
            return parent / "shared" / "models"
    return root.parent / "shared" / "models"


def model_path(name):
    """Path of MLPerf Tiny model `name` (whether or not it exists)."""
    if name not in MODELS:
        raise KeyError(f"no MLPerf Tiny model {name!r}; known: {', '.join(MODELS)}")
    return models_dir() / "mlperf_tiny" / MODELS[name].file


def missing_reason(name):
    """None if model `name` is there, else why not (a test's skip reason)."""
    path = model_path(name)
    if path.is_file():
        return None
    return (f"{path} not found: set {MODELS_VARIABLE} to a models directory or run "
            f"scripts/download_models.py")
