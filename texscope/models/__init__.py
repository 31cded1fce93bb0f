"""Models to try texscope on: the bundled examples, the zoo, and the
MediaPipe corpus of published models, torchvision's mobile classifiers."""

from .. import _submodules_on_access

__getattr__ = _submodules_on_access(__name__)
