"""`TpuModel`: one compiled model as a KServe model of the Open Inference Protocol.

A request's tensors are checked (names, datatype, shape, values) by the
model's `InferenceSession`, each fault a `kserve.errors.InvalidInput` (HTTP
400, gRPC INVALID_ARGUMENT) of one line; the samples go through the model's
`Batcher` to the device pool, and the outputs come back in the model's
dtype and layout, as JSON or binary tensor data as the request asks.
"""

import time
import uuid

import numpy as np
from kserve import Model
from kserve.errors import InferenceError, InvalidInput, ServerNotReady
from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse

from ..runtime import PoolError
from .batcher import Batcher, Overloaded


__all__ = ["TpuModel", "ServerOverloaded", "V2_DATATYPES"]

#: numpy dtype -> Open Inference Protocol datatype
V2_DATATYPES = {np.dtype(np.float32): "FP32", np.dtype(np.float16): "FP16",
                np.dtype(np.float64): "FP64", np.dtype(np.int8): "INT8",
                np.dtype(np.uint8): "UINT8", np.dtype(np.int16): "INT16",
                np.dtype(np.int32): "INT32", np.dtype(np.int64): "INT64"}
_FROM_V2 = {v: k for k, v in V2_DATATYPES.items()}


class ServerOverloaded(ServerNotReady):
    """The queue is full: HTTP 503 with a Retry-After header, gRPC UNAVAILABLE."""

    def __init__(self, message, retry_after):
        super().__init__()
        self.error_msg = self.reason = message
        self.retry_after = retry_after


class TpuModel(Model):
    """`session` (an `InferenceSession` on a `DevicePool`) served as `name`.

    metrics : `tpu.serve.metrics.ServeMetrics` or None
    """

    def __init__(self, name, session, *, max_delay=0.005, max_queue=512, metrics=None):
        super().__init__(name)
        self.session = session
        self.metrics = metrics
        observe = metrics.observer(name) if metrics is not None else None
        self.batcher = Batcher(session, max_delay=max_delay, max_queue=max_queue, observe=observe)
        self.max_samples = max_queue * session.batch
        self.ready = False

    def load(self):
        self.ready = True
        return self.ready

    async def healthy(self):
        return self.ready and bool(self.session.pool.alive)

    def _types(self, specs):
        return [{"name": s.model_name, "datatype": V2_DATATYPES.get(np.dtype(s.model_dtype),
                                                                    str(s.model_dtype)),
                 "shape": [-1 if d is None else d for d in self.session._model_shape(s)]}
                for s in specs]

    def get_input_types(self):
        return self._types(self.session.graph.inputs)

    def get_output_types(self):
        return self._types(self.session.graph.outputs)

    def _feeds(self, request):
        feeds = {}
        for tensor in request.inputs:
            if tensor.name in feeds:
                raise InvalidInput(f"input {tensor.name!r} is given twice")
            dtype = _FROM_V2.get(tensor.datatype)
            if dtype is None:
                raise InvalidInput(f"input {tensor.name!r}: datatype {tensor.datatype!r} is not "
                                   f"one this server takes ({', '.join(_FROM_V2)})")
            shape = list(tensor.shape or [])
            if any(not isinstance(d, int) or d < 0 for d in shape):
                raise InvalidInput(f"input {tensor.name!r}: shape {shape} is not a list of "
                                   f"sizes >= 0")
            try:
                value = tensor.as_numpy()
            except Exception as error:
                count = int(np.prod(shape)) if shape else 1
                raise InvalidInput(f"input {tensor.name!r}: its data is not {count} "
                                   f"{tensor.datatype} values of shape {shape} "
                                   f"({str(error).splitlines()[0]})") from None
            if value.dtype != dtype or list(value.shape) != shape:
                raise InvalidInput(f"input {tensor.name!r}: its data is not {tensor.datatype} "
                                   f"values of shape {shape}")
            feeds[tensor.name] = value
        return feeds

    def _chosen(self, request):
        wanted = [o.name for o in (request.request_outputs or [])]
        try:
            return self.session._select(wanted or None)
        except ValueError as error:
            raise InvalidInput(str(error)) from None

    async def predict(self, payload, headers=None, response_headers=None):
        started = time.monotonic()
        outcome = "error"
        try:
            if not isinstance(payload, InferRequest):
                raise InvalidInput("this server speaks the Open Inference Protocol (v2): "
                                   "POST /v2/models/{name}/infer")
            chosen = self._chosen(payload)
            try:
                arrays, samples = self.session._prepare(self._feeds(payload))
            except (ValueError, TypeError) as error:
                raise InvalidInput(str(error).splitlines()[0]) from None
            if samples > self.max_samples:
                raise InvalidInput(f"the request has {samples} samples; this server takes at "
                                   f"most {self.max_samples} in one request")
            try:
                quantized = await self.batcher.submit(arrays, samples)
            except Overloaded as error:
                outcome = "overloaded"
                raise ServerOverloaded(str(error), error.retry_after) from None
            except PoolError as error:
                outcome = "device"
                raise InferenceError(str(error)) from None
            except ValueError as error:
                raise InvalidInput(str(error).splitlines()[0]) from None
            values = self.session.model_outputs(quantized, chosen)
            outputs = [InferOutput(o.model_name, list(v.shape),
                                   V2_DATATYPES.get(v.dtype, str(v.dtype)), data=v)
                       for o, v in zip(chosen, values)]
            if payload.from_grpc:
                # As raw bytes: kserve's to_grpc tests an array's truth value
                # (an error for more than one element) when given the array.
                for output, value in zip(outputs, values):
                    output.set_data_from_numpy(value, binary_data=True)
            outcome = "ok"
            return InferResponse(response_id=payload.id or str(uuid.uuid4()), model_name=self.name,
                                 infer_outputs=outputs,
                                 use_binary_outputs=payload.use_binary_outputs,
                                 requested_outputs=payload.request_outputs,
                                 from_grpc=payload.from_grpc)
        except InvalidInput:
            outcome = "invalid"
            raise
        finally:
            if self.metrics is not None:
                self.metrics.request(self.name, outcome, time.monotonic() - started)
