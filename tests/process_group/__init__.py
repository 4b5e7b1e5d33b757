"""Tests of tensorplay_jax.process_group: the engine registry (engines run in tests/distributed)."""
