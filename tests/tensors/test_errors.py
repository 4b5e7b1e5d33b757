"""User-facing errors of the tape name the function, the bad value and the fix (by substring)."""

import jax.numpy as jnp
import pytest

import tensorplay_jax as tp


@pytest.mark.parametrize(
    "call, exc, text",
    [
        (lambda: tp.split(tp.ones(5), [2, 2]), ValueError, "split sizes [2, 2] sum to 4"),
        (lambda: tp.split(tp.ones(5), 0), ValueError, "split_size must be positive"),
        (lambda: tp.chunk(tp.ones(5), 0), ValueError, "chunks must be positive"),
        (lambda: tp.narrow(tp.ones(5), 0, 3, 4), IndexError, "does not fit dim 0 of size 5"),
        (lambda: tp.ones(2, 3).transpose(0, 2), IndexError, "dim=2 is out of range"),
        (lambda: tp.ones(2, 3).permute(0, 0), ValueError, "is not a permutation of 2"),
        (lambda: tp.cat([]), ValueError, "tp.cat: expected a non-empty sequence"),
        (lambda: tp.stack([]), ValueError, "tp.stack: expected a non-empty sequence"),
        (lambda: tp.ones(2, 3).expand(3), ValueError, "have fewer dimensions than (2, 3)"),
        (lambda: tp.clamp(tp.ones(1)), ValueError, "at least one of min and max"),
        (lambda: tp.ones(1) + object(), TypeError, "tp.AddBackward: unsupported operand"),
        (lambda: tp.ones("a"), TypeError, "tp.ones: size must be ints"),
        (lambda: tp.randn(2, dtype=jnp.int32), TypeError, "dtype must be a floating type"),
        (lambda: tp.ones(2).sum(dim=0, axis=0), TypeError, "pass dim or axis, not both"),
        (lambda: tp.ones(2).reshape("x"), TypeError, "tp.reshape: shape must be ints"),
        (lambda: len(tp.tensor(1.0)), TypeError, "len() of a 0-d Tensor"),
        (lambda: iter(tp.tensor(1.0)), TypeError, "iteration over a 0-d Tensor"),
        (lambda: [1][tp.tensor(0.0)], TypeError, "only integer one-element Tensors"),
    ],
)
def test_error_messages(call, exc, text):
    with pytest.raises(exc) as err:
        call()
    assert text in str(err.value)


# tensorplay raises RuntimeError for operands whose shapes do not fit ("The size of tensor
# a (10) must match ...", "mat1 and mat2 shapes cannot be multiplied"); JAX raises
# TypeError. The error is both, with JAX's message, recorded or not.
@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "recorded"])
@pytest.mark.parametrize(
    "call, text",
    [
        (lambda g: tp.ones(3, 3, requires_grad=g) @ tp.ones(6, 6), "dot_general requires"),
        (lambda g: tp.matmul(tp.ones(3, 3, requires_grad=g), tp.ones(6, 6)), "dot_general"),
        (lambda g: tp.ones(10, requires_grad=g) + tp.ones(5), "incompatible shapes"),
        (lambda g: tp.mul(tp.ones(10, requires_grad=g), tp.ones(5)), "incompatible shapes"),
        (lambda g: tp.cat([tp.ones(2, 3, requires_grad=g), tp.ones(2, 4)]), "concatenate"),
    ],
    ids=["@", "matmul", "add", "mul", "cat"],
)
def test_operands_that_do_not_fit_are_a_runtime_error(call, text, requires_grad):
    with pytest.raises(RuntimeError, match=text) as err:
        call(requires_grad)
    assert isinstance(err.value, TypeError)  # JAX's type, kept
    assert type(err.value.__cause__) is TypeError  # JAX's own error


def test_an_error_of_a_jax_transformation_keeps_its_type():
    import jax

    def f(x):
        return tp.Tensor(x).sum().item()  # concrete value of a traced array

    with pytest.raises(jax.errors.ConcretizationTypeError):
        jax.jit(f)(jnp.ones(2))


_SIZES = "The size of tensor a (10) must match the size of tensor b (5) at non-singleton dimension"


@pytest.mark.parametrize("a, b, dim", [((10,), (5,), 0), ((3, 1, 10), (2, 5), 2)])
def test_a_broadcasting_error_says_tensorplays_sentence(a, b, dim):
    with pytest.raises(RuntimeError) as e:
        tp.ones(*a) + tp.ones(*b)
    assert f"{_SIZES} {dim}" in str(e.value)
