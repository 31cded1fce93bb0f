"""torchvision's mobile classifiers, with weights that keep activations at
their scale (no pretrained weights are needed, or reachable offline).

Random weights drawn at PyTorch's default scale shrink or blow activations
up layer after layer, until outputs are all zeros or all overflow and a
wrong kernel hides in either.  :func:`scale_keeping_init` draws each conv and
linear weight from N(0, 2 / fan-in) (Kaiming's ReLU gain; fan-in per group
for depthwise convs), biases from N(0, 0.01), and sets every batch norm near
the identity (scale in [0.8, 1.2], shift N(0, 0.05), running mean N(0, 0.05),
running variance in [0.8, 1.2]), so that each layer keeps its input's scale
and the logits of a standard-normal image are of order one.
"""

from __future__ import annotations

import math

from ..errors import TexscopeError

# The torchvision constructors texscope is tested on (tests/test_torch.py).
TORCHVISION_MODELS = ("mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "resnet18",
                      "shufflenet_v2_x1_0", "squeezenet1_1")


def scale_keeping_init(module, seed: int = 0):
    """Draw ``module``'s weights and batch-norm statistics in place so that
    activations keep their scale (see the module's docstring); ``module``,
    in eval mode."""
    import torch
    from torch import nn

    generator = torch.Generator().manual_seed(seed)

    def normal(tensor, std):
        with torch.no_grad():
            tensor.copy_(torch.randn(tensor.shape, generator=generator) * std)

    def uniform(tensor, low, high):
        with torch.no_grad():
            tensor.copy_(low + (high - low) * torch.rand(tensor.shape, generator=generator))

    for layer in module.modules():
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            fan_in = layer.weight[0].numel()
            normal(layer.weight, math.sqrt(2.0 / fan_in))
            if layer.bias is not None:
                normal(layer.bias, 0.01)
        elif isinstance(layer, nn.BatchNorm2d):
            uniform(layer.weight, 0.8, 1.2)
            normal(layer.bias, 0.05)
            normal(layer.running_mean, 0.05)
            uniform(layer.running_var, 0.8, 1.2)
    return module.eval()


def torchvision_model(name: str, seed: int = 0):
    """One of :data:`TORCHVISION_MODELS`, without pretrained weights, drawn by
    :func:`scale_keeping_init`, in eval mode."""
    if name not in TORCHVISION_MODELS:
        raise TexscopeError(f"no torchvision model {name!r}; texscope's are "
                            f"{', '.join(TORCHVISION_MODELS)}")
    try:
        import torchvision
    except ImportError as err:
        raise TexscopeError("torchvision models need torchvision: pip install torchvision") from err
    return scale_keeping_init(getattr(torchvision.models, name)(weights=None), seed)
