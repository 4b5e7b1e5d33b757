"""``python -m tensorplay_jax.demo``: run the demo (exit status 1 if a check fails)."""

import sys

from tensorplay_jax.demo import _collectives


def main() -> int:
    return 0 if _collectives.run() else 1


if __name__ == "__main__":
    sys.exit(main())
