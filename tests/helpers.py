"""Shared test helpers: characters as tokens, and the tree as nested dicts of edge strings."""


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
