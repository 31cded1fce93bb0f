"""Reading model files: TVMScript, ONNX, TFLite and PyTorch (``torch.export``),
with the model's names."""

from .. import _submodules_on_access

__getattr__ = _submodules_on_access(__name__)
