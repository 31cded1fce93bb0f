"""``.tflite`` files in, Relax modules out, through TVM's TFLite frontend.

TVM's frontend reports what it cannot read as a bare ``NotImplementedError``
("Custom operators are currently not supported") or as an exception from deep
inside a converter, naming neither the file nor the operator.
:func:`load_tflite` reads the model's operator list itself, so the error it
raises names both: the custom operators (``MaxPoolingWithArgmax2D``...)
before the frontend is called, or the operator whose converter failed.
MediaPipe's custom operators (selfie segmentation's transpose conv,
face_landmark_with_attention's crops) are converted by
:mod:`texscope.frontend.mediapipe_ops`.

Sparse models store float16 weights sparse, ``DENSIFY`` then ``DEQUANTIZE``
(to float32) each before its conv.  TVM 0.27's frontend densifies the weight
at import but its ``DEQUANTIZE`` reads a float16 input from the file's
buffer, which a densified weight has none of (a ``TypeError``);
:class:`_Converter`'s takes the densified weight (MediaPipe's pose_detection
and face_detection_full_range_sparse import, and compute what TFLite's
interpreter computes).
"""

from __future__ import annotations

import functools
import struct
from collections import Counter
from pathlib import Path

import tvm
import tvm_ffi
from tvm import relax

from ..errors import TexscopeError
from ..ir.quiet import quiet_native_stderr
from ..ir.rebuild import bound_call, rewrite_bindings
from . import mediapipe_ops
from .naming import name_outputs

# A TFLite flatbuffer carries this file identifier at bytes 4..8.
_IDENTIFIER = b"TFL3"
# TFLite's own name for custom operators the frontend does convert.
_CONVERTED_CUSTOM = {b"TFLite_Detection_PostProcess", *mediapipe_ops.CONVERTERS}


def _tflite_package():
    try:
        import tflite  # the flatbuffer schema TVM's frontend reads
    except ImportError as err:
        raise TexscopeError("TFLite models need the tflite package: "
                            "pip install tflite") from err
    return tflite


@functools.cache
def _converter_class():
    """TVM's TFLite operator converter, its ``DEQUANTIZE`` taking a
    densified float16 weight, and converting MediaPipe's custom operators
    (:data:`texscope.frontend.mediapipe_ops.CONVERTERS`; built on first use:
    the frontend needs the tflite package)."""
    from tvm.relax.frontend.tflite.tflite_frontend import OperatorConverter
    from tflite.TensorType import TensorType

    class _Converter(OperatorConverter):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            for name, convert in mediapipe_ops.CONVERTERS.items():
                self.convert_map[name.decode()] = functools.partial(convert, self)

        def get_op_code_str(self, op):
            custom = self.model.OperatorCodes(op.OpcodeIndex()).CustomCode()
            return custom.decode() if custom in mediapipe_ops.CONVERTERS \
                else super().get_op_code_str(op)

        def convert_dequantize(self, op):
            (weight,) = self.get_input_tensors(op)
            if weight.tensor.Type() != TensorType.FLOAT16 or not self.is_prefetched(
                    weight.tensor_idx):
                return super().convert_dequantize(op)
            dense = self.exp_tab.new_const(self.get_prefetched_node(weight.tensor_idx),
                                           dtype="float16", source_name=weight.tensor.Name())
            return relax.op.astype(dense, "float32")

    return _Converter


def _operator_names(tflite) -> dict[int, str]:
    return {code: name for name, code in vars(tflite.BuiltinOperator).items()
            if not name.startswith("_")}


def _operator_name(tflite, model, operator) -> str:
    code = model.OperatorCodes(operator.OpcodeIndex())
    # TFLite >= 2.4 keeps small codes in either field; the larger one is right.
    builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
    if builtin == tflite.BuiltinOperator.CUSTOM:
        return (code.CustomCode() or b"<unnamed custom>").decode()
    return _operator_names(tflite).get(builtin, f"<builtin {builtin}>")


def _custom_operators(tflite, model) -> Counter:
    found = Counter()
    for s in range(model.SubgraphsLength()):
        graph = model.Subgraphs(s)
        for i in range(graph.OperatorsLength()):
            code = model.OperatorCodes(graph.Operators(i).OpcodeIndex())
            builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
            if builtin == tflite.BuiltinOperator.CUSTOM and code.CustomCode() not in _CONVERTED_CUSTOM:
                found[_operator_name(tflite, model, graph.Operators(i))] += 1
    return found


def _sparse_tensors(model) -> int:
    return sum(model.Subgraphs(s).Tensors(t).Sparsity() is not None
               for s in range(model.SubgraphsLength())
               for t in range(model.Subgraphs(s).TensorsLength()))


def _failing_operator(tflite, model, trace) -> str | None:
    """The operator the frontend was converting when it failed, from its
    ``convert_op_to_relax`` frame (the loop over the model's operators)."""
    operator = None
    while trace is not None:
        frame = trace.tb_frame
        if frame.f_code.co_name == "convert_op_to_relax" and "op" in frame.f_locals:
            operator = frame.f_locals["op"]
        trace = trace.tb_next
    if operator is None:
        return None
    name = _operator_name(tflite, model, operator)
    graph = model.Subgraphs(0)
    outputs = [graph.Tensors(operator.Outputs(i)).Name().decode()
               for i in range(operator.OutputsLength())]
    return f"{name} (output {', '.join(outputs)})" if outputs else name


def load_tflite(path) -> tvm.IRModule:
    """Import a ``.tflite`` model as a Relax module.

    Parameters
    ----------
    path : str or Path
        The TFLite flatbuffer.

    Returns
    -------
    tvm.IRModule
        ``main`` takes the model's inputs in its own layout (NHWC for TFLite
        image models); weights are constants.  PReLUs, which the frontend
        flattens to 1-D, are rewritten element-wise in the activation's shape.

    Raises
    ------
    TexscopeError
        Naming the file, and the operator where the frontend cannot convert
        one: a custom operator, or the operator whose conversion failed.
    """
    file = Path(path)
    data = file.read_bytes()
    if data[4:8] != _IDENTIFIER:
        raise TexscopeError(f"{file}: not a TFLite flatbuffer (no {_IDENTIFIER.decode()} identifier)")
    tflite = _tflite_package()
    from tvm.relax.frontend.tflite import from_tflite

    try:
        model = tflite.Model.GetRootAsModel(data, 0)
        _check_lengths(model, len(data))
        custom = _custom_operators(tflite, model)
    except Exception as err:  # flatbuffers reads past the end, or garbage
        raise _corrupt(file, err) from None
    if custom:
        listed = ", ".join(f"{name} (x{count})" for name, count in sorted(custom.items()))
        raise TexscopeError(f"{file}: TVM's TFLite frontend does not convert custom operators: {listed}")
    failure = None
    # A frontend failing half-way leaves a BlockBuilder in its frames, whose
    # C++ warns ("destroyed with remaining blocks") when it is freed.  The
    # error keeps its cause but not the cause's traceback, so the frames are
    # freed here, where that line is dropped, not after the error is reported.
    with quiet_native_stderr():
        try:
            mod = from_tflite(model, op_converter=_converter_class())
        except (struct.error, UnicodeDecodeError) as err:  # read past the file, or garbage
            failure = _corrupt(file, err)
        except Exception as err:  # the frontend raises anything; name where it was
            try:
                failure = _frontend_failure(file, tflite, model, err)
            except Exception:  # pylint: disable=broad-except
                failure = _corrupt(file, err)  # the model cannot be read to say where
            err.with_traceback(None)
    if failure is not None:
        raise failure
    # Operators sharing a weight tensor each get the frontend's conversion of
    # it (an astype per use, face_landmark: 17): one computes it for all.
    mod = relax.transform.EliminateCommonSubexpr()(_rewrite_flattened_prelu()(mod))
    return name_outputs(mod, _output_names(model))


def _output_names(model) -> list[str]:
    graph = model.Subgraphs(0)
    return [graph.Tensors(graph.Outputs(i)).Name().decode() for i in range(graph.OutputsLength())]


def _corrupt(file: Path, err: Exception) -> TexscopeError:
    first = (str(err).strip().splitlines() or [""])[0][:200]
    return TexscopeError(f"{file}: not a readable TFLite model, truncated or corrupt "
                         f"({type(err).__name__}: {first})")


def _check_lengths(model, size: int) -> None:
    """Raise where a vector of the flatbuffer claims more entries than the
    file has bytes for (a flipped length would loop for hours)."""
    def check(length: int, what: str) -> int:
        if not 0 <= length <= size // 4:
            raise ValueError(f"{length} {what} in a file of {size} bytes")
        return length

    check(model.BuffersLength(), "buffers")
    check(model.OperatorCodesLength(), "operator codes")
    for s in range(check(model.SubgraphsLength(), "subgraphs")):
        graph = model.Subgraphs(s)
        check(graph.OperatorsLength(), "operators")
        check(graph.TensorsLength(), "tensors")


def failure_reason(err: Exception) -> str:
    """The first line of :func:`load_tflite`'s error without the file it names
    (for a table that names the model already)."""
    return str(err).splitlines()[0].split(".tflite: ", 1)[-1]


def _frontend_failure(file: Path, tflite, model, err: Exception) -> TexscopeError:
    """The error naming the operator whose conversion raised ``err`` (its
    cause), and the model's sparse tensors where it has some."""
    operator = _failing_operator(tflite, model, err.__traceback__)
    where = f"operator {operator}" if operator else "the model"
    sparse = _sparse_tensors(model)
    note = (f" (the model has {sparse} sparse tensors, expanded by DENSIFY at run time: "
            "the operator's input is not stored dense)") if sparse else ""
    failure = TexscopeError(f"{file}: TVM's TFLite frontend failed on {where}: "
                            f"{type(err).__name__}: {err}{note}")
    failure.__cause__ = err
    return failure


def _rewrite_flattened_prelu() -> tvm.ir.transform.Pass:
    """PReLU as two element-wise maxima: TVM's frontend flattens the
    activation and the broadcast slopes to 1-D around ``R.nn.prelu(axis=0)``,
    which no packed layout can follow (every PReLU would unpack and repack
    its conv's output).  ``max(x, 0) + min(x, 0) * alpha``, alpha broadcast
    in the activation's own shape, is the same function (exactly: one of the
    two terms is zero) and packs."""
    reshape, broadcast_to, prelu_op = (tvm.ir.Op.get(f"relax.{name}")
                                       for name in ("reshape", "broadcast_to", "nn.prelu"))

    def rewrite(value, bound):
        # reshape(prelu(reshape(x), reshape(broadcast_to(slopes))), shape of x)
        unflat = bound_call(value, reshape, bound)
        prelu = None if unflat is None else bound_call(unflat.args[0], prelu_op, bound)
        if prelu is None or int(prelu.attrs.axis) != 0:
            return None
        flat_data = bound_call(prelu.args[0], reshape, bound)
        flat_alpha = bound_call(prelu.args[1], reshape, bound)
        spread = None if flat_alpha is None else bound_call(flat_alpha.args[0], broadcast_to, bound)
        if flat_data is None or spread is None:
            return None
        x, slopes = flat_data.args[0], spread.args[0]
        if not tvm_ffi.structural_equal(unflat.ty, x.ty):
            return None
        zero = relax.const(0.0, x.ty.dtype)
        return relax.op.add(relax.op.maximum(x, zero),
                            relax.op.multiply(relax.op.minimum(x, zero), slopes))

    @tvm.transform.module_pass(opt_level=0, name="texscope.RewriteFlattenedPrelu")
    def run(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return relax.transform.DeadCodeElimination()(rewrite_bindings(mod, rewrite))

    return run
