"""Small TFLite models for tests, written with the ``tflite`` package's
generated flatbuffer builders (no TensorFlow needed).

``ModelBuilder`` collects tensors and operators and `build` returns the
``.tflite`` bytes::

    m = ModelBuilder()
    x = m.tensor("x", [1, 8], "INT8", scale=0.1, zero_point=3)
    ...
    m.operator("FULLY_CONNECTED", [x, w, b], [y], "FullyConnectedOptions",
               FusedActivationFunction=0)
    data = m.build(inputs=[x], outputs=[y])
"""

import flatbuffers
import numpy as np
import tflite


_TYPES = {"FLOAT32": np.float32, "INT32": np.int32, "INT8": np.int8, "UINT8": np.uint8,
          "INT16": np.int16, "INT64": np.int64}


class ModelBuilder:
    def __init__(self):
        self.tensors = []
        self.operators = []
        self.codes = []

    def tensor(self, name, shape, kind, scale=None, zero_point=None, axis=0, data=None):
        """Add a tensor; its index. ``scale``/``zero_point`` scalars or per-channel
        lists; ``data`` constant values (stored in the tensor's type)."""
        if data is not None:
            data = np.asarray(data, dtype=_TYPES[kind]).reshape(shape)
        self.tensors.append(dict(name=name, shape=list(shape), kind=kind, scale=scale,
                                 zero_point=zero_point, axis=axis, data=data))
        return len(self.tensors) - 1

    def operator(self, op, inputs, outputs, options=None, **fields):
        """Add an operator by builtin name with its options table name and fields."""
        code = getattr(tflite.BuiltinOperator, op)
        if code not in self.codes:
            self.codes.append(code)
        self.operators.append(dict(code=self.codes.index(code), inputs=inputs, outputs=outputs,
                                   options=options, fields=fields))

    # Serialization ------------------------------------------------------------------

    @staticmethod
    def _vector(b, start, values, prepend):
        start(b, len(values))
        for v in reversed(values):
            prepend(v)
        return b.EndVector()

    def _ints(self, b, start, values):
        return self._vector(b, start, [int(v) for v in values], b.PrependInt32)

    def build(self, inputs, outputs):
        b = flatbuffers.Builder(1024)
        # Buffers: 0 is the empty sentinel, then one per constant tensor.
        buffer_data = [None]
        tensor_buffers = []
        for t in self.tensors:
            if t["data"] is None:
                tensor_buffers.append(0)
            else:
                buffer_data.append(t["data"].tobytes())
                tensor_buffers.append(len(buffer_data) - 1)
        buffers = []
        for raw in buffer_data:
            data = None
            if raw is not None:
                b.StartVector(1, len(raw), 16)
                for byte in reversed(raw):
                    b.PrependByte(byte)
                data = b.EndVector()
            tflite.BufferStart(b)
            if data is not None:
                tflite.BufferAddData(b, data)
            buffers.append(tflite.BufferEnd(b))
        tensors = []
        for t, buffer in zip(self.tensors, tensor_buffers):
            name = b.CreateString(t["name"])
            shape = self._ints(b, tflite.TensorStartShapeVector, t["shape"])
            quant = None
            if t["scale"] is not None:
                scales = np.atleast_1d(np.asarray(t["scale"], dtype=np.float32))
                zps = np.atleast_1d(np.asarray(t["zero_point"] if t["zero_point"] is not None
                                               else 0, dtype=np.int64))
                if zps.size == 1 and scales.size > 1:
                    zps = np.full(scales.size, zps[0])
                scale_vec = self._vector(b, tflite.QuantizationParametersStartScaleVector,
                                         [float(s) for s in scales], b.PrependFloat32)
                zp_vec = self._vector(b, tflite.QuantizationParametersStartZeroPointVector,
                                      [int(z) for z in zps], b.PrependInt64)
                tflite.QuantizationParametersStart(b)
                tflite.QuantizationParametersAddScale(b, scale_vec)
                tflite.QuantizationParametersAddZeroPoint(b, zp_vec)
                tflite.QuantizationParametersAddQuantizedDimension(b, t["axis"])
                quant = tflite.QuantizationParametersEnd(b)
            tflite.TensorStart(b)
            tflite.TensorAddShape(b, shape)
            tflite.TensorAddType(b, getattr(tflite.TensorType, t["kind"]))
            tflite.TensorAddBuffer(b, buffer)
            tflite.TensorAddName(b, name)
            if quant is not None:
                tflite.TensorAddQuantization(b, quant)
            tensors.append(tflite.TensorEnd(b))
        operators = []
        for op in self.operators:
            ins = self._ints(b, tflite.OperatorStartInputsVector, op["inputs"])
            outs = self._ints(b, tflite.OperatorStartOutputsVector, op["outputs"])
            options = None
            if op["options"]:
                name = op["options"]
                getattr(tflite, f"{name}Start")(b)
                for field, value in op["fields"].items():
                    getattr(tflite, f"{name}Add{field}")(b, value)
                options = getattr(tflite, f"{name}End")(b)
            tflite.OperatorStart(b)
            tflite.OperatorAddOpcodeIndex(b, op["code"])
            tflite.OperatorAddInputs(b, ins)
            tflite.OperatorAddOutputs(b, outs)
            if options is not None:
                tflite.OperatorAddBuiltinOptionsType(b, getattr(tflite.BuiltinOptions,
                                                                op["options"]))
                tflite.OperatorAddBuiltinOptions(b, options)
            operators.append(tflite.OperatorEnd(b))
        tensor_vec = self._vector(b, tflite.SubGraphStartTensorsVector, tensors, b.PrependUOffsetTRelative)
        op_vec = self._vector(b, tflite.SubGraphStartOperatorsVector, operators,
                              b.PrependUOffsetTRelative)
        in_vec = self._ints(b, tflite.SubGraphStartInputsVector, inputs)
        out_vec = self._ints(b, tflite.SubGraphStartOutputsVector, outputs)
        tflite.SubGraphStart(b)
        tflite.SubGraphAddTensors(b, tensor_vec)
        tflite.SubGraphAddOperators(b, op_vec)
        tflite.SubGraphAddInputs(b, in_vec)
        tflite.SubGraphAddOutputs(b, out_vec)
        subgraph = tflite.SubGraphEnd(b)
        codes = []
        for code in self.codes:
            tflite.OperatorCodeStart(b)
            tflite.OperatorCodeAddBuiltinCode(b, code)
            tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
            tflite.OperatorCodeAddVersion(b, 1)
            codes.append(tflite.OperatorCodeEnd(b))
        code_vec = self._vector(b, tflite.ModelStartOperatorCodesVector, codes,
                                b.PrependUOffsetTRelative)
        sub_vec = self._vector(b, tflite.ModelStartSubgraphsVector, [subgraph],
                               b.PrependUOffsetTRelative)
        buf_vec = self._vector(b, tflite.ModelStartBuffersVector, buffers,
                               b.PrependUOffsetTRelative)
        description = b.CreateString("test model")
        tflite.ModelStart(b)
        tflite.ModelAddVersion(b, 3)
        tflite.ModelAddOperatorCodes(b, code_vec)
        tflite.ModelAddSubgraphs(b, sub_vec)
        tflite.ModelAddBuffers(b, buf_vec)
        tflite.ModelAddDescription(b, description)
        b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())
