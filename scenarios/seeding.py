"""One seeded random stream per purpose: `rng(seed, *key)` (numpy's SeedSequence spawn keys),
so that each generator draws from its own stream and adding one never shifts another's."""
from __future__ import annotations

import numpy as np


def rng(seed: int, *key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))
