"""nn errors name the function or layer, the bad value and the fix (asserted by substring)."""

import pytest

import tensorplay_jax as tp
from tensorplay_jax import nn
from tensorplay_jax.nn import functional as F


@pytest.mark.parametrize(
    "call, exc, text",
    [
        (lambda: nn.Conv2d(3, 4, 3, groups=2), ValueError, "must both be divisible by groups=2"),
        (lambda: nn.Conv2d(2, 2, 3, padding_mode="reflect"), ValueError, "only 'zeros'"),
        (lambda: nn.Conv2d(2, 2, 3, stride=2, padding="same"), ValueError, "strided"),
        (lambda: nn.Conv2d(2, 2, 3, padding="full"), ValueError, "'same' or 'valid'"),
        (lambda: nn.Conv2d(2, 2, (1, 2, 3)), ValueError, "kernel_size must be an int or a pair"),
        (lambda: nn.Embedding(3, 2, padding_idx=3), ValueError, "padding_idx=3 must be within"),
        (lambda: nn.Dropout(1.5), ValueError, "between 0 and 1, but got 1.5"),
        (lambda: F.dropout(tp.ones(2), -0.1), ValueError, "p=-0.1 must be between 0 and 1"),
        (lambda: nn.MSELoss("avg"), ValueError, "MSELoss: reduction='avg' is not valid"),
        (
            lambda: F.cross_entropy(tp.ones(2, 3), tp.tensor([0, 1]), label_smoothing=2.0),
            ValueError,
            "label_smoothing=2.0 must be in [0, 1]",
        ),
        (lambda: F.mse_loss(tp.ones(2), tp.ones(3)), ValueError, "reshape one of them"),
        (
            lambda: F.layer_norm(tp.ones(2, 3), (4,)),
            ValueError,
            "does not end with normalized_shape (4,)",
        ),
        (lambda: nn.Linear(1, 1).register_buffer("a.b", None), KeyError, 'without "."'),
        (lambda: nn.Linear(1, 1).register_parameter("p", tp.ones(1)), TypeError, "Parameter"),
        (lambda: nn.Linear(1, 1).add_module("m", 3), TypeError, "is not a Module subclass"),
        (lambda: nn.Linear(1, 1).train("yes"), ValueError, "expected to be boolean"),
        (lambda: nn.init.kaiming_uniform_(tp.ones(3)), ValueError, "fewer than 2 dimensions"),
        (lambda: nn.init.calculate_gain("swish"), ValueError, "Unsupported nonlinearity swish"),
    ],
)
def test_error_messages(call, exc, text):
    with pytest.raises(exc) as err:
        call()
    assert text in str(err.value)
