"""The ONNX front end: a quantized ONNX model in, an `ir.Graph` out.

`import_onnx` takes the two forms ONNX Runtime's ``quantize_static`` writes:

* **QDQ**: float operators between DequantizeLinear (of int8/uint8
  activations, int8 weights, int32 biases) and QuantizeLinear nodes. Each
  pattern ``DQ -> op -> Q`` becomes one IR layer whose output has the
  quantization of the Q that follows.
* **QOperator**: QLinearConv, QLinearMatMul and the com.microsoft QGemm,
  QLinearAdd, QLinearAveragePool, QLinearGlobalAveragePool, QLinearSigmoid
  and QLinearSoftmax, with MaxPool, Flatten and Reshape on int8 tensors,
  QuantizeLinear at the inputs and DequantizeLinear at the outputs. Operators
  the quantizer leaves in float (e.g. Tanh) sit between a DequantizeLinear
  and a QuantizeLinear, as in QDQ, and are read the same way.

NCHW images become the IR's (H, W, C); Conv weights OIHW become (KH, KW,
Cin, Cout); Dense weights are (K, N). A Relu, Clip, Sigmoid or Tanh right
after a Dense or Conv2D that nothing else reads is fused into its
``activation``. Models the chip cannot run raise `UnsupportedModel` naming
the node; files that are not quantized ONNX models raise `ModelError`.

The package, one module per part: `loading` (the file), `graph` (the walk,
tensors, quantization parameters, weights, fusion) and one mixin per
operator family, each with an ``op_<OpType>`` method per operator:
`quantize` (QuantizeLinear, DequantizeLinear, requantizing layers),
`matrix` (Conv, MatMul, Gemm), `pooling`, `elementwise` (activations, Add,
Softmax) and `shapes` (Flatten, Reshape, Identity). A new operator is a
method in its family's mixin (and a name in `graph.SUPPORTED_OPS`).
"""

from .elementwise import ElementwiseOps
from .graph import SUPPORTED_OPS, GraphReader
from .loading import load_model
from .matrix import MatrixOps
from .pooling import PoolingOps
from .quantize import QuantizeOps
from .shapes import ShapeOps


__all__ = ["import_onnx", "SUPPORTED_OPS"]


class _Importer(MatrixOps, PoolingOps, ElementwiseOps, ShapeOps, QuantizeOps, GraphReader):
    """The graph reader with every operator family."""


def import_onnx(model, name=None):
    """Read a quantized ONNX model (a path, bytes or an ``onnx.ModelProto``)
    into an `ir.Graph`. ``name`` labels the graph in messages (default: the
    file name or the graph's name)."""
    proto, source = load_model(model)
    return _Importer(proto, name or source).run()
