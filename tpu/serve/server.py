"""`tpu serve`: compiled models behind the Open Inference Protocol.

`serve(models, devices=...)` opens one `DevicePool`, gives each model an
`InferenceSession` on it and a `TpuModel` (dynamic batching, input
checks), and runs the `kserve` SDK's `ModelServer`: HTTP/REST on `port`
(``/v2/health/live|ready``, ``/v2/models/{name}[/ready]``,
``/v2/models/{name}/infer`` with JSON or binary tensor data, ``/metrics``)
and gRPC on `grpc_port` (0: none). A full queue answers 503 with a
Retry-After header; a request the model cannot take, 400 with one line.
"""

import contextlib
import logging
import sys
import warnings
from pathlib import Path


__all__ = ["serve", "load_models", "parse_model_argument", "import_kserve"]


def import_kserve():
    """The `kserve` module, imported with an empty command line: its
    `model_server` module parses ``sys.argv`` when imported."""
    # kserve answers through FastAPI's ORJSONResponse, which FastAPI now
    # deprecates: a warning at each request that is kserve's to change, not
    # an error of this server's (tests run with PYTHONWARNINGS=error).
    warnings.filterwarnings("ignore", message="ORJSONResponse is deprecated")
    argv = sys.argv
    sys.argv = argv[:1]
    try:
        import kserve
        import kserve.model_server  # noqa: F401  (parses the command line once, here)
    except ImportError as error:
        raise ImportError(f"tpu serve needs the serving extra: pip install 'tpu[serve]' "
                          f"({error})") from None
    finally:
        sys.argv = argv
    return kserve


def parse_model_argument(text):
    """``NAME=PATH`` or ``PATH`` (named by its file's stem) -> ``(name, Path)``."""
    name, sep, path = text.partition("=")
    if not sep:
        name, path = Path(text).stem, text
    if not name or not all(c.isalnum() or c in "-_." for c in name):
        raise ValueError(f"model {text!r}: a model's name is letters, digits, '-', '_' and '.'")
    return name, Path(path)


def load_models(models, batch=None, config=None):
    """``{name: InferenceSession}`` (not yet on devices) of `models`
    (``{name: path or compiled model}``); all on one chip configuration."""
    from ..compiler.session import InferenceSession
    sessions = {}
    for name, model in models.items():
        session = InferenceSession(model, backend="golden", config=config, batch=batch)
        if sessions:
            first_name, first = next(iter(sessions.items()))
            if session.config != first.config:
                raise ValueError(f"model {name!r} is compiled for {session.config}, model "
                                 f"{first_name!r} for {first.config}: one server's models share "
                                 f"one chip configuration")
        sessions[name] = session
    return sessions


def _add_handlers(app, overloaded):
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    async def on_overloaded(_, error):
        return JSONResponse(status_code=503, content={"error": str(error)},
                            headers={"Retry-After": str(error.retry_after)})

    async def on_invalid_request(_, error):
        first = error.errors()[0] if error.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        text = f"malformed request: {where + ': ' if where else ''}{first.get('msg', error)}"
        return JSONResponse(status_code=400, content={"error": text})

    app.add_exception_handler(overloaded, on_overloaded)
    app.add_exception_handler(RequestValidationError, on_invalid_request)
    app.add_middleware(_JsonUnlessBinary)


class _JsonUnlessBinary:
    """ASGI middleware: an infer request without Inference-Header-Content-Length
    is all JSON (the protocol's binary extension says so), whatever its
    Content-Type. tritonclient sends JSON-only requests without one, which
    kserve would otherwise take for binary data."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST" \
                and scope["path"].endswith("/infer"):
            headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
            names = {k for k, _ in scope["headers"]}
            if b"inference-header-content-length" not in names:
                scope = {**scope, "headers": headers + [(b"content-type", b"application/json")]}
        await self.app(scope, receive, send)


def serve(models, devices="golden:1", *, port=8080, grpc_port=0, batch=None, config=None,
          max_delay=0.005, max_queue=512, timeout=None, ready=None, log_level=logging.WARNING):
    """Serve `models` (``{name: path or compiled model}``) until stopped (SIGINT/SIGTERM).

    ready : callable or None
        Called with the `DevicePool` once every device is open (before the
        HTTP server starts listening)."""
    kserve = import_kserve()
    from ..compiler.chunks import host_bytes
    from ..runtime import DevicePool
    from .metrics import ServeMetrics
    from .model import ServerOverloaded, TpuModel

    sessions = load_models(models, batch, config)
    first = next(iter(sessions.values()))
    arena = max([8 << 20] + [host_bytes(s.compiled) for s in sessions.values()])
    pool = DevicePool(devices, first.config, timeout=timeout, arena_bytes=arena)
    with contextlib.closing(pool):
        metrics = ServeMetrics(pool)
        served = []
        for name, session in sessions.items():
            session._open_pool(pool, {})
            model = TpuModel(name, session, max_delay=max_delay, max_queue=max_queue,
                             metrics=metrics)
            model.load()
            served.append(model)
        if ready is not None:
            ready(pool)
        server = kserve.ModelServer(http_port=port, grpc_port=grpc_port or 8081,
                                    enable_grpc=bool(grpc_port), workers=1,
                                    enable_latency_logging=False)
        for name in ("kserve", "kserve.trace", "uvicorn", "uvicorn.access", "uvicorn.error"):
            logging.getLogger(name).setLevel(log_level)
        from kserve.model_server import app
        _add_handlers(app, ServerOverloaded)
        server.start(served)
