"""The local tape: nodes, the backward engine, grad mode, recorded calls, hooks for dist autograd.

What it owns and may import
---------------------------
This folder is the lower layer under the tensor library
(``tensorplay_jax.tensors``, which holds ``Tensor`` and the operations and
records each operation through ``call_op``). It imports JAX, NumPy and its
own modules only. The ``Tensor`` class the tape wraps values in is handed down
by the tensor library when it is imported (``set_tensor_class``, see
``_tensor_class``), so ``tensorplay_jax.autograd.Tensor`` still works.

How it works
------------
* A ``Tensor`` wraps a ``jax.Array``. When an operation runs on Tensors and
  one of them requires grad (and grad mode is on), the operation becomes ONE
  node on the tape: a ``VJPNode`` holding the pullback of ``jax.vjp`` of the
  operation (residuals only). The forward and the pullback come from jitted
  functions cached per (operation, static arguments, which inputs are
  differentiated) and, through ``jax.jit``, per input shape/dtype: nothing is
  re-traced per call (``_cache.trace_counts()`` counts traces). ``tp.apply(fn,
  *args)`` / ``@tp.function`` do the same for any pure JAX function.
* Edges: ``node.next_edges[i]`` is a ``GradientEdge(node, output_nr)`` to the
  producer of the i-th differentiable input. A leaf that requires grad has an
  ``AccumulateGrad`` sink node (created on first use); the engine hands the
  leaf's summed gradient to an ``accumulate(leaf, grad)`` callback.
* ``run_backward`` counts dependencies with an iterative walk and runs nodes
  in topological order (Kahn's algorithm, latest-created first), so graph
  depth is limited by memory only. ``retain_graph=False`` frees each node's
  residuals after use; a second pass then raises.
* A node remembers the ``_version`` of each input it saved; a backward after
  one of them was written in place raises torch's "modified by an inplace
  operation" error (``call_op(..., saves=False)`` for operations whose
  gradient needs no input value).
* ``compile`` (``tp.compile``) takes ``torch.compile``'s call and returns the
  function itself (``_compile``).
* torch's front-end names: ``Function`` / ``once_differentiable`` (the module
  ``function``: a custom operation whose backward is a Python static method, one
  node the engine runs node by node), ``backward`` (``autograd.backward``),
  ``register_hook`` (``Tensor.register_hook``, ``_hooks``),
  ``register_post_accumulate_grad_hook`` and ``queue_callback`` (``_hooks``) and
  ``Node.next_functions``. ``lift`` is ``@tp.function`` (a JAX function as one node).

Hooks for distributed autograd
------------------------------
``run_backward(roots, root_grads, *, retain_graph=False, accumulate=None)``
    ``roots``: Tensors or ``GradientEdge`` s; ``accumulate(leaf, grad)`` is
    called once per reached leaf (default: add into ``leaf.grad``), so a
    distributed context can collect gradients in its own dict. An
    ``Accumulator`` (``_accumulate``) also hands the fused backward what it holds
    for each leaf, so the sum is computed (in the held buffer, when it is donated)
    in the backward's own compiled call.
``make_node(backward, inputs, *, num_outputs, name, run_without_grads)``
    and ``attach_outputs(node, values)``:
    A ``FunctionNode`` whose backward is any Python callable: a "recv" node
    (no inputs; its backward sends the cotangent over RPC) gives received
    arrays a grad_fn; a "send" node (inputs = the Tensors sent; backward =
    identity) is a root of ``run_backward`` when gradients come back.
    ``run_without_grads=True`` makes the engine call it even when no gradient
    reached it (so a recv node can answer "nothing" instead of staying silent).
``defer_final_callbacks(into)`` and ``run_final_callbacks(into)``
    Several ``run_backward`` passes that make one backward (a worker's share of a
    distributed backward) hand their ``queue_callback`` s to ``into``, run once
    after the last pass.
``get_gradient_edge(tensor)``
    Where a Tensor's gradient goes.
``release_graph(roots)``
    Free every node reachable from roots after passes with ``retain_graph=True``
    (``Node.release()`` frees one node; ``Node.released`` tells).

The core and its speed-up layer
-------------------------------
The modules here are the core tape: each recorded operation runs at once with its
compiled forward-with-VJP, each backward node by node (the reference path). The
speed-up layer (``autograd.speedups``) plugs into the two seams of ``_seams``, a
recording strategy asked by ``call_op`` and a backward planner asked by
``run_backward``, and is installed once, below. With it a recorded operation is
deferred: its output is pending until a value is needed or ``backward()`` runs, so
a recurring training step runs its forward and backward as one compiled program.

``register_numpy_rule(fn, rule)``
    An operation's NumPy counterpart, which the layer runs for an unrecorded call on
    small CPU inputs instead of tracing the operation (``_cache``).
``is_pending(t)``, ``pending_aval(t)``, ``materialize(t)``, ``set_deferred(flag)``
    Whether a Tensor's value is held back, its shape and dtype meanwhile, give
    it its value; ``set_deferred(False)`` unplugs the layer (the reference path)
    for work recorded from then on. ``assign_value(dst, src)`` gives a leaf a
    pending value without recording (taken on first read).

Engine runs are independent (no global state), so several threads may run
backward at once; grad mode is thread-local. Gradients are ``jax.Array`` s in
the engine; with ``create_graph=True`` each node's backward is recorded
(``_higher_order``), so gradients of gradients come from the tape as well.
``gradcheck`` / ``gradgradcheck`` (the module ``gradcheck``) check a function's
gradients on the tape against finite differences, as torch's do.
"""

from typing import Any

from tensorplay_jax.autograd import _tensor_class
from tensorplay_jax.autograd import function as function
from tensorplay_jax.autograd import functional as functional
from tensorplay_jax.autograd import speedups as speedups
from tensorplay_jax.autograd._accumulate import Accumulator as Accumulator
from tensorplay_jax.autograd._accumulate import accumulate_into_grad as accumulate_into_grad
from tensorplay_jax.autograd._accumulate import add_gradients as add_gradients
from tensorplay_jax.autograd._cache import register_numpy_rule as register_numpy_rule
from tensorplay_jax.autograd._cache import trace_counts as trace_counts
from tensorplay_jax.autograd._compile import compile as compile
from tensorplay_jax.autograd._custom import attach_outputs as attach_outputs
from tensorplay_jax.autograd._custom import get_gradient_edge as get_gradient_edge
from tensorplay_jax.autograd._custom import make_node as make_node
from tensorplay_jax.autograd._engine import as_cotangent as as_cotangent
from tensorplay_jax.autograd._engine import release_graph as release_graph
from tensorplay_jax.autograd._engine import run_backward as run_backward
from tensorplay_jax.autograd._grad import backward as backward
from tensorplay_jax.autograd._grad import grad as grad
from tensorplay_jax.autograd._grad_mode import enable_grad as enable_grad
from tensorplay_jax.autograd._grad_mode import inference_mode as inference_mode
from tensorplay_jax.autograd._grad_mode import is_grad_enabled as is_grad_enabled
from tensorplay_jax.autograd._grad_mode import no_grad as no_grad
from tensorplay_jax.autograd._grad_mode import set_grad_enabled as set_grad_enabled
from tensorplay_jax.autograd._hooks import defer_final_callbacks as defer_final_callbacks
from tensorplay_jax.autograd._hooks import leaf_gradient as leaf_gradient
from tensorplay_jax.autograd._hooks import queue_callback as queue_callback
from tensorplay_jax.autograd._hooks import register_hook as register_hook
from tensorplay_jax.autograd._hooks import (
    register_post_accumulate_grad_hook as register_post_accumulate_grad_hook,
)
from tensorplay_jax.autograd._hooks import run_final_callbacks as run_final_callbacks
from tensorplay_jax.autograd._lift import apply as apply
from tensorplay_jax.autograd._lift import call_op as call_op
from tensorplay_jax.autograd._lift import call_rule as call_rule
from tensorplay_jax.autograd._lift import function as lift
from tensorplay_jax.autograd._node import AccumulateGrad as AccumulateGrad
from tensorplay_jax.autograd._node import FunctionNode as FunctionNode
from tensorplay_jax.autograd._node import GradientEdge as GradientEdge
from tensorplay_jax.autograd._node import Node as Node
from tensorplay_jax.autograd._node import VJPNode as VJPNode
from tensorplay_jax.autograd._node_hooks import RemovableHandle as RemovableHandle
from tensorplay_jax.autograd._seams import assign_value as assign_value
from tensorplay_jax.autograd._seams import is_pending as is_pending
from tensorplay_jax.autograd._seams import materialize as materialize
from tensorplay_jax.autograd._seams import pending_aval as pending_aval
from tensorplay_jax.autograd._seams import set_deferred as set_deferred
from tensorplay_jax.autograd._tensor_class import set_tensor_class as set_tensor_class
from tensorplay_jax.autograd.function import Function as Function
from tensorplay_jax.autograd.function import once_differentiable as once_differentiable
from tensorplay_jax.autograd.gradcheck import GradcheckError as GradcheckError
from tensorplay_jax.autograd.gradcheck import gradcheck as gradcheck
from tensorplay_jax.autograd.gradcheck import gradgradcheck as gradgradcheck

speedups.install()  # the one place the speed-up layer plugs into the core's seams

__all__ = [
    "AccumulateGrad",
    "Accumulator",
    "Function",
    "FunctionNode",
    "GradcheckError",
    "GradientEdge",
    "Node",
    "RemovableHandle",
    "Tensor",
    "VJPNode",
    "accumulate_into_grad",
    "add_gradients",
    "apply",
    "as_cotangent",
    "attach_outputs",
    "backward",
    "call_op",
    "call_rule",
    "compile",
    "defer_final_callbacks",
    "enable_grad",
    "function",
    "functional",
    "get_gradient_edge",
    "grad",
    "gradcheck",
    "gradgradcheck",
    "is_grad_enabled",
    "is_pending",
    "leaf_gradient",
    "lift",
    "make_node",
    "assign_value",
    "materialize",
    "inference_mode",
    "no_grad",
    "once_differentiable",
    "register_numpy_rule",
    "pending_aval",
    "queue_callback",
    "register_hook",
    "register_post_accumulate_grad_hook",
    "release_graph",
    "run_backward",
    "run_final_callbacks",
    "set_deferred",
    "set_grad_enabled",
    "trace_counts",
]


def __getattr__(name: str) -> Any:
    # ``tensorplay_jax.autograd.Tensor``: the class lives in ``tensorplay_jax.tensors``
    # (the layer above), which registers it with ``_tensor_class`` when imported.
    if name == "Tensor":
        return _tensor_class.Tensor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
