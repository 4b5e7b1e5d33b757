"""``tensorplay_jax.nn``: modules on the local tape, losses, and a bridge to plain JAX loops.

Layers keep their parameters as grad-requiring ``Parameter`` Tensors and run
each forward as one tape node (``tp.apply``), so ``loss.backward()`` fills
``p.grad``. For ``jax.grad``/``jit``/``optax`` loops, take the parameters as a
pytree with ``get_parameters`` and run the module with ``functional_call``.
Initialisations follow tensorplay and draw from ``tp.manual_seed``.
"""

from tensorplay_jax.nn import functional as functional
from tensorplay_jax.nn import init as init
from tensorplay_jax.nn._activation import AdaptiveAvgPool2d as AdaptiveAvgPool2d
from tensorplay_jax.nn._activation import Dropout as Dropout
from tensorplay_jax.nn._activation import Dropout2d as Dropout2d
from tensorplay_jax.nn._activation import Flatten as Flatten
from tensorplay_jax.nn._activation import LogSoftmax as LogSoftmax
from tensorplay_jax.nn._activation import MaxPool2d as MaxPool2d
from tensorplay_jax.nn._activation import ReLU as ReLU
from tensorplay_jax.nn._activation import Sigmoid as Sigmoid
from tensorplay_jax.nn._activation import Softmax as Softmax
from tensorplay_jax.nn._activation import Tanh as Tanh
from tensorplay_jax.nn._container import ModuleDict as ModuleDict
from tensorplay_jax.nn._container import ModuleList as ModuleList
from tensorplay_jax.nn._container import Sequential as Sequential
from tensorplay_jax.nn._conv import Conv2d as Conv2d
from tensorplay_jax.nn._functional_call import functional_call as functional_call
from tensorplay_jax.nn._functional_call import get_parameters as get_parameters
from tensorplay_jax.nn._linear import Identity as Identity
from tensorplay_jax.nn._linear import Linear as Linear
from tensorplay_jax.nn._loss import CrossEntropyLoss as CrossEntropyLoss
from tensorplay_jax.nn._loss import L1Loss as L1Loss
from tensorplay_jax.nn._loss import MSELoss as MSELoss
from tensorplay_jax.nn._loss import NLLLoss as NLLLoss
from tensorplay_jax.nn._module import Module as Module
from tensorplay_jax.nn._normalization import BatchNorm2d as BatchNorm2d
from tensorplay_jax.nn._normalization import LayerNorm as LayerNorm
from tensorplay_jax.nn._parameter import Parameter as Parameter
from tensorplay_jax.nn._recurrent import LSTM as LSTM
from tensorplay_jax.nn._sparse import Embedding as Embedding
from tensorplay_jax.nn._sparse import EmbeddingBag as EmbeddingBag

__all__ = [
    "AdaptiveAvgPool2d",
    "BatchNorm2d",
    "Conv2d",
    "CrossEntropyLoss",
    "Dropout",
    "Dropout2d",
    "Embedding",
    "EmbeddingBag",
    "Flatten",
    "Identity",
    "L1Loss",
    "LSTM",
    "LayerNorm",
    "Linear",
    "LogSoftmax",
    "MSELoss",
    "MaxPool2d",
    "Module",
    "ModuleDict",
    "ModuleList",
    "NLLLoss",
    "Parameter",
    "ReLU",
    "Sequential",
    "Sigmoid",
    "Softmax",
    "Tanh",
    "functional",
    "functional_call",
    "get_parameters",
    "init",
]
