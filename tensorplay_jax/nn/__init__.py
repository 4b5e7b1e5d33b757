"""``tensorplay_jax.nn``: modules on the local tape, losses, and a bridge to plain JAX loops.

Layers keep their parameters as grad-requiring ``Parameter`` Tensors and run
each forward as one tape node (``tp.apply``), so ``loss.backward()`` fills
``p.grad``. For ``jax.grad``/``jit``/``optax`` loops, take the parameters as a
pytree with ``get_parameters`` and run the module with ``functional_call``.
Initialisations follow tensorplay and draw from ``tp.manual_seed``.
"""

from tensorplay_jax.nn import functional as functional
from tensorplay_jax.nn import init as init
from tensorplay_jax.nn import utils as utils
from tensorplay_jax.nn._activation import CELU as CELU
from tensorplay_jax.nn._activation import ELU as ELU
from tensorplay_jax.nn._activation import GELU as GELU
from tensorplay_jax.nn._activation import GLU as GLU
from tensorplay_jax.nn._activation import SELU as SELU
from tensorplay_jax.nn._activation import AdaptiveAvgPool2d as AdaptiveAvgPool2d
from tensorplay_jax.nn._activation import AvgPool2d as AvgPool2d
from tensorplay_jax.nn._activation import Dropout as Dropout
from tensorplay_jax.nn._activation import Dropout2d as Dropout2d
from tensorplay_jax.nn._activation import Flatten as Flatten
from tensorplay_jax.nn._activation import Hardsigmoid as Hardsigmoid
from tensorplay_jax.nn._activation import Hardswish as Hardswish
from tensorplay_jax.nn._activation import Hardtanh as Hardtanh
from tensorplay_jax.nn._activation import LeakyReLU as LeakyReLU
from tensorplay_jax.nn._activation import LogSigmoid as LogSigmoid
from tensorplay_jax.nn._activation import LogSoftmax as LogSoftmax
from tensorplay_jax.nn._activation import MaxPool2d as MaxPool2d
from tensorplay_jax.nn._activation import Mish as Mish
from tensorplay_jax.nn._activation import ReLU as ReLU
from tensorplay_jax.nn._activation import ReLU6 as ReLU6
from tensorplay_jax.nn._activation import Sigmoid as Sigmoid
from tensorplay_jax.nn._activation import SiLU as SiLU
from tensorplay_jax.nn._activation import Softmax as Softmax
from tensorplay_jax.nn._activation import Softmin as Softmin
from tensorplay_jax.nn._activation import Softplus as Softplus
from tensorplay_jax.nn._activation import Softsign as Softsign
from tensorplay_jax.nn._activation import Tanh as Tanh
from tensorplay_jax.nn._activation import Threshold as Threshold
from tensorplay_jax.nn._activation import Unflatten as Unflatten
from tensorplay_jax.nn._container import ModuleDict as ModuleDict
from tensorplay_jax.nn._container import ModuleList as ModuleList
from tensorplay_jax.nn._container import Sequential as Sequential
from tensorplay_jax.nn._conv import Conv1d as Conv1d
from tensorplay_jax.nn._conv import Conv2d as Conv2d
from tensorplay_jax.nn._functional_call import functional_call as functional_call
from tensorplay_jax.nn._functional_call import get_parameters as get_parameters
from tensorplay_jax.nn._linear import Identity as Identity
from tensorplay_jax.nn._linear import Linear as Linear
from tensorplay_jax.nn._loss import BCELoss as BCELoss
from tensorplay_jax.nn._loss import BCEWithLogitsLoss as BCEWithLogitsLoss
from tensorplay_jax.nn._loss import CosineSimilarity as CosineSimilarity
from tensorplay_jax.nn._loss import CrossEntropyLoss as CrossEntropyLoss
from tensorplay_jax.nn._loss import HuberLoss as HuberLoss
from tensorplay_jax.nn._loss import KLDivLoss as KLDivLoss
from tensorplay_jax.nn._loss import L1Loss as L1Loss
from tensorplay_jax.nn._loss import MarginRankingLoss as MarginRankingLoss
from tensorplay_jax.nn._loss import MSELoss as MSELoss
from tensorplay_jax.nn._loss import NLLLoss as NLLLoss
from tensorplay_jax.nn._loss import PairwiseDistance as PairwiseDistance
from tensorplay_jax.nn._loss import SmoothL1Loss as SmoothL1Loss
from tensorplay_jax.nn._module import Module as Module
from tensorplay_jax.nn._normalization import BatchNorm1d as BatchNorm1d
from tensorplay_jax.nn._normalization import BatchNorm2d as BatchNorm2d
from tensorplay_jax.nn._normalization import BatchNorm3d as BatchNorm3d
from tensorplay_jax.nn._normalization import GroupNorm as GroupNorm
from tensorplay_jax.nn._normalization import LayerNorm as LayerNorm
from tensorplay_jax.nn._parameter import Parameter as Parameter
from tensorplay_jax.nn._recurrent import GRU as GRU
from tensorplay_jax.nn._recurrent import LSTM as LSTM
from tensorplay_jax.nn._recurrent import RNN as RNN
from tensorplay_jax.nn._sparse import Embedding as Embedding
from tensorplay_jax.nn._sparse import EmbeddingBag as EmbeddingBag
from tensorplay_jax.nn._transformer import MultiheadAttention as MultiheadAttention
from tensorplay_jax.nn._transformer import TransformerEncoder as TransformerEncoder
from tensorplay_jax.nn._transformer import TransformerEncoderLayer as TransformerEncoderLayer

__all__ = [
    "AdaptiveAvgPool2d",
    "AvgPool2d",
    "BCELoss",
    "BCEWithLogitsLoss",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "CELU",
    "Conv1d",
    "Conv2d",
    "CosineSimilarity",
    "CrossEntropyLoss",
    "Dropout",
    "Dropout2d",
    "ELU",
    "Embedding",
    "EmbeddingBag",
    "Flatten",
    "GELU",
    "GLU",
    "GRU",
    "GroupNorm",
    "Hardsigmoid",
    "Hardswish",
    "Hardtanh",
    "HuberLoss",
    "Identity",
    "KLDivLoss",
    "L1Loss",
    "LSTM",
    "LayerNorm",
    "LeakyReLU",
    "Linear",
    "LogSigmoid",
    "LogSoftmax",
    "MSELoss",
    "MarginRankingLoss",
    "MaxPool2d",
    "Mish",
    "Module",
    "ModuleDict",
    "ModuleList",
    "MultiheadAttention",
    "NLLLoss",
    "PairwiseDistance",
    "Parameter",
    "RNN",
    "ReLU",
    "ReLU6",
    "SELU",
    "Sequential",
    "SiLU",
    "Sigmoid",
    "SmoothL1Loss",
    "Softmax",
    "Softmin",
    "Softplus",
    "Softsign",
    "Tanh",
    "Threshold",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "Unflatten",
    "functional",
    "functional_call",
    "get_parameters",
    "init",
    "utils",
]
