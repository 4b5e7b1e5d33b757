"""The engine registry: which engine ``auto`` picks, what a named engine refuses, plug-ins.

In-process: the choice reads only the group's ``GroupSpec``, so no job is started.
The engines' collectives are tested on real jobs in ``tests/distributed``.
"""

import dataclasses

import pytest

from tensorplay_jax.process_group import _startup, engine
from tensorplay_jax.process_group.engine import GroupSpec

SPEC = GroupSpec("g", (0, 1, 2), 1, 5.0, ("c0", "c1", "c2"), ("a", "a", "a"))
ACROSS = dataclasses.replace(SPEC, hosts=("a", "a", "b"))


@pytest.mark.parametrize(
    ("backend", "spec", "want"),
    [
        ("gloo", SPEC, "shm"),
        ("gloo", ACROSS, "tcp"),
        ("nccl", SPEC, "xla"),
        ("nccl", ACROSS, "xla"),
    ],
)
def test_auto_picks_shm_on_one_host_tcp_across_hosts_else_xla(backend, spec, want):
    assert engine.choose(dataclasses.replace(spec, backend=backend)) == want


@pytest.mark.parametrize("name", ["tcp", "xla"])
@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_tcp_and_xla_run_any_group_they_are_named_for(name, backend):
    for spec in (SPEC, ACROSS):
        assert engine.choose(dataclasses.replace(spec, backend=backend), name) == name


def test_shm_refuses_a_group_across_hosts_or_on_nccl():
    with pytest.raises(ValueError) as e:
        engine.choose(ACROSS, "shm")
    assert str(e.value) == (
        "engine='shm' needs the gloo backend and every member on one host; group [0, 1, 2] "
        "has backend 'gloo' and 2 host(s). Use engine='xla' or 'auto'."
    )
    with pytest.raises(ValueError, match="has backend 'nccl' and 1 host"):
        engine.choose(dataclasses.replace(SPEC, backend="nccl"), "shm")


def test_engine_names_are_auto_and_the_registered_ones():
    assert _startup.engine_names() == ("auto", "shm", "tcp", "xla")
    with pytest.raises(ValueError, match=r"engine='fast' is not one of \('auto', 'shm'"):
        _startup.options("init_process_group", "gloo", "fast", None)


@dataclasses.dataclass
class _Fake:
    """A stand-in engine that records the spec it was built from."""

    spec: GroupSpec
    name = "fake"


@pytest.fixture
def fake():
    engine.register_engine(
        "fake",
        _Fake,
        applies=lambda spec: spec.backend == "gloo",
        requires=lambda spec: None if spec.n < 4 else "fake: at most 3 members",
        priority=15,
    )
    yield
    engine.unregister_engine("fake")


def test_a_registered_engine_is_named_picked_by_priority_and_built_from_the_spec(fake):
    assert "fake" in _startup.engine_names()
    assert engine.choose(SPEC) == "shm"  # priority 20 beats 15
    assert engine.choose(ACROSS) == "fake"  # 15 beats tcp's 10
    built = engine.make_engine(ACROSS, "fake")
    assert isinstance(built, _Fake) and built.spec is ACROSS
    big = dataclasses.replace(ACROSS, ranks=(0, 1, 2, 3), hosts=("a", "a", "b", "b"))
    with pytest.raises(ValueError, match="fake: at most 3 members"):
        engine.choose(big)


def test_unregistered_engines_are_gone(fake):
    engine.unregister_engine("fake")
    assert "fake" not in _startup.engine_names()
    engine.register_engine("fake", _Fake)  # for the fixture's teardown
    assert engine.choose(ACROSS) == "tcp"  # no ``applies``: only by name
    assert engine.choose(ACROSS, "fake") == "fake"


def test_names_are_unique_and_auto_is_reserved(fake):
    with pytest.raises(ValueError, match="name='fake' is already registered"):
        engine.register_engine("fake", _Fake)
    with pytest.raises(ValueError, match="name='auto' is reserved"):
        engine.register_engine("auto", _Fake)
    with pytest.raises(ValueError, match="'nope' is not registered"):
        engine.unregister_engine("nope")


def test_auto_without_an_applicable_engine_says_what_to_name():
    saved = engine.registration("xla")
    engine.unregister_engine("xla")
    try:
        with pytest.raises(ValueError, match=r"no registered engine applies to group \[0, 1, 2\]"):
            engine.choose(dataclasses.replace(SPEC, backend="nccl"))
    finally:
        engine.register_engine(
            "xla",
            saved.factory,
            applies=saved.applies,
            requires=saved.requires,
            priority=saved.priority,
        )
