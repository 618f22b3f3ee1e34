"""Seeded random stress test of `RadixCache` and `ReplayStepper`.

Nine scenarios (page sizes 1, 4, 64 x policies lru, lfu, fifo), 45,000 random operations in
all, each one of: match (with or without a limit), lock, unlock, alloc (sometimes beyond the
free pages), free, insert (of a locked sequence with pages from `alloc`, per the
`RadixCache.insert` contract), evict (any amount, including more than is evictable),
re-match of an inserted sequence, and whole `ReplayStepper.step` calls.

After EVERY operation: `invariants.check(cache)`, page conservation (free + in tree +
handed out == capacity), every held lock's prefix is still cached. Per operation, results
are checked exactly against an oracle computed from the tree's structure *before* the call
(the longest cached prefix of a query is the longest page-aligned common prefix with any
root-to-leaf path), so match lengths, insert prefixes, freed page counts and eviction
amounts are all exact, and each `evict` removes exactly the nodes that the documented order
picks (unlocked leaves, smallest policy key first, a parent joining when its last child
goes), found by a full rescan. Deterministic: `random.Random(seed)` with fixed seeds.
"""
from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from cache_core import CacheConfig, RadixCache, ReplayStepper, TokenSeq
from cache_core import invariants

ALPHABET = 4  # tokens 0..3: matches, splits and divergences are frequent
OPS_PER_SCENARIO = 5000
# (page size, capacity tokens, max sequence length); capacities not a multiple of P on purpose
SIZES = {1: (257, 48), 4: (642, 160), 64: (3250, 640)}
POLICIES = ("lru", "lfu", "fifo")
SCENARIOS = [(P, pol, 7919 * P + 31 * i) for P in (1, 4, 64) for i, pol in enumerate(POLICIES)]
assert len(SCENARIOS) * OPS_PER_SCENARIO >= 20_000

WEIGHTS = {
    "match": 18, "lock": 6, "unlock": 9, "alloc": 9, "free": 6, "insert": 16,
    "evict": 7, "step": 22, "rematch": 5, "reset": 1,
}


def _lcp(a: np.ndarray, b: np.ndarray) -> int:
    m = min(len(a), len(b))
    neq = np.flatnonzero(a[:m] != b[:m])
    return int(neq[0]) if len(neq) else m


class Harness:
    def __init__(self, page: int, policy: str, seed: int):
        self.rng = random.Random(seed)
        self.P = page
        cap, self.maxlen = SIZES[page]
        self.cache = RadixCache(CacheConfig(page_size=page, capacity_tokens=cap, policy=policy))
        self.stepper = ReplayStepper(self.cache)
        self.capacity = cap // page * page
        rng = self.rng
        self.library = [[rng.randrange(ALPHABET) for _ in range(self.maxlen)] for _ in range(4)]
        self.history: list[list[int]] = []  # every prompt / S / conversation seen
        self.inserted: list[list[int]] = []  # page-aligned sequences that were inserted
        self.pending: list[tuple[list[int], object]] = []  # matched, not locked (cleared on eviction)
        self.held: list[tuple[list[int], object, int]] = []  # (tokens, MatchResult, cached), locked
        self.blocks: list[np.ndarray] = []  # pages handed out by alloc, not yet inserted or freed
        self.next_fresh = 1_000_000
        self.counts: Counter = Counter()
        self._paths = None

    # -- oracle from the tree's structure (read-only) ------------------------------------------
    def leaf_paths(self) -> list[np.ndarray]:
        if self._paths is None:
            out = []
            root = self.cache.tree.root
            stack = [(root, np.empty(0, dtype=np.int64))]
            while stack:
                node, prefix = stack.pop()
                if not node.children and node is not root:
                    out.append(prefix)
                for c in node.children.values():
                    stack.append((c, np.concatenate([prefix, c.tokens()])))
            self._paths = out
        return self._paths

    def tree_tokens(self) -> int:
        return sum(n.num_tokens for n in self.cache.tree.iter_nodes())

    def cached_len(self, q, n: int) -> int:
        """Longest page-aligned prefix of q[:n] that the tree holds."""
        q = np.asarray(q[: max(n, 0)], dtype=np.int64)
        best = max((_lcp(p, q) for p in self.leaf_paths()), default=0)
        return best // self.P * self.P

    def present(self, q) -> bool:
        return self.cached_len(q, len(q)) == len(q)

    # -- inputs ------------------------------------------------------------------------------------
    def tail(self, lo: int, hi: int) -> list[int]:
        return [self.rng.randrange(ALPHABET) for _ in range(self.rng.randint(lo, hi))]

    def make_seq(self) -> list[int]:
        rng, L = self.rng, self.maxlen
        r = rng.random()
        if r < 0.35 or not self.history:
            base = rng.choice(self.library)
            s = base[: rng.randint(0, L)] + self.tail(0, L // 4)
        elif r < 0.60:
            h = rng.choice(self.history)
            s = h[: rng.randint(0, len(h))] + self.tail(0, L // 4)
        elif r < 0.75:
            s = list(rng.choice(self.history))
            if s:
                i = rng.randrange(len(s))
                s[i] = (s[i] + 1 + rng.randrange(ALPHABET - 1)) % ALPHABET  # diverge mid-edge
        elif r < 0.90:
            s = rng.choice(self.history) + self.tail(0, L // 8)
        else:
            s = self.tail(0, L)
        return s[: L + L // 4]

    def fresh_tokens(self, n: int) -> list[int]:
        out = list(range(self.next_fresh, self.next_fresh + n))
        self.next_fresh += n
        return out

    # -- checks after every operation ---------------------------------------------------------------
    def check(self):
        self._paths = None
        cache, P = self.cache, self.P
        invariants.check(cache)
        in_tree = self.tree_tokens()
        outstanding = sum(len(b) for b in self.blocks) * P
        assert cache.free_tokens + in_tree + outstanding == self.capacity
        assert cache.cached_tokens_total == in_tree
        assert cache.free_tokens % P == 0 and cache.free_tokens >= 0
        for toks, _m, c in self.held:  # locked prefixes are never evicted
            assert self.present(toks[:c])

    # -- operations ----------------------------------------------------------------------------------
    def op_match(self):
        rng, P, cache = self.rng, self.P, self.cache
        q = self.make_seq()
        lim = None if rng.random() < 0.25 else rng.randint(-2, len(q) + 2 * P)
        n = len(q) if lim is None else min(lim, len(q))
        want = self.cached_len(q, n // P * P)
        nodes = cache.num_nodes
        m = cache.match(TokenSeq(q) if rng.random() < 0.5 else q, lim)
        got = m.cached_tokens
        assert got == want
        assert got % P == 0 and 0 <= got <= max(0, n // P * P)
        self.counts["match_split"] += cache.num_nodes > nodes
        self.counts["match_partial"] += 0 < got < len(q)
        self.history.append(q)
        r = rng.random()
        if r < 0.55:
            cache.lock(m)
            self.held.append((q, m, got))
        elif r < 0.8:
            self.pending.append((q, m))

    def op_lock(self):
        if not self.pending:
            return self.op_match()
        q, m = self.pending.pop(self.rng.randrange(len(self.pending)))
        prot = self.cache.full.protected_tokens
        self.cache.lock(m)
        assert self.cache.full.protected_tokens >= prot
        self.held.append((q, m, m.cached_tokens))

    def op_unlock(self):
        if not self.held:
            return self.op_match()
        q, m, c = self.held.pop(self.rng.randrange(len(self.held)))
        self.cache.unlock(m)
        self.pending.append((q, m))  # may be locked again later

    def op_alloc(self):
        rng, P, cache = self.rng, self.P, self.cache
        fp = cache.free_tokens // P
        k = rng.randint(0, fp + 3) if rng.random() < 0.8 else rng.randint(fp, fp + 40)
        if rng.random() < 0.5:
            k = min(k, 12)
        free_before = cache.free_tokens
        pages = cache.alloc(k)
        if k > fp:
            assert pages is None
            assert cache.free_tokens == free_before
            self.counts["alloc_none"] += 1
            return
        assert pages is not None and len(pages) == k
        assert cache.free_tokens == free_before - k * P
        if k:
            assert len(set(pages.tolist())) == k
            assert pages.min() >= 0 and pages.max() < self.capacity // P
            taken = set(np.concatenate(self.blocks).tolist()) if self.blocks else set()
            assert not taken & set(pages.tolist())
            self.blocks.append(pages)

    def op_free(self):
        if not self.blocks:
            return self.op_alloc()
        pages = self.blocks.pop(self.rng.randrange(len(self.blocks)))
        before = self.cache.free_tokens
        self.cache.free(pages)
        assert self.cache.free_tokens == before + len(pages) * self.P

    def op_insert(self):
        rng, P, cache = self.rng, self.P, self.cache
        if not self.held:
            return self.op_match()
        q, m, c = rng.choice(self.held)
        aligned = len(q) // P * P
        num = rng.randint(c // P, aligned // P) * P
        if rng.random() < 0.3:
            num = aligned
        pf = c if rng.random() < 0.6 else rng.randint(0, c // P) * P
        need = (num - pf) // P
        fits = [i for i, b in enumerate(self.blocks) if need <= len(b) <= need + 3]
        if fits and rng.random() < 0.7:
            pages = self.blocks.pop(rng.choice(fits))
        else:
            pages = cache.alloc(need + (rng.randint(1, 2) if rng.random() < 0.3 else 0))
            if pages is None:
                pages = cache.alloc(need)
            if pages is None:
                self.counts["insert_skipped"] += 1
                return
        want_prefix = self.cached_len(q, num)
        assert want_prefix >= c  # the locked prefix is still there
        free_before, tree_before = cache.free_tokens, self.tree_tokens()
        after = m if rng.random() < 0.5 else None  # resume from the locked match (same result)
        r = cache.insert(q, num, pages, pf, after=after)
        assert r.prefix_tokens == want_prefix
        lo, hi = (want_prefix - pf) // P, (num - pf) // P
        assert r.freed_pages == lo + (len(pages) - hi)
        assert cache.free_tokens == free_before + r.freed_pages * P
        assert self.tree_tokens() == tree_before + (num - want_prefix)
        self._paths = None
        assert self.present(q[:num])
        self.counts["insert_new"] += num > want_prefix
        if num:
            self.inserted.append(q[:num])
            if rng.random() < 0.3:  # inserted and nothing evicted since: matches fully
                assert cache.match(q, num).cached_tokens == num

    def op_evict(self):
        rng, cache = self.rng, self.cache
        ev = cache.full.evictable_tokens
        r = rng.random()
        if r < 0.15:
            amt = rng.randint(-3, 0)
        elif r < 0.65:
            amt = rng.randint(1, 4 * self.P + 8)
        else:
            amt = ev + rng.randint(0, 3 * self.P)
        free_before = cache.free_tokens
        want_victims = self.expected_victims(amt)
        freed = cache.evict(amt)
        self.pending.clear()  # their nodes may be gone
        alive = {n.id for n in cache.tree.iter_nodes()}
        assert want_victims == self.ids_before - alive
        assert cache.free_tokens == free_before + freed
        assert freed % self.P == 0 and 0 <= freed <= ev
        assert cache.full.evictable_tokens == ev - freed
        if amt <= 0:
            assert freed == 0
        elif amt >= ev:
            assert freed == ev
            self.counts["evict_all"] += 1
        else:
            assert freed >= amt

    def policy_key(self, node, tick, hits):
        """The documented order: smallest key first, ties to the older node id."""
        pol = self.cache.policy.name
        if pol == "lru":
            return (tick, node.id)
        if pol == "lfu":
            return (hits, tick, node.id)
        return (node.created, node.id)

    def expected_victims(self, amt: int) -> set:
        """Ids that `evict(amt)` must remove: unlocked leaves, whole nodes, in policy order,
        a parent joining the candidates when its last child goes (full rescan each time)."""
        tree = self.cache.tree
        root = tree.root
        nodes = list(tree.iter_nodes())
        self.ids_before = {n.id for n in nodes}
        kids = {n.id: len(n.children) for n in nodes}
        # a candidate's key reads "last call that visited it" and "match calls that walked
        # through it"; with lazy statistics (tree.py) those are the max tick and the sum of
        # hits stored in its subtree (all of which is gone by the time it is a leaf)
        tick = {n.id: n.tick for n in nodes}
        hits = {n.id: n.hits for n in nodes}
        if tree.lazy:
            for n in reversed(nodes):  # children before parents
                for c in n.children.values():
                    tick[n.id] = max(tick[n.id], tick[c.id])
                    hits[n.id] += hits[c.id]
        gone, freed = set(), 0
        while freed < amt:
            cands = [n for n in nodes if n is not root and n.id not in gone
                     and kids[n.id] == 0 and n.lock_ref == 0]
            if not cands:
                break
            v = min(cands, key=lambda n: self.policy_key(n, tick[n.id], hits[n.id]))
            gone.add(v.id)
            kids[v.parent.id] -= 1
            freed += v.num_tokens
        return gone

    def op_rematch(self):
        if not self.inserted:
            return self.op_match()
        q = self.rng.choice(self.inserted)
        present = self.present(q)
        got = self.cache.match(q).cached_tokens
        if present:
            assert got == len(q)
            self.counts["rematch_full"] += 1
        else:
            assert got < len(q)
            assert got == self.cached_len(q, len(q))

    def op_step(self):
        rng, P, cache = self.rng, self.P, self.cache
        prompt = self.make_seq()
        if not prompt and rng.random() < 0.7:
            prompt = self.tail(1, 5)
        if rng.random() < 0.02:  # longer than the whole pool: evicts all it can, then is rejected
            prompt = prompt + self.tail(self.capacity, self.capacity + 2 * P)
        r = rng.random()
        output = None if r < 0.15 else (self.tail(0, 5) if r < 0.3 else self.fresh_tokens(rng.randint(0, 5)))
        lp = len(prompt)
        s = prompt + output[:-1] if output is not None and len(output) > 1 else prompt
        want_cached = self.cached_len(prompt, max(lp - 1, 0) // P * P)
        free_before, tree_before = cache.free_tokens, self.tree_tokens()
        res = self.stepper.step(prompt, output)
        self.pending.clear()
        assert res.cached_tokens == want_cached
        assert res.prompt_tokens == lp
        assert res.output_tokens == (0 if output is None else len(output))
        assert res.evicted_tokens % P == 0 and res.evicted_tokens >= 0
        self._paths = None
        if res.rejected:
            n = len(s) - res.cached_tokens
            assert -(-n // P) * P > cache.free_tokens  # really short after evicting
            assert cache.free_tokens == free_before + res.evicted_tokens
            assert self.tree_tokens() == tree_before - res.evicted_tokens
            self.counts["rejected"] += 1
        else:
            aligned = len(s) // P * P
            assert self.present(s[:aligned])
            if aligned:
                self.inserted.append(s[:aligned])
            # conservation within the step: what left the pool went to the tree
            grew = self.tree_tokens() - (tree_before - res.evicted_tokens)
            assert grew >= 0
            assert cache.free_tokens == free_before + res.evicted_tokens - grew
        self.history.append(prompt)
        self.history.append(s)
        if output:
            self.history.append(prompt + output)

    def op_reset(self):
        for _q, m, _c in self.held:
            self.cache.unlock(m)
        self.held.clear()
        for b in self.blocks:
            self.cache.free(b)
        self.blocks.clear()

    def run(self, n_ops: int):
        names = list(WEIGHTS)
        weights = [WEIGHTS[k] for k in names]
        for _ in range(n_ops):
            op = self.rng.choices(names, weights)[0]
            if len(self.held) > 6 and op in ("match", "lock"):
                op = "unlock"
            if len(self.blocks) > 6 and op == "alloc":
                op = "free"
            self.counts[op] += 1
            getattr(self, "op_" + op)()
            self.check()
            if len(self.history) > 60:
                del self.history[:20]
            if len(self.inserted) > 60:
                del self.inserted[:20]
        # wind down: release everything, evict everything -> empty tree, full pool
        self.op_reset()
        self.check()
        assert self.cache.full.protected_tokens == 0
        self.cache.evict(self.capacity + 1)
        self.check()
        assert self.cache.num_nodes == 1
        assert self.cache.free_tokens == self.capacity


@pytest.mark.parametrize("page,policy,seed", SCENARIOS)
def test_random_ops(page, policy, seed):
    h = Harness(page, policy, seed)
    h.run(OPS_PER_SCENARIO)
    c = h.counts
    # the run really exercised the interesting paths
    for key in ("match_split", "match_partial", "alloc_none", "insert_new", "evict_all",
                "rematch_full", "rejected"):
        assert c[key] > 0, (key, dict(c))
    assert h.cache.full.evicted_tokens > 0


def test_insert_freed_pages_reports_pages_handed_back():
    """`InsertResult.freed_pages` is the number of pages handed back, also when the tree
    already holds every token and `pages` cover fewer than num_tokens - pages_from tokens
    (it once reported (prefix - pages_from) / P, more than len(pages))."""
    cache = RadixCache(CacheConfig(page_size=2, capacity_tokens=20))
    seq = [1, 2, 3, 4, 5, 6]
    cache.insert(seq, 6, cache.alloc(3), 0)  # tree holds all 6 tokens
    pages = cache.alloc(1)  # KV of tokens 2..3 only
    free_before = cache.free_tokens
    r = cache.insert(seq, 6, pages, 2)
    handed_back = (cache.free_tokens - free_before) // 2
    assert handed_back == 1
    invariants.check(cache)  # no lock is held: the state itself is consistent
    assert r.freed_pages == handed_back

