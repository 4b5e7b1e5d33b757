"""Segment patterns: a trie of the operation sequences that deferred segments have recorded.

A ``Pattern`` is one sequence of recorded operations from an empty segment
(``_lazy``): each operation's cached entry, differentiation mask, input avals and
where each input comes from (a segment input or an earlier operation's output),
as ``Spec`` s. The patterns form a trie: appending an operation to a segment
moves it from its pattern to that pattern's child for the operation. Two
segments that recorded the same sequence therefore hold the *same* ``Pattern``
object, so a pattern is its own cache key, hashed by identity: the compiled
segment and forward-backward programs, the run count and the known backward
are looked up with no tuple to build or hash.

Each pattern remembers the child most recently taken (``expect``). A training
loop records the same sequence every step, so ``_replay.replay`` checks the next
operation against that child's last ``Spec`` (same entry, same input avals,
inputs from the same places) instead of building its key again.

The trie's root and its counters live in the layer's state (``_state.STATE``).

Example:
    >>> from tensorplay_jax.autograd.speedups import _pattern
    >>> from tensorplay_jax.autograd.speedups._state import STATE
    >>> _pattern.root(STATE).ops
    ()
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from tensorplay_jax.autograd._cache import _Entry

if TYPE_CHECKING:
    from tensorplay_jax.autograd.speedups._state import LayerState

MAX_PATTERNS = 8192  # patterns made before the trie starts afresh (bounds its memory)


class Spec:
    """One operation of a pattern: what it runs, on what avals, with inputs from where."""

    __slots__ = (
        "entry",
        "keys",
        "last",
        "mask",
        "n_out",
        "out_info",
        "refs",
        "rule",
        "structs",
        "treedef",
    )

    def __init__(
        self,
        entry: _Entry,
        mask: tuple[bool, ...],
        refs: tuple[tuple[int, int, int], ...],
        keys: tuple[Hashable, ...],
        info: tuple[Any, tuple[Any, ...], Any],
        rule: Any,
    ) -> None:
        self.entry = entry
        self.mask = mask
        self.refs = refs  # per input: (0, input index, 0) or (1, op index, output index)
        self.keys = keys  # per input: its aval key (``_lazy.aval_key``)
        # per input, a cell: a weak reference to the array last found to have that aval
        # (the same array again needs no new check: arrays are immutable)
        self.last: tuple[list[Any], ...] = tuple([None] for _ in refs)
        self.treedef, self.structs, self.out_info = info
        self.n_out = len(self.structs)
        self.rule = rule  # call_rule's bound pullback, or None: the VJP of entry


class Pattern:
    """A sequence of ``Spec`` s from an empty segment: one node of the trie.

    Hashed and compared by identity: the trie makes one object per sequence.
    """

    __slots__ = (
        "__weakref__",
        "children",
        "expect",
        "fused",
        "number",
        "ops",
        "program",
        "runs",
    )

    def __init__(self, ops: tuple[Spec, ...], number: int) -> None:
        self.ops = ops
        self.children: dict[Hashable, Pattern] = {}
        self.expect: Pattern | None = None  # the child taken last (replay's guess)
        self.number = number  # names the pattern (a fused pullback's origin)
        self.runs = 0  # segments of this pattern that ran (``count``)
        self.fused = False  # its segments run as one compiled program (``_lazy``)
        self.program: Any = None  # that program (``_lazy``), made at its first run

    def __repr__(self) -> str:
        return f"<Pattern {self.number}: {len(self.ops)} ops>"


def root(state: LayerState) -> Pattern:
    """The empty pattern (a new segment's)."""
    return state.pattern_root


def child(state: LayerState, pattern: Pattern, key: Hashable, make: Any) -> Pattern:
    """``pattern`` followed by the operation ``key`` (``make()`` builds its ``Spec``)."""
    nxt = pattern.children.get(key)
    if nxt is None:
        spec = make()
        with state.lock:
            nxt = pattern.children.get(key)
            if nxt is None:
                nxt = pattern.children[key] = Pattern((*pattern.ops, spec), state.next_id())
            state.patterns_made += 1
            if state.patterns_made > MAX_PATTERNS:
                # later segments start a new trie; live ones keep theirs
                state.patterns_made = 0
                state.pattern_root = Pattern((), state.next_id())
    pattern.expect = nxt
    return nxt


def count(state: LayerState, pattern: Pattern) -> int:
    """One more run of ``pattern``: how many runs it has had."""
    with state.lock:
        pattern.runs += 1
        return pattern.runs
