"""The progress bar of `radixsim run` (simulator and torch backend alike): requests done out
of the total, the wall time (tqdm's own) and the simulated time reached."""
from __future__ import annotations

from types import SimpleNamespace

from radixsim.run import progress_listener


class Bar:
    def __init__(self):
        self.calls = []

    def set_postfix_str(self, text, refresh=True):
        self.calls.append(("postfix", text, refresh))

    def update(self, n=1):
        self.calls.append(("update", n))


def test_each_finished_request_counts_once_and_shows_the_simulated_time():
    bar, env = Bar(), SimpleNamespace(now=0.0)
    done = progress_listener(bar, env)
    env.now = 1.25
    done(object())
    env.now = 1234.5
    done(object())
    assert bar.calls == [("postfix", "simulated 1.25 s", False), ("update", 1),
                         ("postfix", "simulated 1,234.50 s", False), ("update", 1)]
