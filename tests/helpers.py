"""Shared test helpers: characters as tokens, the tree as nested dicts of edge strings, and
one-node-at-a-time eviction that names its victims."""

from cache_core import CacheConfig, MambaConfig, RadixCache, SwaConfig, invariants
from cache_core.tiers import TierConfig


def toks(s: str) -> list[int]:
    """One token per character (its code point)."""
    return [ord(c) for c in s]


def edge(node) -> str:
    """A node's edge as the string its tokens spell."""
    return "".join(chr(t) for t in node.tokens().tolist())


def shape(cache) -> dict:
    """The tree as nested {edge string: subtree} dicts (order-insensitive, exact)."""

    def rec(node):
        return {edge(c): rec(c) for c in node.children.values()}

    return rec(cache.tree.root)


def evict_one(cache) -> str | None:
    """cache.evict(1): the edge of the one node it removed (None if nothing was); checks that
    exactly that node went and the freed count is its length, then the invariants."""
    before = [(n, edge(n), n.num_tokens) for n in cache.tree.iter_nodes()]  # a removed node keeps no key
    freed = cache.evict(1)
    dead = [(e, k) for n, e, k in before if not n.alive]
    if freed == 0:
        assert dead == []
        return None
    assert len(dead) == 1, [e for e, _ in dead]
    assert freed == dead[0][1]
    invariants.check(cache)
    return dead[0][0]


def drain(cache) -> list[str]:
    """Evict one node at a time until nothing is evictable; the victims' edges in order."""
    out = []
    while (e := evict_one(cache)) is not None:
        out.append(e)
    return out


# -- tiers with SWA/MAMBA: reading transfers and payloads (tests/test_tiers_hybrid.py and
#    tests/test_tiers_l3_components.py)
def transfers(cache, since=0) -> list:
    """The Transfer actions the cache recorded since index `since`."""
    from cache_core.actions import Transfer

    return [a for a in cache.actions[since:] if isinstance(a, Transfer)]


def tshape(ts) -> list:
    """(kind, component, src tier, dst tier, tokens) of each transfer."""
    return [(t.kind, t.component, t.src_tier, t.dst_tier, t.tokens) for t in ts]


def ints(x) -> list:
    import numpy as np

    return np.atleast_1d(np.asarray(x)).tolist()


def node_at(cache, tokens):
    """The node whose edge ends exactly at len(tokens) on tokens' path (read-only)."""
    from cache_core import TokenSeq

    seq = TokenSeq(tokens)
    for nd, k in cache.tree.path_nodes(seq.data, seq.length):
        if nd.end == seq.length and k == nd.num_tokens:
            return nd
    return None


def swa_pl(node):
    """The node's SWA payload, or None (found by type: a payload's slot depends on the cache's components)."""
    from cache_core.components.swa import SwaPayload

    return next((p for p in node.comp if isinstance(p, SwaPayload)), None)


def mamba_pl(node):
    """The node's MAMBA payload, or None (found by type, as `swa_pl`)."""
    from cache_core.components.mamba import MambaPayload

    return next((p for p in node.comp if isinstance(p, MambaPayload)), None)


def swa_l1(node) -> list:
    return swa_pl(node).pages.tolist()


def swa_l2(node) -> list:
    h = swa_pl(node).host
    return None if h is None else h.tolist()


def ckpt(node) -> tuple:
    """(L1 slot, L2 slot) of a node's MAMBA checkpoint, -1 where absent."""
    pl = mamba_pl(node)
    return (-1, -1) if pl is None else (pl.slot, pl.host)


def hybrid_l3_cache(page_size: int, window: int, **tiers) -> RadixCache:
    """A FULL + SWA + MAMBA cache with L2 (ratio 2) and an unbounded L3, acknowledging its own
    transfers: 64 tokens of L1, a 32-token SWA pool of `window` tokens, 4 MAMBA slots."""
    tc = TierConfig(hicache_ratio=2, l3=True, l3_tokens=None, min_prefetch_tokens=0, **tiers)
    cfg = CacheConfig(page_size=page_size, capacity_tokens=64,
                      swa=SwaConfig(window_tokens=window, capacity_tokens=32), mamba=MambaConfig(slots=4), tiers=tc)
    return RadixCache(cfg, record_actions=True, auto_ack=True)


# -- the command line in-process (test_cli_errors, test_hostile_inputs, test_messages,
#    test_input_checks, test_scenario, test_leaderboard, test_page_bound)
def run_main(capsys, args) -> tuple:
    """radixsim.cli.main(args) in-process -> (exit status, stdout, stderr); an argparse error
    or --help (SystemExit) gives its code as the exit status."""
    from radixsim import cli

    try:
        rc = cli.main(args)
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


class KeySeq:
    """A stand-in TokenSeq whose whole pages have the stable keys `keys` (router tests)."""

    def __init__(self, keys, page_size: int = 64):
        import numpy as np

        self.keys = np.asarray(keys, dtype=np.uint64)
        self.page_size = page_size

    def page_keys(self, page_size):
        assert page_size == self.page_size
        return self.keys


class KeyReq:
    """A request whose whole pages have the stable keys `keys` (prompt first), for routers."""

    def __init__(self, rid, keys, prompt=None, output=0, session=None, seq=None, page_size: int = 64):
        self.rid, self.seq, self.limit, self.session_id, self.rejected = \
            rid, seq or KeySeq(keys, page_size), None, session, False
        self.prompt_tokens = len(keys) * page_size if prompt is None else prompt
        self.output_length = output


def stub_cache(match, **attrs):
    """A cache as a router reads it (`fleet/routers/base.py: exact_reuse`): its read-only match
    (`matcher.span`, `query`, `matcher.result`) returns `match`; tiered (`hier` set) unless
    `attrs` says otherwise; `attrs` adds what else the router reads (pools, free tokens)."""
    matcher = type("M", (), {"span": lambda self, seq, limit: 0, "result": lambda self, plan: match})()
    return type("C", (), {"hier": object(), "matcher": matcher, "query": lambda self, seq, n: None, **attrs})()


def assert_run_refused(capsys, tmp_path, doc: dict, needle: str) -> None:
    """`radixsim run` of scenario `doc` (written as s.yaml) is refused: one line starting with
    the file and `needle`, exit 2, no traceback, nothing written."""
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    rc, out, err = run_main(capsys, ["run", str(path), "--out", str(tmp_path / "out"), "--no-plots", "--no-progress"])
    assert "Traceback" not in err and rc == 2 and out == "", err
    assert err.count("\n") == 1 and err.startswith(f"radixsim run: {path}: {needle}"), err
    assert not (tmp_path / "out").exists()
