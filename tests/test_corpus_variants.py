"""The leaderboard corpus variants that leak less of the future (issue 27): multi-turn clients in
a random order each round, agentic session closes delayed or removed (radixsim/replay.py:
delay_closes, radixsim/leaderboard.py: VARIANTS)."""
import pytest

from radixsim.curve import replay_points
from radixsim.leaderboard import CORPUS, LATE_CLOSE, VARIANTS, corpus
from radixsim.replay import ReplayOptions, delay_closes, run_replay
from scenarios.workload_kinds import ReplayRequest, SessionClose


def _names(items):
    return [x.rid if isinstance(x, ReplayRequest) else x.session_id for x in items]


def test_delay_closes_moves_each_close_after_k_more_requests_or_drops_it():
    items = [ReplayRequest(0, "a", None, None, None), SessionClose("a"), ReplayRequest(1, "b", None, None, None),
             ReplayRequest(2, "b", None, None, None), SessionClose("b"), ReplayRequest(3, "c", None, None, None)]
    assert _names(delay_closes(items, 0)) == [0, "a", 1, 2, "b", 3]
    assert _names(delay_closes(items, 1)) == [0, 1, "a", 2, 3, "b"]
    assert _names(delay_closes(items, 2)) == [0, 1, 2, "a", 3, "b"]  # b is due after the end
    assert _names(delay_closes(items, None)) == [0, 1, 2, 3]


def test_variants_are_in_the_default_corpus(tmp_path, monkeypatch):
    import radixsim.leaderboard as lb

    monkeypatch.setattr(lb, "REAL_TRACE", tmp_path / "none.jsonl")
    src = corpus([], 16)
    assert list(src) == [*CORPUS, "multiturn~random", "agentic~late16", "agentic~noclose",
                         "agentic_swe~late16", "agentic_swe~noclose"] and LATE_CLOSE == 16
    assert dict(src["multiturn~random"].workload_set)["ready_queue_policy"] == "random"
    assert src["multiturn~random"].workload_set[:-1] == src["multiturn"].workload_set
    assert (src["agentic~noclose"].close_delay, src["agentic_swe~late16"].close_delay) == (None, 16)
    assert src["agentic~noclose"].workload_set == src["agentic"].workload_set and src["agentic"].close_delay == 0
    assert set(VARIANTS) <= set(src)


AG = (("num_sessions", 4), ("concurrency", 2), ("turns", (4, 8)), ("repo_context_tokens", (500, 2000)))


@pytest.mark.parametrize("delay,closed", [(0, 5), (LATE_CLOSE, 5), (None, 0)])  # 4 sessions and a sub-agent
def test_replay_delivers_the_closes_late_or_never(tmp_path, delay, closed):
    opts = ReplayOptions(workload="agentic", workload_set=AG, page_size=16, capacity_tokens=20_000,
                         policy="session-next", progress=False, close_delay=delay)
    s = run_replay(opts, tmp_path / "r")
    assert s["sessions"]["closed_events"] == closed


def test_round_robin_leaks_the_return_and_a_random_order_does_not():
    """Strict round-robin (6 clients): every client returns exactly 6 requests later, so
    session-next, mru and filo all keep exactly what comes next and tie; a random order per
    round splits them (and helps LRU: some clients now return sooner)."""
    base = (("num_clients", 6), ("num_rounds", 6), ("request_length", 256), ("output_length", 8))
    hits = {}
    for order in ("fifo", "random"):
        opts = ReplayOptions(workload="multiturn", page_size=16, progress=False,
                             workload_set=(*base, ("ready_queue_policy", order)))
        got = replay_points([(opts, p, 2352) for p in ("session-next", "mru", "filo", "lru")], 1)
        hits[order] = [round(100 * h, 2) for h, _ in got]
    assert hits == {"fifo": [21.74, 21.74, 21.74, 3.11], "random": [20.33, 21.88, 21.83, 11.74]}


def test_variant_table_puts_each_variant_beside_its_base():
    from radixsim.leaderboard import variant_table

    rows = [{"trace": t, "capacity_tokens": 100, "policy": p, "hit_rate": h, "gap_closed": g}
            for t, p, h, g in (("ag", "lru", 0.1, 0.0), ("ag", "mru", 0.2, 0.5), ("ag~x", "lru", 0.05, 0.0),
                               ("ag~x", "mru", 0.01, None), ("mt", "lru", 0.3, None))]
    assert variant_table(rows).splitlines() == [
        "  capacity policy                           ag                  ag~x",
        "-" * 68,
        "       100 lru                     10.00 (0.0)            5.00 (0.0)",
        "       100 mru                    20.00 (50.0)              1.00 (-)"]
