"""A JSON-serialisable picture of a cache's radix tree, for `analysis` (the tree figure) and
for debugging. Read-only: no tick, no split, no statistics touched.

``snapshot(cache)`` returns::

    {"version": 1, "page_size": P, "components": ["full", "swa", ...], "tiers": bool,
     "total_nodes": N, "truncated": K,
     "nodes": [{"id", "parent", "tokens", "end", "head", "on_l1", "on_l2", "swa", "mamba",
                "lock_ref", "srefs", "children"}, ...]}

Nodes come in breadth-first order from the root (children in insertion order), at most
`max_nodes` of them; `truncated` counts the nodes left out (a node's parent is always
included, so the list is a tree). Per node:

- ``tokens``: tokens on its edge (``num_tokens``); ``end``: tokens from the root to its end;
  ``head``: its first `head_tokens` token ids;
- ``on_l1``: its FULL KV is on the device (``node.value is not None``);
- ``on_l2``: its FULL KV is on host memory (``node.host is not None``); None without tiers;
- ``swa``: the node's SWA payload on L1: "present" (every page), "partial" (some pages),
  "tombstone" (none), or None (no SWA payload: no SWA component, or the root);
- ``mamba``: its MAMBA checkpoint: "present" (an L1 slot), "host" (only on L2),
  "tombstone", or None (no checkpoint payload);
- another voting component: its `snapshot_state(node)` under its name, after ``children``;
- ``lock_ref``: FULL lock count (the root is always locked); ``srefs``: sessions whose
  registered region covers the node; ``children``: its number of children.

Pure: standard library + numpy only (DESIGN.md rule).
"""
from __future__ import annotations

import json
from collections import deque

SNAPSHOT_VERSION = 1


def node_record(node, tiered: bool, head_tokens: int = 8, voters=()) -> dict:
    """One node of the snapshot (module doc), as plain Python values; each of `voters` (the
    components after FULL) reports its state under its name (`Component.snapshot_state`)."""
    parent = node.parent
    rec = {
        "id": int(node.id),
        "parent": None if parent is None else int(parent.id),
        "tokens": int(node.num_tokens),
        "end": int(node.end),
        "head": [int(t) for t in node.tokens()[:head_tokens].tolist()],
        "on_l1": node.value is not None,
        "on_l2": (node.host is not None) if tiered else None,
        "swa": None,  # the file's columns for the built-in hybrid components (None: absent)
        "mamba": None,
        "lock_ref": int(node.lock_ref),
        "srefs": int(node.srefs),
        "children": len(node.children),
    }
    rec.update((c.name, c.snapshot_state(node)) for c in voters)  # another component: a key after these
    return rec


def snapshot(cache, max_nodes: int = 2000, head_tokens: int = 8) -> dict:
    """The tree of `cache` (a RadixCache) as a JSON-serialisable dict (module doc).
    O(min(nodes, max_nodes)) records; the BFS visits only what it keeps."""
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be >= 1, got {max_nodes}")
    tree = cache.tree
    tiered = getattr(cache, "hier", None) is not None
    voters = getattr(cache, "voters", ())
    nodes: list = []
    queue = deque([tree.root])
    while queue and len(nodes) < max_nodes:
        node = queue.popleft()
        nodes.append(node_record(node, tiered, head_tokens, voters))
        queue.extend(node.children.values())
    total = int(tree.num_nodes)
    return {
        "version": SNAPSHOT_VERSION,
        "page_size": int(cache.page_size),
        "components": [c.name for c in cache.components],
        "tiers": tiered,
        "total_nodes": total,
        "truncated": total - len(nodes),
        "nodes": nodes,
    }


def write_snapshot(cache, path, max_nodes: int = 2000) -> dict:
    """Write `snapshot(cache)` as JSON to `path` (e.g. RUN_DIR/tree.json); returns it."""
    snap = snapshot(cache, max_nodes)
    with open(path, "w") as f:
        json.dump(snap, f, indent=1)
        f.write("\n")
    return snap


__all__ = ["snapshot", "write_snapshot", "node_record", "SNAPSHOT_VERSION"]
