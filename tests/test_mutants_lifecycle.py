"""Admission and prefetch rules by hand: a request refused for its MAMBA slots gives its FULL
pages back (cache_core/lifecycle.py), and the default min_prefetch_tokens is 256
(cache_core/tiers/config.py): a 255-token L3 run is recomputed, a 256-token one prefetched.
benchmarks/mutants_lifecycle.txt and mutants_prefetch.txt list the mutants these tests kill."""
import pytest

from cache_core import CacheConfig, MambaConfig, RadixCache, TokenSeq
from cache_core.lifecycle import AdmitParams, admit
from helpers import toks
from test_tiers import make, request


def test_a_request_refused_for_its_mamba_slots_gives_its_full_pages_back():
    cache = RadixCache(CacheConfig(page_size=2, capacity_tokens=16, mamba=MambaConfig(slots=1)))
    first = admit(cache, AdmitParams(seq=TokenSeq(toks("abcd")), prompt_len=4))
    assert (first.rejected, first.slots, cache.free_tokens) == (False, {"mamba": [0]}, 12)
    second = admit(cache, AdmitParams(seq=TokenSeq(toks("wxyz")), prompt_len=4))  # no MAMBA slot left
    assert (second.rejected, second.pages, second.slots) == (True, None, {})
    assert cache.free_tokens == 12  # its two pages were taken, then freed


@pytest.mark.parametrize("run,storage", [(255, 0), (256, 256)])
def test_the_default_min_prefetch_tokens_is_256(run, storage):
    c = make(P=1, l1=512, hicache_ratio=2, l3=True, write_policy="write_back")
    assert c.hier.cfg.min_prefetch_tokens == 256
    tokens = list(range(1, run + 1))
    request(c, tokens)
    c.evict(run)  # backed up (and stored) at eviction
    c.hier.evict_l2(run)  # on L3 only
    m = c.match(TokenSeq(tokens + [0]))
    assert (m.device_tokens, m.host_tokens, m.storage_tokens) == (0, 0, storage)


def committed(seq: str, prompt_len: int) -> dict:
    """{edge: priority} after one request of `seq` (prompt `prompt_len` tokens) at priority 3,
    page size 2."""
    from cache_core.lifecycle import CommitParams, commit
    from helpers import edge

    cache = RadixCache(CacheConfig(page_size=2, capacity_tokens=32))
    s = TokenSeq(toks(seq))
    a = admit(cache, AdmitParams(seq=s, prompt_len=prompt_len))
    commit(cache, CommitParams(seq=s, prompt_len=prompt_len, match=a.match, pages=a.pages, slots=a.slots,
                               priority=3))
    return {edge(n): n.priority for n in cache.tree.iter_nodes() if n.parent is not None}


def test_the_page_aligned_prompt_is_split_off_at_priority_plus_1():
    # 8 tokens, prompt 5: inserted up to 8 at priority 3, then the prompt's whole pages (4) at 4
    assert committed("abcdefgh", 5) == {"abcd": 4, "efgh": 3}
    # 5 tokens, prompt 4: the output adds no whole page (aligned 4 = the prompt's): no split insert
    assert committed("abcde", 4) == {"abcd": 3}


def test_a_commit_with_nothing_to_insert_gives_the_requests_slots_back():
    from cache_core.lifecycle import CommitParams, commit

    cache = RadixCache(CacheConfig(page_size=2, capacity_tokens=16, mamba=MambaConfig(slots=1)))
    s = TokenSeq(toks("abcd"))
    a = admit(cache, AdmitParams(seq=s, prompt_len=4))
    assert cache.mamba.pool.free_pages == 0
    cache.free(a.pages)  # the request computed nothing it keeps (CommitParams.pages None)
    commit(cache, CommitParams(seq=s, prompt_len=4, match=a.match, pages=None, slots=a.slots))
    assert cache.mamba.pool.free_pages == 1 and cache.free_tokens == 16 and cache.topo.locks == {}
