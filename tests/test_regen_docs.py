"""benchmarks/regen_docs.py (issue 27): the cheap figures of README.md and docs/ match a rerun, and
the script finds a changed figure (exit 1, a diff), rewrites it (--write), and refuses markers
without an entry or entries without a marker (exit 2, one line)."""
from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("regen_docs", ROOT / "benchmarks" / "regen_docs.py")
regen = importlib.util.module_from_spec(_spec)
sys.modules["regen_docs"] = regen  # dataclasses look their module up there
_spec.loader.exec_module(regen)
import regen_core  # noqa: E402  (benchmarks/, on the path once regen_docs is loaded)
import regen_entries_lab  # noqa: E402

TRACE_MARK = "<!-- regen: readme-trace-requests -->3,993<!-- /regen -->"


def run(capsys, argv):
    rc = regen.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def tree(tmp_path):
    """A copy of README.md and docs/*.md to edit."""
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    (tmp_path / "docs").mkdir()
    for p in (ROOT / "docs").glob("*.md"):
        shutil.copy(p, tmp_path / "docs" / p.name)
    return tmp_path


def test_the_cheap_figures_match_a_rerun(capsys):
    rc, out, err = run(capsys, ["--check", "--cheap"])
    cheap = [e for e in regen.REGISTRY.values() if e.cheap]
    assert (rc, out.splitlines()[-1]) == (0, f"{len(cheap)} entries checked: all match"), out
    assert {e.doc for e in cheap} == {"README.md", "docs/validation.md", "docs/store_model.md", "docs/fleet.md",
                                      "docs/figure4.md", "docs/figure6.md", "docs/policy_lab.md",
                                      "docs/sources/attention_backends.md"}


def test_every_entry_has_its_marker_and_every_marker_its_entry():
    regen.check_markers(ROOT, list(regen.REGISTRY.values()))  # raises on a mismatch
    docs = {e.doc for e in regen.REGISTRY.values()}
    assert docs == {"README.md", "docs/validation.md", "docs/store_model.md", "docs/fleet.md",
                    "docs/figure4.md", "docs/figure6.md", "docs/figure7.md", "docs/policy_lab.md",
                    "docs/sources/attention_backends.md", "docs/sources/clock_terms.md"}


def test_a_changed_figure_is_a_diff_and_write_restores_it(tree, capsys):
    readme = tree / "README.md"
    original = readme.read_text()
    assert original.count(TRACE_MARK) == 1
    readme.write_text(original.replace(TRACE_MARK, TRACE_MARK.replace("3,993", "3,994")))
    rc, out, err = run(capsys, ["--check", "--only", "readme-trace-requests", "--root", str(tree)])
    assert (rc, err) == (1, "")
    changed = [ln for ln in out.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    assert [ln[0] for ln in changed] == ["-", "+"]
    assert "3,994" in changed[0] and "3,993" in changed[1]
    assert out.splitlines()[:2] == ["--- README.md (written)", "+++ README.md (rerun)"]
    assert out.splitlines()[-1] == "1 entries checked: 1 document(s) differ"
    rc, out, _ = run(capsys, ["--write", "--only", "readme-trace-requests", "--root", str(tree)])
    assert (rc, out) == (0, "README.md: rewritten\n")
    assert readme.read_text() == original
    rc, out, _ = run(capsys, ["--check", "--only", "readme-trace-requests", "--root", str(tree)])
    assert (rc, out) == (0, "1 entries checked: all match\n")


def test_a_marker_without_an_entry_is_refused(tree, capsys):
    doc = tree / "docs" / "figure4.md"
    doc.write_text(doc.read_text() + "\n<!-- regen: no-such-figure -->1.0<!-- /regen -->\n")
    rc, out, err = run(capsys, ["--check", "--cheap", "--root", str(tree)])
    assert (rc, out) == (2, "")
    assert err == ("regen_docs: docs/figure4.md: regen marker 'no-such-figure': no such entry for this document; "
                   "expected one of benchmarks/regen_docs.py --list\n")


def test_an_entry_without_its_marker_is_refused(tree, capsys):
    readme = tree / "README.md"
    readme.write_text(readme.read_text().replace(TRACE_MARK, "3,993"))
    rc, out, err = run(capsys, ["--check", "--only", "readme-trace-requests", "--root", str(tree)])
    assert (rc, out) == (2, "")
    assert err == ("regen_docs: README.md: regen marker 'readme-trace-requests' missing; expected "
                   "<!-- regen: readme-trace-requests --> ... <!-- /regen --> around its text\n")


def test_list_names_the_cost_and_command(capsys):
    rc, out, _ = run(capsys, ["--list", "--cheap"])
    names = [ln.split()[0] for ln in out.splitlines()]
    assert rc == 0 and names == ["readme-commands", "readme-trace-requests", "readme-fleet-requests",
                                 "readme-vllm-quickstart", "readme-vllm-quickstart-l2", "validation-table",
                                 "validation-per-round",
                                 "store-model-validation",
                                 "store-model-per-shard", "fleet-vllm-router-comparison", "figure4-dsv4-l1",
                                 "figure4-inkling-l1",
                                 "figure4-dsv4-swa", "figure4-inkling-swa", "figure4-inkling-mamba", "figure4-dsv4-l2",
                                 "figure4-inkling-l2", "figure6-dsv4-pro-l1", "figure6-dsv4-pro-l2", "figure6-qwen-l1",
                                 "figure6-qwen-l2", "figure6-qwen-mamba", "policy-lab-curve-agentic",
                                 "attention-backend-curve"]
    assert all(" cheap " in ln for ln in out.splitlines())
    rc, out, _ = run(capsys, ["--list", "--only", "fleet-agentic-table"])
    assert out.split()[:3] == ["fleet-agentic-table", "docs/fleet.md", "expensive"]
    assert out.rstrip().endswith("radixsim sweep fleet16-agentic --grid fleet.router=round_robin,least_load,"
                                 "session_affinity,cache_aware,kv_overlap,cache_aware_exact --out DIR")


def test_an_unknown_entry_is_refused(capsys):
    rc, out, err = run(capsys, ["--check", "--only", "fig9"])
    assert (rc, out, err) == (2, "", "regen_docs: --only fig9: no such entry; expected one of --list\n")


def test_a_failed_run_is_one_line_and_exit_2(capsys):
    runs = regen_core.Runs(jobs=1, verbose=False)
    with pytest.raises(SystemExit) as e:
        runs("no-such-scenario", "seed=1")
    _, err = capsys.readouterr()
    assert e.value.code == 2 and len(err.splitlines()) == 1
    assert err.startswith("regen_docs: radixsim run no-such-scenario seed=1 failed: radixsim run: no-such-scenario: "
                          "no such scenario file")


CONV_MARK = "<!-- regen: policy-lab-curve-conversation -->"


def test_an_entry_whose_trace_is_absent_is_skipped_and_its_text_kept(tree, capsys, monkeypatch):
    monkeypatch.setattr(regen_entries_lab, "CONVERSATION", "scenarios/data/no_such_trace.jsonl")
    doc = tree / "docs" / "policy_lab.md"
    original = doc.read_text()
    assert original.count(CONV_MARK) == 1
    skip = ("policy-lab-curve-conversation: skipped: scenarios/data/no_such_trace.jsonl not present "
            "(fetch it: docs/policy_lab.md, Corpus)\n")
    rc, out, err = run(capsys, ["--check", "--only", "policy-lab-curve-conversation", "--root", str(tree)])
    assert (rc, out, err) == (0, skip + "0 entries checked (1 skipped): all match\n", "")
    rc, out, err = run(capsys, ["--write", "--only", "policy-lab-curve-conversation", "--only",
                                "policy-lab-conversation", "--root", str(tree)])
    assert (rc, out, err) == (0, skip.replace("-curve-", "-") + skip, "")  # in registry order
    assert doc.read_text() == original


def test_the_leaderboard_table_is_rendered_from_one_run(monkeypatch):
    """Ties in the best online policy, the old (belady-node) and new (bound) gap, "-" where LRU is at
    the old bound; one leaderboard run serves both policy-lab entries."""
    from radixsim.leaderboard import _gaps

    hits = [{"lru": .10, "belady-node": .20, "bound": .30, "fifo": .25, "sieve": .25, "session-next": .10,
             "filo": .05},
            {"lru": .50, "belady-node": .50, "bound": .60, "fifo": .40, "sieve": .45, "session-next": .55,
             "filo": .55}]
    rows = [{"trace": "t", "capacity_tokens": cap, "policy": p, "hit_rate": h}
            for cap, hs in zip((1000, 2000), hits) for p, h in sorted(hs.items())]
    _gaps(rows)
    monkeypatch.setitem(regen_entries_lab._LEADERBOARDS, "corpus", rows)
    text = regen.REGISTRY["policy-lab-leaderboard"].render(regen.Ctx(1, verbose=False))
    assert text.splitlines()[2:] == [
        "| t | 1,000 | 10.00 | 20.00 | 30.00 | fifo / sieve 25.00 | 150.0 -> 75.0 | 0.0 -> 0.0 |",
        "| t | 2,000 | 50.00 | 50.00 | 60.00 | filo / session-next 55.00 | - -> 50.0 | - -> 50.0 |"]
    variants = regen.REGISTRY["policy-lab-variants"].render(regen.Ctx(1, verbose=False))
    assert variants == "```\n\n```"  # no variant traces in these rows
