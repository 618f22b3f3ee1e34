"""Seeded random stress of the HiCache tiers with manual acknowledgements (auto_ack=False).

Every write policy x both L3 write modes x page sizes 1 and 4 (12 configurations), L1 + L2
(hicache_ratio 2 or an explicit l2_tokens) + L3 (unbounded or bounded), random
min_prefetch_tokens. The driver issues, at random:

- requests (prompts cut from a few shared documents over a 3-token alphabet, plus a random
  tail, with or without the replay limit): match -> lock -> load -> evict/alloc -> insert,
  then unlock now or hold the lock for a while;
- acknowledgements of a random subset of the pending transfers, in random order, each failing
  (``ok=False``) with probability 0.1;
- unlocks of held requests, bare matches, and L1 / L2 evictions of random size.

After EVERY operation `invariants.check(cache)` runs, plus these exact checks:

- every match gives the device / host / storage split an oracle computes from the tree and
  the L3 index *before* the call (device = the L1 run of the path, host = the rest of the
  traversal, storage = the leading run of page keys present in L3 after it, ignored when
  shorter than min_prefetch_tokens); after `load`, the reported cached prefix is on L1;
- every transfer has the tiers of its kind (backup L1->L2, load L2->L1, store L2->L3,
  prefetch L3->L2), one slot per page on each addressed side and the page keys of its tokens;
- a pending transfer's destination slots are neither free nor in a node; a node with a
  transfer in flight is never removed;
- a successful ack makes the payload valid where it went (backup/prefetch: a node's L2 pages,
  load: a node's L1 pages, store: the keys in L3); a failed one returns the destination slots
  to their pool and leaves the node on its source tier.

`test_tiers_stress_random` is the driver exactly as above, with nothing steered: it passes in
every configuration (the bugs it found are fixed, each pinned by a minimal reproducer in
tests/test_tiers.py).

`test_tiers_stress_protocol` runs the same driver with the protocol an engine follows, so that
the paths an engine takes are covered densely (>= 20,000 operations in total):
  a. a request waits for its own loads and prefetches: they are acknowledged (random order,
     random failures) right after `load`, and the request re-matches up to three times;
  b. before a match or an insert that would split a node with a transfer in flight, every
     pending transfer is acknowledged first (in random order);
  c. backups always succeed (stores, loads and prefetches fail at random);
  d. a storage hit below a device node that has no L2 copy is not taken (the request
     re-matches with the limit at the end of its tree match);
  e. an insert that heals host-only nodes of the path and also adds a new leaf is split in two
     inserts (the healed part, then the new leaf from the end of the tree path).
Backups and stores stay in flight across other operations and are acknowledged at random
points in random order.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from cache_core import CacheConfig, RadixCache, TokenSeq
from cache_core import invariants
from cache_core.actions import L1, L2, L3, Transfer
from cache_core.keys import page_keys
from cache_core.tiers import L3_WRITES, WRITE_POLICIES, TierConfig

KIND_TIERS = {"backup": (L1, L2), "load": (L2, L1), "store": (L2, L3), "prefetch": (L3, L2)}
ALPHABET = 3
OPS = 1750
CONFIGS = [(P, wp, l3w) for P in (1, 4) for wp in WRITE_POLICIES for l3w in L3_WRITES]
assert len(CONFIGS) * OPS >= 20_000


MOONCAKE_CONFIGS = [(P, wp, "on_insert") for P in (1, 4) for wp in ("write_through", "write_back")]


class Run:
    def __init__(self, P, wp, l3w, seed, protocol: bool, l3_model: str = "prefix"):
        rng = self.rng = random.Random(seed)
        self.P = P
        self.protocol = protocol
        self.l1 = 40 * P
        variant = seed % 3
        tiers = TierConfig(
            hicache_ratio=2 if variant != 1 else None,
            l2_tokens=None if variant != 1 else 30 * P,
            l3=True,
            l3_tokens=(None if variant != 2 else 90 * P) if l3_model == "prefix" else [40 * P, 60 * P, 90 * P][variant],
            write_policy=wp, l3_write=l3w, l3_model=l3_model,  # mooncake: batch evictions of a small pool,
            l3_ssd_tokens=30 * P if l3_model == "mooncake" and variant == 1 else None,  # SSD below on 1 seed in 3
            write_through_threshold=rng.choice([1, 2, 3]),
            min_prefetch_tokens=rng.choice([0, P, 3 * P]),
        )
        self.cfg = tiers
        self.c = RadixCache(CacheConfig(page_size=P, capacity_tokens=self.l1, tiers=tiers),
                            record_actions=True, auto_ack=False)
        self.docs = [[rng.randrange(ALPHABET) for _ in range(20 * P)] for _ in range(4)]
        self.held = []
        self.n_act = 0
        self.counts = {k: 0 for k in ("backup", "load", "store", "prefetch", "failed", "storage_hits",
                                      "host_hits", "demoted", "l2_evicted", "max_pending", "requests",
                                      "held_pending_ops", "healed", "l3_evicted")}

    # -- oracles ------------------------------------------------------------------------------------
    def path(self, seq, n):
        return self.c.tree.path_nodes(seq.data, n // self.P * self.P)

    def oracle_match(self, seq, limit):
        P, c = self.P, self.c
        n = seq.length if limit is None else min(limit, seq.length)
        n = n // P * P
        nodes = self.path(seq, n)
        trav = sum(k for _, k in nodes)
        device = 0
        for nd, k in nodes:
            if nd.value is None:
                break
            device += k
        storage = 0
        if trav < n:
            keys = page_keys(np.frombuffer(seq.data, dtype=np.int64)[:n], P)[0][trav // P:]
            run = 0
            for k in keys.tolist():
                if k not in c.hier.storage:
                    break
                run += 1
            storage = run * P if run * P >= self.cfg.min_prefetch_tokens else 0
        return trav, device, storage

    def match(self, seq, limit):
        trav, device, storage = self.oracle_match(seq, limit)
        m = self.c.match(seq, limit)
        got = (m.traversed, m.device, m.host_tokens, m.storage_tokens, m.cached_tokens)
        if self.protocol:  # the oracle does not model a match cut at a prefetch still in flight
            assert got == (trav, device, trav - device, storage, trav + storage), (got, trav, device, storage)
        else:  # fully random acks: the split must still be consistent and on the right tiers
            assert m.cached_tokens == m.device + m.host_tokens + m.storage_tokens and m.device <= device
        if m.storage_tokens:
            self.counts["storage_hits"] += 1
        if m.host_tokens:
            self.counts["host_hits"] += 1
        return m

    def on_l1(self, seq, n):
        """seq[:n] is on L1 in the tree."""
        nodes = self.path(seq, n)
        return sum(k for _, k in nodes) == n and all(nd.value is not None for nd, _ in nodes)

    # -- acks -----------------------------------------------------------------------------------------
    def ack(self, tid, ok):
        c = self.c
        t, _ = c.hier.pending[tid]
        if self.protocol and t.kind == "backup":
            ok = True
        c.ack(tid, ok)
        if not ok:
            self.counts["failed"] += 1
        dst = None if t.dst is None else t.dst.tolist()
        if t.kind == "store":
            if ok and c.hier.storage.capacity_pages is None:
                assert all(int(k) in c.hier.storage for k in t.keys.tolist())
            return
        pool = c.hier.pool if t.dst_tier == L2 else c.full.pool
        free = set(pool.free_view().tolist())
        attr = "value" if t.dst_tier == L1 else "host"
        # a node split while in flight holds its slice of the pages: collect every holder
        held = {}
        for n in c.tree.iter_nodes():
            if n.parent is not None and getattr(n, attr) is not None:
                for j, p in enumerate(getattr(n, attr).tolist()):
                    held[p] = (n, j)
        if ok:
            placed = [p for p in dst if p in held]
            if placed:
                assert set(dst).isdisjoint(free), (t, dst)
            else:  # refused at the ack (its parent is no longer on the tier): slots back to the pool
                assert set(dst) <= free, (t, dst)
            # all placed, or none (the ack found its node's parent not on the tier any more)
            assert len(placed) in (len(dst), 0) or t.kind == "prefetch", (t, dst, placed)
            for i, p in enumerate(placed if len(placed) == len(dst) else []):
                n, j = held[p]
                assert int(n.pkeys[j]) == int(t.keys[i])
                if t.kind == "load":
                    assert int(n.host[j]) == int(t.src[i])
        else:
            assert all(p not in held for p in dst) and set(dst) <= free, (t, dst)
            if t.kind in ("backup", "load") and self.protocol:  # the source stays valid
                # (checked whole: fully random acks may split the node meanwhile)
                src_attr = "value" if t.src_tier == L1 else "host"
                assert any(getattr(n, src_attr) is not None and getattr(n, src_attr).tolist() == t.src.tolist()
                           for n in c.tree.iter_nodes() if n.parent is not None)

    def ack_some(self, kinds=None, all_=False):
        c, rng = self.c, self.rng
        ids = [i for i, (t, _) in c.hier.pending.items() if kinds is None or t.kind in kinds]
        if not ids:
            return
        pick = ids if all_ else rng.sample(ids, rng.randint(1, len(ids)))
        rng.shuffle(pick)
        for i in pick:
            if i in c.hier.pending:
                self.ack(i, rng.random() >= 0.1)

    def drain(self):
        while self.c.hier.pending:
            self.ack_some(all_=True)

    def blocked(self, seq, n):
        """Some node on the path is in flight (or not on L1 because one above it is)."""
        return any(nd.pending for nd, _ in self.path(seq, n))

    def splits_pending(self, seq, n):
        return any(nd.pending and k < nd.num_tokens for nd, k in self.path(seq, n))

    # -- checks after every op ----------------------------------------------------------------------
    def after(self, before_pending):
        c = self.c
        invariants.check(c)
        P = self.P
        for a in c.actions[self.n_act:]:
            if isinstance(a, Transfer):
                assert (a.src_tier, a.dst_tier) == KIND_TIERS[a.kind], a
                assert a.tokens % P == 0 and a.tokens > 0 and len(a.keys) * P == a.tokens
                for side in (a.src, a.dst):
                    assert side is None or len(side) * P == a.tokens
                assert (a.src is None) == (a.kind == "prefetch") and (a.dst is None) == (a.kind == "store")
                self.counts[a.kind] += 1
        self.n_act = len(c.actions)
        for nd in before_pending:
            if nd.pending:
                assert nd.alive, f"node #{nd.id} removed with a transfer in flight"
        l1_free = set(c.full.pool.free_view().tolist())
        l2_free = set(c.hier.pool.free_view().tolist())
        for t, _ in c.hier.pending.values():
            if t.dst is not None:
                assert set(t.dst.tolist()).isdisjoint(l1_free if t.dst_tier == L1 else l2_free), t
        self.counts["max_pending"] = max(self.counts["max_pending"], len(c.hier.pending))
        if self.held and c.hier.pending:
            self.counts["held_pending_ops"] += 1

    # -- operations -----------------------------------------------------------------------------------
    def tokens(self):
        rng, P = self.rng, self.P
        r = rng.random()
        if r < 0.85:
            d = rng.choice(self.docs)
            t = d[: rng.randint(1, len(d))] + [rng.randrange(ALPHABET) for _ in range(rng.randint(0, 2 * P))]
        else:
            t = [rng.randrange(ALPHABET) for _ in range(rng.randint(1, 20 * P))]
        return t

    def request(self):
        c, rng, P = self.c, self.rng, self.P
        self.counts["requests"] += 1
        toks = self.tokens()
        seq = TokenSeq(toks)
        limit = rng.choice([None, max(len(toks) - 1, 0)])
        n = len(toks) if limit is None else limit
        if self.protocol and self.splits_pending(seq, n):
            self.drain()
        m = self.match(seq, limit)
        if self.protocol and m.storage_tokens:
            nodes = self.path(seq, m.traversed)
            if nodes and nodes[-1][0].host is None:  # (d)
                m = self.match(seq, m.traversed)
        c.lock(m)
        for attempt in range(4):
            n0 = len(c.actions)
            m = c.load(m, seq)
            assert self.on_l1(seq, m.cached_tokens)
            new = [a.id for a in c.actions[n0:] if isinstance(a, Transfer) and a.kind in ("load", "prefetch")]
            if not self.protocol or not new:
                break
            rng.shuffle(new)  # (a)
            for i in new:
                if i in c.hier.pending:
                    self.ack(i, rng.random() >= 0.1)
            if attempt == 3:
                break
            c.unlock(m)
            if self.splits_pending(seq, n):
                self.drain()
            m = self.match(seq, limit)
            c.lock(m)
        aligned = seq.length // P * P
        if self.protocol and self.splits_pending(seq, aligned):
            self.drain()  # (b)
        if aligned > m.cached_tokens:
            need = (aligned - m.cached_tokens) // P + rng.choice([0, 0, 1])  # sometimes a spare page
            if c.free_tokens < need * P:
                c.evict(need * P - c.free_tokens)
            pages = c.alloc(need)
            if pages is not None:
                after = m if rng.random() < 0.5 else None
                nodes = self.path(seq, aligned)
                prefix = sum(k for _, k in nodes)
                if (self.protocol and m.cached_tokens < prefix < aligned
                        and any(nd.value is None for nd, _ in nodes)):
                    # (e) heal the host-only part and add the new leaf in two inserts
                    cut = (prefix - m.cached_tokens) // P
                    c.insert(seq, prefix, pages[:cut], m.cached_tokens, after=after)
                    assert self.on_l1(seq, prefix) or self.blocked(seq, prefix)
                    c.insert(seq, aligned, pages[cut:], prefix, after=after)
                    self.counts["healed"] += 1
                else:
                    c.insert(seq, aligned, pages, m.cached_tokens, after=after)
                # on L1, unless a node on the path is in flight: the core then heals / caches
                # nothing below it (L1 stays prefix-closed)
                assert self.on_l1(seq, aligned) or self.blocked(seq, aligned)
        if rng.random() < 0.3:
            self.held.append(m)
        else:
            c.unlock(m)

    def step(self):
        c, rng = self.c, self.rng
        before = [nd for nd in c.tree.iter_nodes() if nd.pending]
        r = rng.random()
        if r < 0.45:
            self.request()
        elif r < 0.70:
            if c.hier.pending:
                self.ack_some(None if not self.protocol else ("backup", "store"))
        elif r < 0.80:
            if self.held:
                c.unlock(self.held.pop(rng.randrange(len(self.held))))
        elif r < 0.86:
            toks = self.tokens()
            seq = TokenSeq(toks)
            if not (self.protocol and self.splits_pending(seq, len(toks))):
                self.match(seq, None)
        elif r < 0.94:
            d0 = c.hier.full.demoted_tokens
            freed = c.evict(rng.randint(1, 20 * self.P))
            assert freed >= 0
            self.counts["demoted"] += c.hier.full.demoted_tokens - d0
        else:
            e0 = c.hier.evicted_l2_tokens
            c.hier.evict_l2(rng.randint(1, 20 * self.P))
            self.counts["l2_evicted"] += c.hier.evicted_l2_tokens - e0
        self.after(before)


def _run(P, wp, l3w, protocol, ops=OPS, l3_model="prefix"):
    counts = None
    per_seed = ops // 3
    base = CONFIGS.index((P, wp, l3w)) * 3 + (0 if l3_model == "prefix" else 1000)
    for seed in range(3):
        run = Run(P, wp, l3w, seed=base + seed, protocol=protocol, l3_model=l3_model)
        for i in range(per_seed if seed < 2 else ops - 2 * per_seed):
            run.step()
        if protocol:  # everything still in flight completes, the tree stays consistent
            run.drain()
            while run.held:
                run.c.unlock(run.held.pop())
            run.after([])
            assert run.c.hier.pending == {}
        # with on_l2_evict a victim leaves L2 only once its store is acknowledged: count at the end
        run.counts["l2_evicted"] = max(run.counts["l2_evicted"], run.c.hier.evicted_l2_tokens)
        run.counts["l3_evicted"] = run.c.hier.storage.evicted_pages
        counts = run.counts if counts is None else {k: counts[k] + v if k != "max_pending" else max(counts[k], v)
                                                    for k, v in run.counts.items()}
    return counts


@pytest.mark.parametrize("P,wp,l3w", CONFIGS, ids=[f"P{p}-{w}-{m}" for p, w, m in CONFIGS])
def test_tiers_stress_protocol(P, wp, l3w):
    counts = _run(P, wp, l3w, protocol=True)
    # the run really exercised every path (a vacuous run fails here)
    for k in ("backup", "load", "store", "prefetch", "failed", "storage_hits", "host_hits", "demoted",
              "l2_evicted", "held_pending_ops"):
        assert counts[k] > 0, (k, counts)
    assert counts["max_pending"] >= 3, counts


@pytest.mark.parametrize("P,wp,l3w", CONFIGS, ids=[f"P{p}-{w}-{m}" for p, w, m in CONFIGS])
def test_tiers_stress_random(P, wp, l3w):
    """Fully random acks in random order, ~10% failures of every kind, splits of nodes in
    flight allowed: invariants.check after every operation and the safety checks of `ack`
    (a failed transfer's destination is free again, a successful one is held)."""
    counts = _run(P, wp, l3w, protocol=False)
    for k in ("backup", "load", "failed", "host_hits", "demoted"):
        assert counts[k] > 0, (k, counts)


@pytest.mark.parametrize("protocol", [True, False], ids=["protocol", "random"])
@pytest.mark.parametrize("P,wp,l3w", MOONCAKE_CONFIGS, ids=[f"P{p}-{w}-{m}" for p, w, m in MOONCAKE_CONFIGS])
def test_tiers_stress_mooncake_store(P, wp, l3w, protocol):
    """The same stresses with L3 as the Mooncake store model (watermark batch evictions of a
    small pool, an SSD tier below it on one seed in 3): the match oracle (a storage run stops
    at the first page the store lacks), invariants.check after every operation, ack safety."""
    counts = _run(P, wp, l3w, protocol=protocol, l3_model="mooncake")
    for k in ("backup", "load", "store", "prefetch", "storage_hits", "host_hits", "demoted", "l3_evicted"):
        assert counts[k] > 0, (k, counts)
