"""`radixsim workload show NAME [--set KEY=VALUE ...] [--page-size P] [--plot OUT.png]`.

Prints an LM program's summary (scenarios/programs.py): calls by kind, depth, sessions,
prompt and output tokens and the ideal (unbounded, serial) hit rate; with ``--plot`` draws
instance 0's DAG (nodes labelled by call kind, layered by depth; solid edges carry data,
dashed ones only order). Bad input (an unknown program, a bad ``--set``, an unwritable plot)
ends with exit status 2 and one line on stderr.

Wiring (in radixsim/cli.py): ``workload_cli.add_parsers(sub)`` in `build_parser`, and in
`main` ``rc = workload_cli.dispatch(args); if rc is not None: return rc``. Until then,
``python -m radixsim.workload_cli workload show NAME`` runs the same command.
"""
from __future__ import annotations

import sys

from .args import EXIT_BAD_INPUT, Parser

_KIND_COLOURS = {"question": "#4c72b0", "sample": "#4c72b0", "turn": "#4c72b0", "thought": "#55a868",
                 "score": "#c44e52", "step": "#4c72b0", "subagent": "#8172b2", "join": "#dd8452"}


def add_parsers(subparsers):
    """Add the ``workload`` command (with its ``show`` action) to the main CLI's subparsers."""
    from scenarios.program_names import PROGRAM_NAMES

    names = ", ".join(PROGRAM_NAMES)
    w = subparsers.add_parser("workload", help="inspect an LM-program workload (few-shot, tree-of-thought, ...)",
                              description=f"Inspect an LM-program workload. Programs: {names}.")
    actions = w.add_subparsers(dest="workload_command", parser_class=type(w), metavar="ACTION")
    s = actions.add_parser("show", help="print a program's summary, optionally plot its DAG",
                           description=("Print a program's calls, depth, sessions, prompt tokens and ideal "
                                        "(unbounded-cache) hit rate; --plot draws instance 0's DAG."))
    s.add_argument("name", metavar="NAME", help=f"the program: {names}")
    s.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a knob, e.g. --set num_questions=32 (a 'workload.' prefix is accepted; repeatable)")
    s.add_argument("--page-size", type=int, default=1, help="page size of the ideal hit rate (default 1)")
    s.add_argument("--plot", metavar="OUT.png", default=None, help="draw the DAG of instance 0 to this file")
    return w


def dispatch(args) -> int | None:
    """Run the ``workload`` command; None when `args` belong to another command."""
    if getattr(args, "command", None) != "workload":
        return None
    if getattr(args, "workload_command", None) != "show":
        sys.stderr.write("radixsim workload: error: expected an action: show\n")
        return EXIT_BAD_INPUT
    return _show(args)


def parse_sets(sets) -> dict:
    """``KEY=VALUE`` strings -> knobs (values read as YAML scalars); ValueError on bad syntax."""
    import yaml

    knobs = {}
    for item in sets:
        key, eq, value = item.partition("=")
        key = key.strip().removeprefix("workload.")
        if not eq or not key:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        try:
            knobs[key] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ValueError(f"--set {item!r}: cannot read the value {value!r}") from None
    return knobs


def _show(args) -> int:
    from scenarios.programs import ProgramWorkload, program_config

    try:
        if args.page_size < 1:
            raise ValueError(f"--page-size must be >= 1, got {args.page_size}")
        cfg = program_config(args.name, **parse_sets(args.sets))
        wl = ProgramWorkload(cfg)
        s = wl.summary(args.page_size)
    except ValueError as e:
        sys.stderr.write(f"radixsim workload show: {e}\n")
        return EXIT_BAD_INPUT
    kinds = ", ".join(f"{k} {n}" for k, n in s["calls_by_kind"].items())
    print(f"{s['program']}: {s['instances']} instance(s), {s['calls']} calls ({kinds}), depth {s['depth']}, "
          f"{s['sessions']} session(s)")
    print(f"prompt tokens {s['prompt_tokens']:,}, output tokens {s['output_tokens']:,}; ideal hit rate "
          f"{s['ideal_hit_rate']:.4f} ({s['ideal_cached_tokens']:,} cached, page size {s['page_size']}, "
          f"unbounded cache, calls one at a time in topological order)")
    print("knobs: " + " ".join(f"{k}={v}" for k, v in vars(cfg).items()))
    if args.plot:
        try:
            plot_dag(wl.instance(0), args.plot)
        except OSError as e:
            sys.stderr.write(f"radixsim workload show: cannot write {args.plot}: {e.strerror or e}\n")
            return EXIT_BAD_INPUT
        print(f"DAG of instance 0 -> {args.plot}")
    return 0


def layered_positions(g) -> dict:
    """Node -> (x, y): one row per depth (y = -depth); inside a row nodes are ordered by the
    mean x of their data parents (roots and ties by id), centred on x = 0."""
    pos: dict = {}
    rows: dict = {}
    for c in g:
        rows.setdefault(g.nodes[c]["depth"], []).append(c)
    for d in sorted(rows):
        def key(c):
            ps = g.nodes[c]["parents"]
            return (sum(pos[p][0] for p in ps) / len(ps) if ps else 0.0, c)
        row = sorted(rows[d], key=key)
        for k, c in enumerate(row):
            pos[c] = (k - (len(row) - 1) / 2, -d)
    return pos


def plot_dag(program, path: str) -> None:
    """Draw `program`'s DAG to `path` (PNG): one row per depth, nodes labelled by kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx

    g = program.graph
    pos = layered_positions(g)
    width = max(sum(1 for p in pos.values() if p[1] == y) for y in {p[1] for p in pos.values()})
    layers = 1 + max(g.nodes[c]["depth"] for c in g)
    fig, ax = plt.subplots(figsize=(min(6 + 1.1 * width, 40), min(2 + 0.9 * layers, 40)))
    data = [(u, v) for u, v, d in g.edges(data="data") if d]
    control = [(u, v) for u, v, d in g.edges(data="data") if not d]
    colours = [_KIND_COLOURS.get(g.nodes[c]["kind"], "#937860") for c in g]
    nx.draw_networkx_nodes(g, pos, ax=ax, node_color=colours, node_size=900, alpha=0.9)
    nx.draw_networkx_edges(g, pos, ax=ax, edgelist=data, arrows=True, node_size=900)
    nx.draw_networkx_edges(g, pos, ax=ax, edgelist=control, arrows=True, style="dashed", edge_color="#999999",
                           node_size=900, alpha=0.5)
    nx.draw_networkx_labels(g, pos, ax=ax, labels={c: g.nodes[c]["kind"] for c in g}, font_size=7)
    ax.set_title(f"{program.name}: {len(g)} calls, depth {layers}\n(solid: data, dashed: order only)", fontsize=9)
    ax.set_axis_off()
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)


def main(argv=None) -> int:
    """``python -m radixsim.workload_cli workload show NAME ...`` (the same command, until the
    main CLI wires `add_parsers` and `dispatch` in)."""
    p = Parser(prog="radixsim")
    add_parsers(p.add_subparsers(dest="command", parser_class=Parser, metavar="COMMAND"))
    rc = dispatch(p.parse_args(argv))
    if rc is None:
        p.print_help()
        return EXIT_BAD_INPUT
    return rc


__all__ = ["add_parsers", "dispatch", "parse_sets", "layered_positions", "plot_dag", "main"]


if __name__ == "__main__":
    sys.exit(main())
