"""`tpu serve`: the chip behind the Open Inference Protocol (KServe v2).

Needs the ``serve`` extra (``pip install 'tpu[serve]'``: the `kserve` SDK).
`serve` runs the server; `tpu.serve.batcher` gathers requests into the
compiled batch; `tpu.serve.model` is one model's protocol endpoint;
`tpu.serve.metrics` its Prometheus metrics. docs/serve.md describes it.
"""

from .server import import_kserve, load_models, parse_model_argument, serve


__all__ = ["serve", "load_models", "parse_model_argument", "import_kserve"]
