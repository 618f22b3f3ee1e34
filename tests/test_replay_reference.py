"""Replay of the Mooncake synthetic trace reproduces SGLang 0.5.23's cached-token totals."""
import json

import pytest

from conftest import TRACE
from radixsim.cli import main

ROWS = [  # page size, capacity tokens (None = unbounded), SGLang total_cached_tokens
    (1, 500_000, 5_104_049),
    (1, 2_000_000, 14_184_320),
    (16, 500_000, 5_103_920),
    (16, 2_000_000, 14_183_872),
    (64, 500_000, 5_103_616),
    (64, 2_000_000, 14_182_656),
    (16, None, 39_850_800),
]


@pytest.mark.parametrize("page,cap,want", ROWS)
def test_reference_totals(tmp_path, page, cap, want):
    args = ["replay", str(TRACE), "--page-size", str(page), "--out", str(tmp_path), "--no-progress"]
    if cap is not None:
        args += ["--capacity-tokens", str(cap)]
    assert main(args) == 0
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["requests"] == 3993
    assert s["total_prompt_tokens"] == 61_194_628
    assert s["total_cached_tokens"] == want
    assert s["rejected"] == 0
