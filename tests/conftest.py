import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
TRACE = ROOT / "scenarios" / "data" / "mooncake_synthetic_trace.jsonl"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# With CI=true a skip fails the run (tests/ci_strict.py).
from ci_strict import pytest_sessionfinish, pytest_terminal_summary  # noqa: E402,F401


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op torch thread for a module (`pytestmark = pytest.mark.usefixtures(...)`):
    tiny ops on a busy machine are many times slower with more."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
