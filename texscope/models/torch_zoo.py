"""torchvision's mobile classifiers, with weights that keep activations at
their scale (no pretrained weights are needed, or reachable offline).

Random weights drawn at PyTorch's default scale shrink or blow activations
up layer after layer, until outputs are all zeros or all overflow and a
wrong kernel hides in either.  :func:`scale_keeping_init` draws each conv
weight from N(0, 2 / fan-in) (Kaiming's ReLU gain; fan-in per group for
depthwise convs), each linear weight from N(0, 1 / fan-in), biases from
N(0, 0.01), batch-norm scales from [0.8, 1.2] and shifts from N(0, 0.05);
then it sets each batch norm's running mean and variance to those of its
input on one standard-normal batch (as a trained network's are to its
data), so that every batch norm keeps its output near unit scale, residual
sums and concatenations do not grow layer after layer, and the logits of a
standard-normal image are of order one.
"""

from __future__ import annotations

import math

from ..errors import TexscopeError

# The torchvision constructors texscope is tested on (tests/test_torch.py).
TORCHVISION_MODELS = ("mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "resnet18",
                      "shufflenet_v2_x1_0", "squeezenet1_1")


def scale_keeping_init(module, seed: int = 0, size: int = 224):
    """Draw ``module``'s weights and batch-norm statistics in place so that
    activations keep their scale (see the module's docstring); ``module``,
    in eval mode.  The statistics are measured on two ``size`` x ``size``
    images: at another size the deepest layers' borders weigh differently,
    and the scale drifts."""
    import torch
    from torch import nn

    generator = torch.Generator().manual_seed(seed)

    def normal(tensor, std):
        with torch.no_grad():
            tensor.copy_(torch.randn(tensor.shape, generator=generator) * std)

    def uniform(tensor, low, high):
        with torch.no_grad():
            tensor.copy_(low + (high - low) * torch.rand(tensor.shape, generator=generator))

    norms = []
    for layer in module.modules():
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            fan_in = layer.weight[0].numel()
            gain = 2.0 if isinstance(layer, nn.Conv2d) else 1.0
            normal(layer.weight, math.sqrt(gain / fan_in))
            if layer.bias is not None:
                normal(layer.bias, 0.01)
        elif isinstance(layer, nn.BatchNorm2d):
            uniform(layer.weight, 0.8, 1.2)
            normal(layer.bias, 0.05)
            norms.append(layer)
    # Momentum 1: the running statistics become those of this one batch.
    for layer in norms:
        layer.reset_running_stats()
        layer.momentum = 1.0
    module.train()
    # Train mode draws from the global generator too (stochastic depth).
    with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(seed)
        module(torch.randn((2, 3, size, size), generator=generator))
    for layer in norms:
        layer.momentum = 0.1
    return module.eval()


def torchvision_model(name: str, seed: int = 0, size: int = 224):
    """One of :data:`TORCHVISION_MODELS`, without pretrained weights, drawn by
    :func:`scale_keeping_init` for ``size`` x ``size`` images, in eval mode."""
    if name not in TORCHVISION_MODELS:
        raise TexscopeError(f"no torchvision model {name!r}; texscope's are "
                            f"{', '.join(TORCHVISION_MODELS)}")
    try:
        import torchvision
    except ImportError as err:
        raise TexscopeError("torchvision models need torchvision: pip install torchvision") from err
    return scale_keeping_init(getattr(torchvision.models, name)(weights=None), seed, size)
