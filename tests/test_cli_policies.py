"""The CLI's --policy options take their names from the eviction policy registry, not from a
list written by hand (issue 30: the hand-written list missed arc and tail-lru): every registered
policy, and a toy registered from this file, is accepted and shown in --help."""
from __future__ import annotations

import pytest

from cache_core import eviction
from cache_core.eviction import Policy, policy_names
from radixsim.cli import build_parser

COMMANDS = (["replay", "t.jsonl", "--out", "o"], ["curve", "t.jsonl", "--out", "o"], ["leaderboard", "--out", "o"])


def _help(capsys, monkeypatch, command: str) -> str:
    monkeypatch.setenv("COLUMNS", "10000")  # one line per option, so no name is cut at a hyphen
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([command, "--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


@pytest.fixture
def toy(monkeypatch):
    """A policy registered from this file, removed again afterwards."""
    monkeypatch.setattr(eviction._REGISTRY, "_classes", dict(eviction._REGISTRY._classes))
    before = policy_names()  # what is registered now (other test files may have added their own)

    @eviction.register_policy("toy-cli-policy")
    class Toy(Policy):
        def key(self, node):
            return 0

    assert "toy-cli-policy" not in before and policy_names() == sorted([*before, "toy-cli-policy"])
    return "toy-cli-policy"


def test_the_registry_has_the_policies_the_old_list_missed():
    assert {"arc", "tail-lru"} <= set(policy_names())


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
def test_every_registered_policy_is_accepted_and_in_help(capsys, monkeypatch, toy, args):
    names = policy_names()
    assert toy in names and {"arc", "tail-lru", "tlru", "lru"} <= set(names)
    for name in names:
        assert build_parser().parse_args([*args, "--policy", name]).policy == name
    assert build_parser().parse_args([*args, "--policy", ",".join(names)]).policy == ",".join(names)
    line = next(x for x in _help(capsys, monkeypatch, args[0]).splitlines() if x.strip().startswith("--policy"))
    assert ", ".join(names) in line
