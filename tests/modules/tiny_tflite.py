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


def _model(code: tuple, tensors: list[tuple], operator_inputs: list[int],
           constants: dict | None = None, custom_options: bytes | None = None,
           model_inputs: tuple[int, ...] = (0,), version: int = 1) -> bytes:
    """One operator: ``code`` (builtin, custom name or None) of ``version``,
    the tensors as (name, shape, type), ``model_inputs`` indexing the
    model's inputs among them and the last its output; ``operator_inputs``
    index ``tensors``; ``constants`` maps a tensor's index to the numpy array
    its buffer holds."""
    constants = constants or {}
    builtin, custom = code
    builder = flatbuffers.Builder(1024)
    # Buffer 0 is TFLite's empty sentinel; tensor i keeps buffer i + 1.
    offsets = [_tensor(builder, name, shape, dtype, index + 1)
               for index, (name, shape, dtype) in enumerate(tensors)]
    output = len(tensors) - 1
    inputs = _vector(builder, Operator.OperatorStartInputsVector, operator_inputs,
                     builder.PrependInt32)
    outputs = _vector(builder, Operator.OperatorStartOutputsVector, [output], builder.PrependInt32)
    options = None if custom_options is None else builder.CreateByteVector(custom_options)
    Operator.OperatorStart(builder)
    Operator.OperatorAddOpcodeIndex(builder, 0)
    Operator.OperatorAddInputs(builder, inputs)
    Operator.OperatorAddOutputs(builder, outputs)
    if options is not None:
        Operator.OperatorAddCustomOptions(builder, options)
    operator = Operator.OperatorEnd(builder)

    tensor_vector = _vector(builder, SubGraph.SubGraphStartTensorsVector, offsets,
                            builder.PrependUOffsetTRelative)
    graph_inputs = _vector(builder, SubGraph.SubGraphStartInputsVector, list(model_inputs),
                           builder.PrependInt32)
    graph_outputs = _vector(builder, SubGraph.SubGraphStartOutputsVector, [output],
                            builder.PrependInt32)
    operators = _vector(builder, SubGraph.SubGraphStartOperatorsVector, [operator],
                        builder.PrependUOffsetTRelative)
    SubGraph.SubGraphStart(builder)
    SubGraph.SubGraphAddTensors(builder, tensor_vector)
    SubGraph.SubGraphAddInputs(builder, graph_inputs)
    SubGraph.SubGraphAddOutputs(builder, graph_outputs)
    SubGraph.SubGraphAddOperators(builder, operators)
    graph = SubGraph.SubGraphEnd(builder)

    custom_name = None if custom is None else builder.CreateString(custom)
    OperatorCode.OperatorCodeStart(builder)
    OperatorCode.OperatorCodeAddDeprecatedBuiltinCode(builder, builtin)
    OperatorCode.OperatorCodeAddBuiltinCode(builder, builtin)
    if custom_name is not None:
        OperatorCode.OperatorCodeAddCustomCode(builder, custom_name)
    OperatorCode.OperatorCodeAddVersion(builder, version)
    operator_code = OperatorCode.OperatorCodeEnd(builder)

    buffers = []
    for index in range(len(tensors) + 1):
        data = constants.get(index - 1)
        data = None if data is None else builder.CreateByteVector(data.tobytes())
        Buffer.BufferStart(builder)
        if data is not None:
            Buffer.BufferAddData(builder, data)
        buffers.append(Buffer.BufferEnd(builder))
    buffer_vector = _vector(builder, Model.ModelStartBuffersVector, buffers,
                            builder.PrependUOffsetTRelative)
    codes = _vector(builder, Model.ModelStartOperatorCodesVector, [operator_code],
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


def _one_operator(builtin: int, x_type: int, y_type: int, shape: list[int]) -> bytes:
    """``y = builtin(x)``, ``x`` the model's input and ``y`` its output."""
    return _model((builtin, None), [("x", shape, x_type), ("y", shape, y_type)], [0])


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


def transpose_conv_bias(image: tuple[int, int], channels: int, weights, bias,
                        options: bytes, out_shape: list[int]) -> bytes:
    """MediaPipe's custom ``Convolution2DTransposeBias`` of a float32 NHWC
    ``image`` (height, width) of ``channels``: ``weights`` (OHWI) and
    ``bias`` arrays (float32 or float16) stored in the file, ``options`` the operator's
    raw option bytes, ``out_shape`` the output tensor's declared shape."""
    float32 = tflite.TensorType.FLOAT32
    stored = {"float32": float32, "float16": tflite.TensorType.FLOAT16}
    tensors = [("x", [1, *image, channels], float32),
               ("w", list(weights.shape), stored[str(weights.dtype)]),
               ("b", list(bias.shape), stored[str(bias.dtype)]), ("y", out_shape, float32)]
    return _model((tflite.BuiltinOperator.CUSTOM, "Convolution2DTransposeBias"), tensors,
                  [0, 1, 2], {1: weights, 2: bias}, custom_options=options)


def mediapipe_custom(name: str, inputs: list[tuple], output: tuple, options: bytes | None,
                     version: int = 2) -> bytes:
    """MediaPipe's custom operator ``name`` (of ``version``) on float32
    model inputs given as (name, shape), into ``output`` (name, shape), with
    the raw option bytes ``options`` (a FlexBuffer map for those of
    face_landmark_with_attention)."""
    float32 = tflite.TensorType.FLOAT32
    tensors = [(tensor, list(shape), float32) for tensor, shape in [*inputs, output]]
    indices = list(range(len(inputs)))
    return _model((tflite.BuiltinOperator.CUSTOM, name), tensors, indices,
                  custom_options=options, model_inputs=tuple(indices), version=version)
