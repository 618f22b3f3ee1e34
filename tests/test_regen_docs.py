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
    assert {e.doc for e in cheap} == {"README.md", "docs/validation.md", "docs/store_model.md", "docs/figure4.md",
                                      "docs/figure6.md"}


def test_every_entry_has_its_marker_and_every_marker_its_entry():
    regen.check_markers(ROOT, list(regen.REGISTRY.values()))  # raises on a mismatch
    docs = {e.doc for e in regen.REGISTRY.values()}
    assert docs == {"README.md", "docs/validation.md", "docs/store_model.md", "docs/fleet.md",
                    "docs/figure4.md", "docs/figure6.md"}


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
                                 "validation-table", "validation-per-round", "store-model-validation",
                                 "store-model-per-shard", "figure4-dsv4-l1", "figure4-inkling-l1",
                                 "figure4-dsv4-swa", "figure4-inkling-swa", "figure4-inkling-mamba", "figure4-dsv4-l2",
                                 "figure4-inkling-l2", "figure6-dsv4-pro-l1", "figure6-dsv4-pro-l2", "figure6-qwen-l1",
                                 "figure6-qwen-l2", "figure6-qwen-mamba"]
    assert all(" cheap " in ln for ln in out.splitlines())
    rc, out, _ = run(capsys, ["--list", "--only", "fleet-agentic-table"])
    assert out.split()[:3] == ["fleet-agentic-table", "docs/fleet.md", "expensive"]
    assert out.rstrip().endswith("radixsim sweep fleet16-agentic --grid fleet.router=round_robin,least_load,"
                                 "session_affinity,cache_aware,kv_overlap,cache_aware_exact --out DIR")


def test_an_unknown_entry_is_refused(capsys):
    rc, out, err = run(capsys, ["--check", "--only", "fig9"])
    assert (rc, out, err) == (2, "", "regen_docs: --only fig9: no such entry; expected one of --list\n")


def test_a_failed_run_is_one_line_and_exit_2(capsys):
    runs = regen.Runs(jobs=1, verbose=False)
    with pytest.raises(SystemExit) as e:
        runs("no-such-scenario", "seed=1")
    _, err = capsys.readouterr()
    assert e.value.code == 2 and len(err.splitlines()) == 1
    assert err.startswith("regen_docs: radixsim run no-such-scenario seed=1 failed: radixsim run: no-such-scenario: "
                          "no such scenario file")
