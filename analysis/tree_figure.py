"""The radix tree picture from a snapshot (`cache_core.snapshot`: a run's tree.json).

Nodes are placed by depth (top to bottom) and leaf order (left to right) and drawn with
networkx; area grows with the node's tokens. Encoding (all in the legend):

- fill: where the node's FULL KV lives: device (L1), host only (L2), or neither (white:
  in flight or dropped);
- border: SWA payload on L1: present (green), partial (olive), tombstone (red); thin black
  without an SWA payload;
- a small diamond right of the node: MAMBA checkpoint (filled: on L1, grey: host only,
  hollow: tombstone);
- square instead of circle: locked (lock_ref > 0); a gold star above: session-referenced.
"""
from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from .style import TIER_COLOURS, new_figure, save

FULL_FILL = {"L1": TIER_COLOURS["device"], "L2": "#9E9E9E", "none": "#FFFFFF"}
SWA_EDGE = {"present": "#2ca02c", "partial": "#bcbd22", "tombstone": "#d62728", None: "#000000"}
MAMBA_FILL = {"present": "#9467bd", "host": "#9E9E9E", "tombstone": "none"}
LABEL_MAX_NODES = 40


def load_snapshot(source) -> dict:
    """A snapshot dict from a dict, a Run (its tree), a tree.json file or a result directory
    holding one. ValueError (one line) when there is none."""
    if isinstance(source, dict):
        snap = source
    elif hasattr(source, "tree"):
        snap = source.tree
        if snap is None:
            raise ValueError(f"{source.path or source.label}: no tree.json; expected a run with a tree snapshot "
                             "(cache_core.snapshot.write_snapshot)")
    else:
        p = Path(source)
        p = p / "tree.json" if p.is_dir() else p
        if not p.is_file():
            raise ValueError(f"{p}: missing; expected a tree snapshot written by cache_core.snapshot.write_snapshot")
        try:
            snap = json.loads(p.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{p}: not valid JSON ({getattr(e, 'msg', e)}); expected a tree snapshot") from None
    if not isinstance(snap, dict) or not isinstance(snap.get("nodes"), list) or not snap["nodes"]:
        raise ValueError("tree snapshot: expected an object with a non-empty 'nodes' list")
    return snap


def tree_graph(snap: dict) -> nx.DiGraph:
    """The snapshot as a networkx DiGraph (node attributes = the snapshot's node records)."""
    g = nx.DiGraph()
    for rec in snap["nodes"]:
        g.add_node(rec["id"], **rec)
        if rec.get("parent") is not None:
            g.add_edge(rec["parent"], rec["id"])
    return g


def tree_layout(g: nx.DiGraph, root) -> dict:
    """{node: (x, y)}: y = -depth; leaves at consecutive x in DFS order, a parent at the
    mean of its children's x. Iterative (deep trees are fine)."""
    pos, next_x = {}, 0.0
    stack = [(root, 0, False)]
    while stack:
        n, depth, done = stack.pop()
        kids = list(g.successors(n))
        if done or not kids:
            if kids:
                pos[n] = (float(np.mean([pos[k][0] for k in kids])), -depth)
            else:
                pos[n] = (next_x, -depth)
                next_x += 1.0
            continue
        stack.append((n, depth, True))
        stack.extend((k, depth + 1, False) for k in reversed(kids))
    return pos


def _fill(rec) -> str:
    if rec.get("on_l1"):
        return FULL_FILL["L1"]
    return FULL_FILL["L2"] if rec.get("on_l2") else FULL_FILL["none"]


def _legend(ax, snap) -> None:
    recs = snap["nodes"]
    h = [Patch(facecolor=FULL_FILL["L1"], edgecolor="black", label="FULL on device (L1)")]
    if snap.get("tiers"):
        h += [Patch(facecolor=FULL_FILL["L2"], edgecolor="black", label="FULL on host only (L2)"),
              Patch(facecolor="white", edgecolor="black", label="FULL nowhere (in flight)")]
    if "swa" in snap.get("components", []):
        h += [Line2D([], [], marker="o", linestyle="", markerfacecolor="white", markeredgecolor=SWA_EDGE[s],
                     markeredgewidth=2, label=f"SWA {s}") for s in ("present", "partial", "tombstone")]
    if "mamba" in snap.get("components", []):
        words = {"present": "on L1", "host": "on L2 only", "tombstone": "tombstone"}
        h += [Line2D([], [], marker="D", linestyle="", markerfacecolor=MAMBA_FILL[s], markeredgecolor="#9467bd",
                     label=f"MAMBA checkpoint {words[s]}") for s in MAMBA_FILL if s != "host" or snap.get("tiers")]
    h.append(Line2D([], [], marker="s", linestyle="", markerfacecolor="white", markeredgecolor="black",
                    label="locked (lock_ref > 0)"))
    if any(r.get("srefs") for r in recs):
        h.append(Line2D([], [], marker="*", linestyle="", color="#DAA520", markersize=10, label="session-referenced"))
    ax.legend(handles=h, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def tree_figure(source, out=None, *, title: str | None = None):
    """Draw a tree snapshot (dict, Run, tree.json or a run directory with one); see the
    module doc for the encoding. Node labels (tokens) when the tree has at most 40 nodes."""
    snap = load_snapshot(source)
    g = tree_graph(snap)
    root = snap["nodes"][0]["id"]
    pos = tree_layout(g, root)
    width = min(30.0, max(7.0, 0.35 * sum(1 for n in g if g.out_degree(n) == 0) + 4))
    fig, ax = new_figure(figsize=(width, min(20.0, 2.0 + 0.9 * (1 - min(p[1] for p in pos.values())))))
    nx.draw_networkx_edges(g, pos, ax=ax, arrows=False, edge_color="#888888", width=0.8)
    top = max((r["tokens"] for r in snap["nodes"]), default=1) or 1
    groups = {"o": [], "s": []}
    for rec in snap["nodes"]:
        groups["s" if rec["lock_ref"] > 0 else "o"].append(rec)
    for shape, recs in groups.items():
        if recs:
            nx.draw_networkx_nodes(
                g, pos, ax=ax, nodelist=[r["id"] for r in recs], node_shape=shape,
                node_size=[40 + 400 * np.sqrt(r["tokens"] / top) for r in recs],
                node_color=[_fill(r) for r in recs], edgecolors=[SWA_EDGE[r.get("swa")] for r in recs],
                linewidths=[2.0 if r.get("swa") else 0.6 for r in recs])
    dx = 0.18
    for state, colour in MAMBA_FILL.items():
        pts = [pos[r["id"]] for r in snap["nodes"] if r.get("mamba") == state]
        if pts:
            ax.scatter([p[0] + dx for p in pts], [p[1] for p in pts], marker="D", s=22, facecolors=colour,
                       edgecolors="#9467bd", zorder=3)
    starred = [pos[r["id"]] for r in snap["nodes"] if r.get("srefs")]
    if starred:
        ax.scatter([p[0] for p in starred], [p[1] + 0.3 for p in starred], marker="*", s=60, color="#DAA520", zorder=3)
    if len(snap["nodes"]) <= LABEL_MAX_NODES:
        for rec in snap["nodes"][1:]:
            x, y = pos[rec["id"]]
            ax.text(x, y - 0.3, str(rec["tokens"]), ha="center", va="top", fontsize=7)
    trunc = snap.get("truncated") or 0
    ax.set_title(title or (f"Radix tree: {len(snap['nodes'])} nodes" + (f" (+{trunc} not shown)" if trunc else "")
                           + f", page size {snap.get('page_size', '?')}; labels = tokens per node"))
    ax.set_axis_off()
    _legend(ax, snap)
    save(fig, out)
    return fig


__all__ = ["tree_figure", "tree_graph", "tree_layout", "load_snapshot"]
