"""A failed L3 read whose node was split while in flight (cache_core/tiers/failures.py): both
pieces go, bottom-up, so no upper piece is left in the tree on no tier.
benchmarks/mutants_failed_transfers.txt lists the mutants these tests kill."""
from cache_core import TokenSeq
from tests.test_tiers import A, ack_all, check, in_l3, l2_free
from tests.test_tiers_failed_reads import _a_in_l3_only


def test_a_failed_prefetch_split_in_flight_removes_both_pieces():
    c = _a_in_l3_only()
    seq = TokenSeq(A)
    m = c.match(seq)
    c.lock(m)
    assert c.prefetch(m, seq) == 8  # A's 2 pages, L3 -> L2, in flight on one new node
    c.unlock(m)
    assert c.num_nodes == 2
    other = c.match(TokenSeq(list(A[:4]) + [999, 998, 997, 996]))  # diverges after 4 tokens: splits it
    assert other.cached_tokens == 0 and c.num_nodes == 3
    c.lock(other)
    c.unlock(other)
    ack_all(c, ok=False)
    check(c)  # top-down, the upper piece (kept by its child) would stay on no tier
    assert (c.num_nodes, l2_free(c), in_l3(c, A), c.hier.failed) == (1, 4, [False, False], 1)
