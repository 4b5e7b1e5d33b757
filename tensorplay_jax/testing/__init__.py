"""Tools for testing distributed code: simulated hosts on one machine (:mod:`.netns`).

Example:
    >>> from tensorplay_jax.testing import netns
    >>> netns.unavailable() is None or isinstance(netns.unavailable(), str)
    True
"""

__all__ = ["netns"]
