"""Reading an ONNX model file and the small accessors of its protobufs."""

import os

import numpy as np

from ..errors import ModelError


__all__ = ["QUANT_OPS", "one_line", "load_model", "node_attrs", "constant_value",
           "declared_dims", "elem_dtype"]

#: Operators of a quantized model (a model with none of them is float).
QUANT_OPS = {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "QGemm",
             "QLinearAdd", "QLinearAveragePool", "QLinearGlobalAveragePool", "QLinearSigmoid",
             "QLinearSoftmax", "QLinearLeakyRelu", "MatMulInteger", "ConvInteger",
             "DynamicQuantizeLinear"}


def one_line(exc):
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:197] + "..."


def load_model(model):
    import onnx
    from google.protobuf.message import DecodeError

    if isinstance(model, onnx.ModelProto):
        proto, source = model, model.graph.name or "model"
    else:
        bytes_given = isinstance(model, (bytes, bytearray))
        source = "model" if bytes_given else os.path.basename(os.fspath(model))
        if not bytes_given and not os.path.isfile(model):
            raise ModelError(f"{os.fspath(model)}: cannot read the model: no such file")
        try:
            # onnx.load also reads weights stored as external data next to the file
            proto = onnx.load_model_from_string(bytes(model)) if bytes_given \
                else onnx.load(os.fspath(model))
        except OSError as exc:
            raise ModelError(f"{source}: cannot read the model: {exc.strerror or exc}") from None
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise ModelError(f"{source}: not an ONNX model (truncated or corrupt file): "
                             f"{one_line(exc)}") from None
    try:
        onnx.checker.check_model(proto)
    except (onnx.checker.ValidationError, ValueError, RuntimeError) as exc:
        raise ModelError(f"{source}: not a valid ONNX model (truncated or corrupt?): "
                         f"{one_line(exc)}") from None
    if not proto.graph.node:
        raise ModelError(f"{source}: the model's graph has no nodes")
    if not any(node.op_type in QUANT_OPS for node in proto.graph.node):
        raise ModelError(f"{source}: the model is not quantized: quantize it with "
                         f"onnxruntime.quantization.quantize_static (QDQ or QOperator form, "
                         f"int8 weights) first")
    return proto, source


def node_attrs(node):
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def constant_value(node):
    from onnx import numpy_helper
    for a in node.attribute:
        if a.name == "value":
            return numpy_helper.to_array(a.t)
        if a.name == "value_float":
            return np.array(a.f, np.float32)
        if a.name == "value_floats":
            return np.array(list(a.floats), np.float32)
        if a.name == "value_int":
            return np.array(a.i, np.int64)
        if a.name == "value_ints":
            return np.array(list(a.ints), np.int64)
    return None


def declared_dims(value_info):
    """The declared shape of a graph input/output: ints, None where symbolic."""
    t = value_info.type.tensor_type
    if not t.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)


def elem_dtype(value_info):
    from onnx import helper
    return np.dtype(helper.tensor_dtype_to_np_dtype(value_info.type.tensor_type.elem_type))

