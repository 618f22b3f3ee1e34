"""Shared test helpers: characters as tokens, the tree as nested dicts of edge strings, and
one-node-at-a-time eviction that names its victims."""

from cache_core import invariants


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
