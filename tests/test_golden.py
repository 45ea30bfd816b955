"""Whole-episode digests recorded before a change that must not change behaviour: every task,
every mechanism, both safety modes, difference and Shapley rewards (``tests/golden.py``). A
change that is meant to change the model regenerates them (``python tests/golden.py --write``)
and says why in its commit."""

import json

import pytest

from tests import golden

WANT = json.loads(golden.PATH.read_text())


@pytest.mark.parametrize("key,args", list(golden.cases()), ids=[k for k, _ in golden.cases()])
def test_episode_digest_unchanged(key, args):
    assert golden.digest(*args) == WANT[key], (
        f"{key}: the episode changed; if that is intended, run python tests/golden.py --write and say why"
    )
