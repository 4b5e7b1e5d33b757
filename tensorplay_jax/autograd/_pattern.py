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
loop records the same sequence every step, so ``_lazy.replay`` checks the next
operation against that child's last ``Spec`` (same entry, same input avals,
inputs from the same places) instead of building its key again.

Example:
    >>> from tensorplay_jax.autograd import _pattern
    >>> root = _pattern.root()
    >>> root.ops
    ()
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Hashable
from typing import Any

from tensorplay_jax.autograd._cache import _Entry

MAX_PATTERNS = 8192  # patterns made before the trie starts afresh (bounds its memory)

_ids = itertools.count()
_lock = threading.Lock()
# The numbers of the patterns whose program was compiled at their first run
# (``_lazy._mostly_new``): their operations' pullbacks are new too, so a backward
# through them compiles either way (``_fused`` then compiles it as one program).
FRESH: set[int] = set()


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

    __slots__ = ("__weakref__", "children", "expect", "fused", "number", "ops", "runs")

    def __init__(self, ops: tuple[Spec, ...]) -> None:
        self.ops = ops
        self.children: dict[Hashable, Pattern] = {}
        self.expect: Pattern | None = None  # the child taken last (replay's guess)
        self.number = next(_ids)  # names the pattern (a fused pullback's origin)
        self.runs = 0  # segments of this pattern that ran (``count``)
        self.fused = False  # its segments run as one compiled program (``_lazy``)

    def __repr__(self) -> str:
        return f"<Pattern {self.number}: {len(self.ops)} ops>"


_made = 0
_root = Pattern(())


def root() -> Pattern:
    """The empty pattern (a new segment's)."""
    return _root


def child(pattern: Pattern, key: Hashable, make: Any) -> Pattern:
    """``pattern`` followed by the operation ``key`` (``make()`` builds its ``Spec``)."""
    global _made, _root
    nxt = pattern.children.get(key)
    if nxt is None:
        spec = make()
        with _lock:
            nxt = pattern.children.setdefault(key, Pattern((*pattern.ops, spec)))
            _made += 1
            if _made > MAX_PATTERNS:  # later segments start a new trie; live ones keep theirs
                _made, _root = 0, Pattern(())
    pattern.expect = nxt
    return nxt


def count(pattern: Pattern) -> int:
    """One more run of ``pattern``: how many runs it has had."""
    with _lock:
        pattern.runs += 1
        return pattern.runs
