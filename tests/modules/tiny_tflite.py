"""Small TFLite flatbuffers written with the tflite package's builders, for
what no published model shows any more."""

import importlib

import flatbuffers
import tflite

# The modules holding the builder functions (the package's names are the
# reader classes).
Buffer, Model, Operator, OperatorCode, SubGraph, Tensor = (
    importlib.import_module(f"tflite.{name}")
    for name in ("Buffer", "Model", "Operator", "OperatorCode", "SubGraph", "Tensor"))


def _vector(builder, start, items, prepend):
    start(builder, len(items))
    for item in reversed(items):
        prepend(item)
    return builder.EndVector()


def _tensor(builder, name: str, shape: list[int], dtype: int, buffer: int):
    name_offset = builder.CreateString(name)
    shape_offset = _vector(builder, Tensor.TensorStartShapeVector, shape, builder.PrependInt32)
    Tensor.TensorStart(builder)
    Tensor.TensorAddShape(builder, shape_offset)
    Tensor.TensorAddType(builder, dtype)
    Tensor.TensorAddBuffer(builder, buffer)
    Tensor.TensorAddName(builder, name_offset)
    return Tensor.TensorEnd(builder)


def _one_operator(builtin: int, x_type: int, y_type: int, shape: list[int]) -> bytes:
    """``y = builtin(x)``, ``x`` the model's input and ``y`` its output."""
    builder = flatbuffers.Builder(256)
    tensors = [_tensor(builder, "x", shape, x_type, 1),
               _tensor(builder, "y", shape, y_type, 2)]
    inputs = _vector(builder, Operator.OperatorStartInputsVector, [0], builder.PrependInt32)
    outputs = _vector(builder, Operator.OperatorStartOutputsVector, [1], builder.PrependInt32)
    Operator.OperatorStart(builder)
    Operator.OperatorAddOpcodeIndex(builder, 0)
    Operator.OperatorAddInputs(builder, inputs)
    Operator.OperatorAddOutputs(builder, outputs)
    operator = Operator.OperatorEnd(builder)

    tensor_vector = _vector(builder, SubGraph.SubGraphStartTensorsVector, tensors,
                            builder.PrependUOffsetTRelative)
    graph_inputs = _vector(builder, SubGraph.SubGraphStartInputsVector, [0], builder.PrependInt32)
    graph_outputs = _vector(builder, SubGraph.SubGraphStartOutputsVector, [1],
                            builder.PrependInt32)
    operators = _vector(builder, SubGraph.SubGraphStartOperatorsVector, [operator],
                        builder.PrependUOffsetTRelative)
    SubGraph.SubGraphStart(builder)
    SubGraph.SubGraphAddTensors(builder, tensor_vector)
    SubGraph.SubGraphAddInputs(builder, graph_inputs)
    SubGraph.SubGraphAddOutputs(builder, graph_outputs)
    SubGraph.SubGraphAddOperators(builder, operators)
    graph = SubGraph.SubGraphEnd(builder)

    OperatorCode.OperatorCodeStart(builder)
    OperatorCode.OperatorCodeAddDeprecatedBuiltinCode(builder, builtin)
    OperatorCode.OperatorCodeAddBuiltinCode(builder, builtin)
    OperatorCode.OperatorCodeAddVersion(builder, 1)
    code = OperatorCode.OperatorCodeEnd(builder)

    buffers = []
    for _ in range(3):  # buffer 0 is TFLite's empty sentinel; x and y hold no data
        Buffer.BufferStart(builder)
        buffers.append(Buffer.BufferEnd(builder))
    buffer_vector = _vector(builder, Model.ModelStartBuffersVector, buffers,
                            builder.PrependUOffsetTRelative)
    codes = _vector(builder, Model.ModelStartOperatorCodesVector, [code],
                    builder.PrependUOffsetTRelative)
    graphs = _vector(builder, Model.ModelStartSubgraphsVector, [graph],
                     builder.PrependUOffsetTRelative)
    Model.ModelStart(builder)
    Model.ModelAddVersion(builder, 3)
    Model.ModelAddOperatorCodes(builder, codes)
    Model.ModelAddSubgraphs(builder, graphs)
    Model.ModelAddBuffers(builder, buffer_vector)
    builder.Finish(Model.ModelEnd(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def float16_input_dequantized() -> bytes:
    """``y = DEQUANTIZE(x)`` with ``x`` a float16 model input: TVM 0.27's
    converter reads a float16 DEQUANTIZE input from the file's buffer, which
    an input has none of, and raises a TypeError half-way through the
    conversion."""
    return _one_operator(tflite.BuiltinOperator.DEQUANTIZE, tflite.TensorType.FLOAT16,
                         tflite.TensorType.FLOAT32, [1, 4])


def relu() -> bytes:
    """``y = RELU(x)`` on a float32 NHWC image: a model every tool runs in a second."""
    return _one_operator(tflite.BuiltinOperator.RELU, tflite.TensorType.FLOAT32,
                         tflite.TensorType.FLOAT32, [1, 8, 8, 4])
