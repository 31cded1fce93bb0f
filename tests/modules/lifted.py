"""Models whose function says which parameters are weights (``num_input``)."""

from tvm.script import ir as I, relax as R


@I.ir_module
class ConvWeights:
    """Two 3x3 convs with weight parameters, the second with a bias."""

    @R.function
    def main(x: R.Tensor((1, 8, 16, 16), "float32"), w1: R.Tensor((8, 8, 3, 3), "float32"),
             w2: R.Tensor((8, 8, 3, 3), "float32"), b2: R.Tensor((1, 8, 1, 1), "float32")):
        R.func_attr({"num_input": 1})
        with R.dataflow():
            a = R.nn.relu(R.nn.conv2d(x, w1, padding=[1, 1, 1, 1]))
            y = R.add(R.nn.conv2d(a, w2, padding=[1, 1, 1, 1]), b2)
            R.output(y)
        return y


@I.ir_module
class NoWeightsDeclared:
    """The same conv, its weight a parameter nothing declares a weight."""

    @R.function
    def main(x: R.Tensor((1, 8, 16, 16), "float32"), w1: R.Tensor((8, 8, 3, 3), "float32")):
        with R.dataflow():
            y = R.nn.conv2d(x, w1, padding=[1, 1, 1, 1])
            R.output(y)
        return y


@I.ir_module
class TooManyInputs:
    """``num_input`` counting more parameters than ``main`` has."""

    @R.function
    def main(x: R.Tensor((1, 8, 16, 16), "float32"), w1: R.Tensor((8, 8, 3, 3), "float32")):
        R.func_attr({"num_input": 3})
        with R.dataflow():
            y = R.nn.conv2d(x, w1, padding=[1, 1, 1, 1])
            R.output(y)
        return y
