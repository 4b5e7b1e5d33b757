"""Tests of tensorplay_jax.distributed (process groups and blocking collectives)."""
