import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TRACE = ROOT / "scenarios" / "data" / "mooncake_synthetic_trace.jsonl"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# With CI=true a skip fails the run (tests/ci_strict.py).
from ci_strict import pytest_sessionfinish, pytest_terminal_summary  # noqa: E402,F401
