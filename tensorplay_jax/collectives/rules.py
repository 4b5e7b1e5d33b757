"""The rule table of the ten differentiable collectives: the one statement of each rule.

Each :class:`Rule` says how a collective is called, what it does to per-rank shapes,
its forward, its backward in words and as a formula, and which collective (with
``op="sum"``) its backward runs. Everything that states a rule reads this table: the
``tensorplay_jax.collectives`` docstring, the backward table of the tape collectives
(``distributed/nn/functional.py``, checked against ``transpose`` by the layering test),
the check command, the collectives demo, and the guide's table (a docs test compares it
with :func:`markdown_table`). The tests' NumPy references stay independent of it: they
are the oracle the rules are checked against.

Example:
  >>> from tensorplay_jax.collectives.rules import BY_NAME
  >>> BY_NAME["all_gather"].transpose
  'reduce_scatter'
"""

from __future__ import annotations

import dataclasses

__all__ = ["BY_NAME", "RULES", "Rule", "docstring_list", "markdown_table"]


@dataclasses.dataclass(frozen=True)
class Rule:
    """One collective's forward and backward rule.

    Attributes:
      name: the function's name in ``tensorplay_jax.collectives``.
      call: how it is called (arguments and keywords).
      shapes: per-rank input shape -> per-rank output shape; N is the axis size.
      forward: what each rank gets.
      backward: the gradient rule in words.
      formula: the gradient rule as a formula in the cotangents ``dy`` (for ``op="sum"``).
      transpose: the collective its backward runs (with ``op="sum"``).
    """

    name: str
    call: str
    shapes: str
    forward: str
    backward: str
    formula: str
    transpose: str


#: The ten rules, in the order the guide's table lists them.
RULES: tuple[Rule, ...] = (
    Rule(
        "all_reduce",
        'all_reduce(x, axis_name, *, op="sum")',
        "(...) -> (...)",
        "every rank gets the reduction",
        "all_reduce(sum) of the gradient",
        "dx_r = sum_j dy_j",
        "all_reduce",
    ),
    Rule(
        "broadcast",
        "broadcast(x, src, axis_name)",
        "(...) -> (...)",
        "every rank gets src's x",
        "sum of gradients to src; zero elsewhere",
        "dx_src = sum_j dy_j, zero elsewhere",
        "reduce",
    ),
    Rule(
        "reduce",
        'reduce(x, dst, axis_name, *, op="sum")',
        "(...) -> (...)",
        "dst gets the reduction, others zeros",
        "dst's gradient broadcast to every rank",
        "dx_r = dy_dst",
        "broadcast",
    ),
    Rule(
        "gather",
        "gather(x, dst, axis_name, *, axis=0)",
        "(...) -> (N, ...)",
        "dst gets the stacked inputs, others zeros",
        "rank i gets slice i of dst's gradient",
        "dx_r = (dy_dst)[r]",
        "scatter",
    ),
    Rule(
        "scatter",
        "scatter(x, src, axis_name, *, axis=0)",
        "(N, ...) -> (...)",
        "rank i gets slice i of src's x",
        "src gets the stacked gradients; zero elsewhere",
        "dx_src = stack_i dy_i, zero elsewhere",
        "gather",
    ),
    Rule(
        "reduce_scatter",
        'reduce_scatter(x, axis_name, *, op="sum", axis=0)',
        "(N, ...) -> (...)",
        "rank i gets slice i of the reduction",
        "all_gather of the gradients",
        "dx_r = stack_i dy_i",
        "all_gather",
    ),
    Rule(
        "all_gather",
        "all_gather(x, axis_name, *, axis=0)",
        "(...) -> (N, ...)",
        "every rank gets the stacked inputs",
        "reduce_scatter of the gradients",
        "dx_r = sum_j (dy_j)[r]",
        "reduce_scatter",
    ),
    Rule(
        "all_gather_single",
        "all_gather_single(x, axis_name, *, axis=0)",
        "(k, ...) -> (N*k, ...)",
        "concatenation",
        "as all_gather, on the concatenation",
        "dx_r = sum_j (dy_j)[r*k:(r+1)*k]",
        "reduce_scatter",
    ),
    Rule(
        "all_to_all",
        "all_to_all(x, axis_name, *, split_axis=0, concat_axis=0)",
        "(N*k, ...) -> (N*k, ...)",
        "piece j to rank j",
        "the inverse all_to_all",
        "dx_r[j] = dy_j[r]",
        "all_to_all",
    ),
    Rule(
        "all_to_all_single",
        "all_to_all_single(x, axis_name, output_split_sizes=None, input_split_sizes=None, "
        "*, axis=0)",
        "(M, ...) -> (M', ...)",
        "rows split by sizes, piece j to rank j",
        "the inverse exchange, sizes swapped",
        "dx_r[j] = dy_j[r], split sizes swapped",
        "all_to_all_single",
    ),
)

#: Each rule by its collective's name.
BY_NAME: dict[str, Rule] = {rule.name: rule for rule in RULES}


def markdown_table() -> str:
    """The table as the guide shows it (``docs/guides/collectives.md``).

    Example:
      >>> from tensorplay_jax.collectives.rules import markdown_table
      >>> markdown_table().splitlines()[0]
      '| function | per-rank input -> output | forward | backward |'
    """
    lines = ["| function | per-rank input -> output | forward | backward |", "|---|---|---|---|"]
    for r in RULES:
        shapes = r.shapes.replace("*", "\\*") if r.name == "all_to_all" else r.shapes
        lines.append(f"| `{r.call}` | {shapes} | {r.forward} | {r.backward} |")
    return "\n".join(lines)


def docstring_list() -> str:
    """The table as a reStructuredText list, for the package docstring."""
    return "\n".join(
        f"- ``{r.call}``, ``{r.shapes}``\n\n  - forward: {r.forward}\n  - backward: {r.backward}"
        for r in RULES
    )
