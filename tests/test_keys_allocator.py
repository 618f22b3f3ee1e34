"""Page keys (cache_core/keys.py, "Page key definition (version 1)") and the page pool
(cache_core/allocator.py)."""
import numpy as np
import pytest

from cache_core.allocator import INDEX_DTYPE, PagePool
from cache_core.keys import ROOT_STATE, KeyState, page_keys

# ---------------------------------------------------------------------------------------------
# Page keys
# ---------------------------------------------------------------------------------------------
M64 = (1 << 64) - 1
P = (2**31 - 1, 2**31 - 19)
B = (1_000_003, 998_244_353 % (2**31 - 19))


def _sm64(x):
    z = (x + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def reference_keys(tokens, page_size):
    """The documented definition, token by token, in Python integers (no numpy)."""
    h = [0, 0]
    out = []
    for j, t in enumerate(tokens):
        z = _sm64(int(t) & M64)  # int64 read as uint64 two's complement
        for k in range(2):
            h[k] = (h[k] * B[k] + z % (P[k] - 1) + 1) % P[k]
        if (j + 1) % page_size == 0:
            out.append(_sm64((h[0] << 32) | h[1]))
    return out


def keys_of(tokens, page_size, state=ROOT_STATE):
    k, _ = page_keys(tokens, page_size, state)
    return [int(x) for x in k]


# Golden values (version 1 of the definition), computed once and pinned: a change of the key
# definition must show up here (L3 content is shared across engines by these keys).
GOLDEN_ARANGE8_P4 = [4201618970611257617, 15354242409923240048]
GOLDEN_123_P1 = [6153831617402979130, 8793094607686135039, 3071623541222344455]


def test_golden_keys():
    k, st = page_keys(np.arange(8), 4)
    assert k.dtype == np.uint64
    assert k.tolist() == GOLDEN_ARANGE8_P4
    assert st == KeyState(h1=1081259882, h2=1059110145, length=8)
    k, st = page_keys([1, 2, 3], 1)
    assert k.dtype == np.uint64
    assert k.tolist() == GOLDEN_123_P1
    assert st == KeyState(h1=803151277, h2=1679310947, length=3)


def test_golden_keys_match_documented_definition():
    assert reference_keys(range(8), 4) == GOLDEN_ARANGE8_P4
    assert reference_keys([1, 2, 3], 1) == GOLDEN_123_P1


@pytest.mark.parametrize("seed", range(5))
def test_keys_equal_reference_on_random_tokens(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    # the full int64 range, negatives included (read as uint64 two's complement)
    tokens = rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, size=n, dtype=np.int64, endpoint=True)
    tokens[:3] = [np.iinfo(np.int64).min, -1, np.iinfo(np.int64).max][: min(3, n)]
    for page in (1, 3, 16):
        assert keys_of(tokens, page) == reference_keys(tokens.tolist(), page)


@pytest.mark.parametrize("page", [1, 2, 4, 16])
@pytest.mark.parametrize("seed", range(4))
def test_incremental_equals_one_shot(seed, page):
    rng = np.random.default_rng(100 + seed)
    n_pages = int(rng.integers(5, 60))
    tokens = rng.integers(0, 50_000, size=n_pages * page + int(rng.integers(0, page)))
    whole, whole_state = page_keys(tokens, page)
    assert len(whole) == n_pages
    # random cut points on page boundaries; each call continues from the returned state
    cuts = sorted(set(int(c) for c in rng.integers(0, n_pages + 1, size=6) * page))
    bounds = [0] + cuts + [len(tokens)]
    parts, state = [], ROOT_STATE
    for lo, hi in zip(bounds, bounds[1:]):
        if lo > hi:
            continue
        assert state.length == lo
        k, state = page_keys(tokens[lo:hi], page, state)
        parts.append(k)
    assert np.concatenate(parts).tolist() == whole.tolist()
    assert state == whole_state
    assert state.length == n_pages * page


def test_incremental_resending_a_partial_tail():
    # the partial tail is not absorbed: the next call resends it together with new tokens
    tokens = np.arange(100, 110)
    k1, s1 = page_keys(tokens[:7], 4)  # one page + 3 tail tokens
    assert s1.length == 4
    k2, s2 = page_keys(tokens[4:], 4, s1)
    assert k1.tolist() + k2.tolist() == keys_of(tokens, 4)
    assert s2 == page_keys(tokens, 4)[1]


def test_key_depends_on_whole_prefix():
    page = 4
    tokens = np.arange(1000, 1000 + 10 * page)
    base = keys_of(tokens, page)
    assert len(set(base)) == 10
    t0 = tokens.copy()
    t0[0] += 1
    changed = keys_of(t0, page)
    assert all(a != b for a, b in zip(base, changed))
    for k in range(10):
        for pos in (k * page, k * page + page - 1):
            t = tokens.copy()
            t[pos] = 7
            got = keys_of(t, page)
            assert got[:k] == base[:k]
            assert all(a != b for a, b in zip(got[k:], base[k:]))


def test_equal_pages_under_different_prefixes_get_different_keys():
    a = keys_of([1, 2, 3, 4, 5, 6], 3)
    b = keys_of([9, 9, 9, 4, 5, 6], 3)
    assert a[1] != b[1]
    assert keys_of([4, 5, 6], 3)[0] not in (a[1], b[1])


def test_key_of_prefix_does_not_depend_on_page_size():
    rng = np.random.default_rng(7)
    tokens = rng.integers(0, 2**40, size=256)
    k16 = keys_of(tokens, 16)
    k64 = keys_of(tokens, 64)
    assert len(k16) == 16 and len(k64) == 4
    # the key of a prefix ending at 64*i is the same whichever page size cut it
    assert [k16[4 * i + 3] for i in range(4)] == k64
    k1 = keys_of(tokens, 1)
    assert [k1[16 * i + 15] for i in range(16)] == k16
    # and with incremental states of different page sizes on the same boundary
    _, s16 = page_keys(tokens[:64], 16)
    _, s64 = page_keys(tokens[:64], 64)
    assert s16 == s64
    assert keys_of(tokens[64:], 64, s16) == k64[1:]


def test_partial_tail_page_gets_no_key():
    k, st = page_keys(np.arange(11), 4)
    assert k.tolist() == keys_of(np.arange(8), 4)
    assert st == page_keys(np.arange(8), 4)[1]
    assert st.length == 8
    k, st = page_keys(np.arange(3), 4)
    assert k.dtype == np.uint64 and k.tolist() == []
    assert st == ROOT_STATE
    k, st = page_keys([], 1)
    assert k.tolist() == [] and st == ROOT_STATE
    # a short tail after a state returns that same state
    s = page_keys(np.arange(8), 4)[1]
    k, st = page_keys([1, 2], 4, s)
    assert k.tolist() == [] and st == s


def test_keys_accept_lists_and_arrays_alike():
    assert keys_of([5, 6, 7, 8], 2) == keys_of(np.array([5, 6, 7, 8], dtype=np.int32), 2)
    assert keys_of([5, 6, 7, 8], 2) == keys_of(np.array([5, 6, 7, 8], dtype=">i8"), 2)


@pytest.mark.parametrize("page", [0, -1])
def test_page_size_below_one_is_an_error(page):
    with pytest.raises(ValueError, match=f"page_size must be >= 1, got {page}"):
        page_keys([1, 2, 3, 4], page)


def test_state_not_on_page_boundary_is_an_error():
    _, s3 = page_keys([1, 2, 3], 3)
    assert s3.length == 3
    with pytest.raises(ValueError, match="page boundary"):
        page_keys([4, 5, 6, 7], 2, s3)
    with pytest.raises(ValueError, match="page boundary"):
        page_keys([4, 5, 6, 7], 4, KeyState(1, 2, 5))
    # the same state is fine for a page size that divides its length
    assert keys_of([4, 5, 6], 3, s3) == keys_of([1, 2, 3, 4, 5, 6], 3)[1:]


# ---------------------------------------------------------------------------------------------
# PagePool
# ---------------------------------------------------------------------------------------------
def L(a):
    assert a.dtype == INDEX_DTYPE
    return a.tolist()


def test_alloc_order_from_zero():
    p = PagePool(6)
    assert p.free_pages == 6
    assert L(p.alloc(2)) == [0, 1]
    assert L(p.alloc(1)) == [2]
    assert L(p.alloc(3)) == [3, 4, 5]
    assert p.free_pages == 0
    assert p.alloc(1) is None
    assert L(p.alloc(0)) == []


def test_freed_pages_reused_lifo():
    p = PagePool(8)
    assert L(p.alloc(8)) == list(range(8))
    p.free(np.array([5], dtype=INDEX_DTYPE))
    p.free(np.array([2], dtype=INDEX_DTYPE))
    p.free(np.array([7], dtype=INDEX_DTYPE))
    assert p.free_pages == 3
    assert L(p.alloc(1)) == [7]  # last freed, first reused
    assert L(p.alloc(1)) == [2]
    assert L(p.alloc(1)) == [5]
    assert p.free_pages == 0


def test_freed_batch_comes_back_in_order():
    p = PagePool(8)
    p.alloc(8)
    p.free(np.array([3, 1, 6], dtype=INDEX_DTYPE))
    p.free(np.array([0, 4], dtype=INDEX_DTYPE))
    # the last batch is on top; a batch is handed out again in the order it was freed
    assert L(p.alloc(2)) == [0, 4]
    assert L(p.alloc(3)) == [3, 1, 6]
    p.free(np.array([2, 5], dtype=INDEX_DTYPE))
    p.free(np.array([7], dtype=INDEX_DTYPE))
    assert L(p.alloc(2)) == [7, 2]
    assert L(p.alloc(1)) == [5]


def test_freed_pages_before_untouched_ones():
    p = PagePool(5)
    assert L(p.alloc(2)) == [0, 1]
    p.free(np.array([1], dtype=INDEX_DTYPE))
    assert p.free_pages == 4
    assert L(p.alloc(3)) == [1, 2, 3]
    assert L(p.alloc(1)) == [4]


def test_alloc_beyond_free_returns_none_and_takes_nothing():
    p = PagePool(4)
    assert L(p.alloc(3)) == [0, 1, 2]
    assert p.can_alloc(1) and not p.can_alloc(2)
    assert p.alloc(2) is None
    assert p.free_pages == 1
    assert sorted(p.free_view().tolist()) == [3]
    assert L(p.alloc(1)) == [3]
    assert PagePool(0).alloc(1) is None
    assert PagePool(0).free_pages == 0


def test_free_view_is_a_copy():
    p = PagePool(3)
    v = p.free_view()
    v[:] = 99
    assert L(p.alloc(3)) == [0, 1, 2]


def test_negative_capacity_is_an_error():
    with pytest.raises(ValueError, match="capacity_pages must be >= 0, got -1"):
        PagePool(-1)


def test_unbounded_pool():
    p = PagePool(None)
    assert p.unbounded and not PagePool(3).unbounded
    assert p.free_pages == 0
    assert p.can_alloc(10**9)
    assert L(p.alloc(3)) == [0, 1, 2]
    p.free(np.array([0, 2], dtype=INDEX_DTYPE))
    assert p.free_pages == 2
    # recycled pages first (LIFO batch order), then fresh ones from the counter
    assert L(p.alloc(4)) == [0, 2, 3, 4]
    assert p.free_pages == 0
    assert L(p.alloc(2)) == [5, 6]


def test_unbounded_pool_never_none_never_duplicates():
    rng = np.random.default_rng(3)
    p = PagePool(None)
    held: set[int] = set()
    high = -1
    for _ in range(2000):
        if held and rng.random() < 0.45:
            k = int(rng.integers(1, len(held) + 1))
            give = rng.choice(sorted(held), size=k, replace=False).astype(INDEX_DTYPE)
            p.free(give)
            held -= set(give.tolist())
        else:
            n = int(rng.integers(0, 3000))  # also grows past the initial free-list size
            got = p.alloc(n)
            assert got is not None
            g = got.tolist()
            assert len(g) == n
            assert len(set(g)) == n
            assert held.isdisjoint(g)
            held |= set(g)
            high = max([high] + g)
        assert p.free_pages == len(p.free_view())
        # every index handed out so far is either held or free, never both
        free = p.free_view().tolist()
        assert len(set(free)) == len(free)
        assert held.isdisjoint(free)
        assert held | set(free) == set(range(high + 1))


def test_bounded_pool_random_conservation():
    rng = np.random.default_rng(4)
    cap = 64
    p = PagePool(cap)
    held: set[int] = set()
    for _ in range(2000):
        if held and rng.random() < 0.5:
            k = int(rng.integers(1, len(held) + 1))
            give = rng.choice(sorted(held), size=k, replace=False).astype(INDEX_DTYPE)
            p.free(give)
            held -= set(give.tolist())
        else:
            n = int(rng.integers(1, 40))
            before = p.free_pages
            got = p.alloc(n)
            if n > before:
                assert got is None
                assert p.free_pages == before
            else:
                g = got.tolist()
                assert len(set(g)) == n and held.isdisjoint(g)
                held |= set(g)
        assert p.free_pages == cap - len(held)
        assert set(p.free_view().tolist()) | held == set(range(cap))
