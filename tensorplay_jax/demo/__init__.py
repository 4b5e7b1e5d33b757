"""The project's demos, run with ``python -m tensorplay_jax.demo``."""
