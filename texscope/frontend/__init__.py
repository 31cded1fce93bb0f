"""Reading model files: TVMScript, ONNX and TFLite, with the model's names."""

from .. import _submodules_on_access

__getattr__ = _submodules_on_access(__name__)
