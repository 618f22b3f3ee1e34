"""vLLM v1's prefix cache (hash blocks in a block pool), per request as vLLM 0.33.0 decides it.

A separate core beside the radix tree, not a policy on it: vLLM keeps no tree. Each full block
of a request is named by a parent-chained hash of its whole prefix; a hash table maps each
hash to the cached blocks holding it (duplicates allowed: vLLM never de-duplicates, so a
block recomputed beside a cached copy is cached again); a free queue orders every block with
no reference. The rules, read from vllm 0.33.0 (vllm/v1/core/kv_cache_manager.py,
block_pool.py, kv_cache_utils.py, single_type_kv_cache_manager.py: FullAttentionManager):

* lookup (`get_computed_blocks`): the longest run of cached blocks from the first, over at
  most (len(prompt) - 1) // B blocks (the last prompt token is always recomputed, and only
  full blocks hit); for a hash held by several blocks, the one cached first;
* admission (`allocate_slots`): the prompt needs ceil(P / B) blocks; the hit blocks count as
  taken, the hit blocks with no reference count against the free blocks too; a prompt that
  does not fit is refused and changes nothing;
* allocation (`BlockPool.get_new_blocks`): blocks come from the free queue's head; a block
  that held a hash loses it there (that is the eviction);
* caching (`cache_full_blocks`): every block that becomes full gets its hash: the prompt's
  after prefill, each output block as decoding fills it (one output token per step; the last
  sampled token is never computed, so prompt + output[:-1] is what gets cached);
* free (`free_blocks`, in reverse block order): a block whose references drop to 0 goes to
  the free queue's tail if it holds a hash (so a request's tail block is evicted first), to
  its head if not (reused first). The queue starts as blocks 1 .. N-1 in id order; block 0
  is vLLM's null block and is never handed out.

So the queue is always [unhashed blocks freed, newest first] + [never-used blocks, by id] +
[hashed blocks in free order]: kept here as a deque, a counter and an ordered dict.

Hashes are this project's page keys (cache_core/keys.py: chained over the whole prefix, equal
keys mean equal prefixes) instead of vLLM's sha256 of (parent, tokens): the same equality, so
the same decisions. The reference harness tools/vllm_ref runs vLLM's own classes on the same
trace; tests/test_vllm_reference.py compares every request.
"""
from __future__ import annotations

from collections import OrderedDict, deque

import numpy as np

from .keys import as_tokens, page_keys
from .replay import StepResult


class VllmBlockCache:
    """The block pool and the one full-attention KV cache manager of a vLLM engine.

    `num_blocks` is vLLM's `num_gpu_blocks` (block 0, the null block, included): N - 1 blocks
    hold KV. None: unbounded (never evicts)."""

    def __init__(self, block_size: int = 16, num_blocks: int | None = None):
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        if num_blocks is not None and num_blocks < 2:
            raise ValueError(f"num_blocks must be >= 2 (block 0 is the null block), got {num_blocks}")
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.ref: dict[int, int] = {}  # block id -> references (absent: 0)
        self.hash_of: dict[int, int] = {}  # block id -> its hash (absent: none)
        self.by_hash: dict[int, int] = {}  # hash -> the block holding it that was cached first
        self.copies: dict[int, list[int]] = {}  # hash -> the later copies, in caching order
        self.unhashed: deque[int] = deque()  # free queue head: unhashed blocks freed
        self.fresh = 1  # next never-used block id
        self.hashed: OrderedDict[int, None] = OrderedDict()  # free queue tail: hashed blocks, LRU first
        self.evicted_blocks = 0
        self.evicted_log: list[int] | None = None  # set to [] to record evicted block ids in order

    @property
    def unbounded(self) -> bool:
        return self.num_blocks is None

    # -- the free queue --------------------------------------------------------------------
    @property
    def free_blocks(self) -> int:
        fresh = (self.num_blocks - self.fresh) if self.num_blocks is not None else 1 << 62
        return len(self.unhashed) + fresh + len(self.hashed)

    def free_queue(self) -> list[tuple[int, bool]]:
        """(block id, holds a hash) of every free block, head (taken next) first (bounded pools)."""
        fresh = range(self.fresh, self.num_blocks if self.num_blocks is not None else self.fresh)
        return ([(b, False) for b in self.unhashed] + [(b, False) for b in fresh]
                + [(b, True) for b in self.hashed])

    def _take(self, n: int) -> list[int]:
        """n blocks from the queue's head: unhashed ones, never-used ones, then hashed ones,
        whose hashes are dropped (evicted)."""
        unhashed = self.unhashed
        out = [unhashed.popleft() for _ in range(min(n, len(unhashed)))]
        if len(out) < n:
            top = self.fresh + n - len(out)
            if self.num_blocks is not None:
                top = min(top, self.num_blocks)
            out.extend(range(self.fresh, top))
            self.fresh = top
        evicted = [self.hashed.popitem(last=False)[0] for _ in range(n - len(out))]
        if evicted:
            self._drop_hashes(evicted)
            out += evicted
        ref = self.ref
        for b in out:
            ref[b] = 1
        return out

    def _drop_hashes(self, blocks: list[int]) -> None:
        hash_of, by_hash, copies = self.hash_of, self.by_hash, self.copies
        for b in blocks:
            h = hash_of.pop(b)
            if h in copies:  # a hash held twice (rare): keep the others in caching order
                holders = [by_hash[h], *copies.pop(h)]
                holders.remove(b)
                by_hash[h] = holders[0]
                if len(holders) > 1:
                    copies[h] = holders[1:]
            else:
                del by_hash[h]
        self.evicted_blocks += len(blocks)
        if self.evicted_log is not None:
            self.evicted_log.extend(blocks)

    def _free(self, blocks: list[int]) -> None:
        first: list[int] = []
        last: list[int] = []
        ref, hash_of = self.ref, self.hash_of
        for b in reversed(blocks):
            r = ref[b] - 1
            if r:
                ref[b] = r
                continue
            del ref[b]
            (last if b in hash_of else first).append(b)
        self.unhashed.extendleft(reversed(first))
        self.hashed.update(dict.fromkeys(last))

    def _cache(self, blocks: list[int], keys: list[int], start: int, end: int) -> None:
        hash_of, by_hash = self.hash_of, self.by_hash
        for b, h in zip(blocks[start:end], keys[start:end]):
            hash_of[b] = h
            if h in by_hash:
                self.copies.setdefault(h, []).append(b)
            else:
                by_hash[h] = b

    # -- one request -----------------------------------------------------------------------
    def lookup(self, keys: list[int], prompt_len: int) -> list[int]:
        """The hit blocks of a prompt whose full-block keys start `keys` (no state change)."""
        hit = []
        by_hash = self.by_hash
        for h in keys[: (prompt_len - 1) // self.block_size]:
            b = by_hash.get(h)
            if b is None:
                break
            hit.append(b)
        return hit

    # -- the phases of `step`, for a core composed on this one (cache_core/vllm_offload.py) ----
    def fits(self, hit: list[int], n_new: int) -> bool:
        """Whether `n_new` new blocks fit beside the hit blocks (those with no reference count)."""
        return n_new + sum(1 for b in hit if b not in self.ref) <= self.free_blocks

    def touch(self, hit: list[int]) -> None:
        """Reference the hit blocks (out of the free queue)."""
        for b in hit:
            if b not in self.ref:
                del self.hashed[b]
                self.ref[b] = 0
            self.ref[b] += 1

    def take(self, n: int) -> list[int]:
        return self._take(n)

    def cache(self, blocks: list[int], keys: list[int], start: int, end: int) -> None:
        """Give blocks[start:end] their hashes keys[start:end] (`cache_full_blocks`)."""
        self._cache(blocks, keys, start, end)

    def free(self, blocks: list[int]) -> None:
        self._free(blocks)

    def decode(self, blocks: list[int], keys: list[int], done: int, pos: int) -> int | None:
        """A request's block table `blocks` grown to hold `pos` tokens (one new block when the last
        is full) and its blocks that became full cached; returns how many are cached now, or None
        when no block is free (vLLM would preempt)."""
        if len(blocks) * self.block_size < pos:
            if self.free_blocks < 1:
                return None
            blocks += self._take(1)
        full = pos // self.block_size
        if full > done:
            self._cache(blocks, keys, done, full)
        return max(done, full)

    def step(self, prompt, output=None) -> StepResult:
        """Serve one request alone, as vLLM's scheduler does: prefill, decode output[:-1], free."""
        B = self.block_size
        prompt = as_tokens(prompt)
        P = len(prompt)
        n_out = 0 if output is None else len(output)
        seq = prompt if n_out <= 1 else np.concatenate([prompt, as_tokens(output)[:-1]])
        keys = page_keys(seq, B)[0].tolist()
        hit = self.lookup(keys, P)
        cached = len(hit) * B
        evicted0 = self.evicted_blocks
        need = -(-P // B) - len(hit)
        if need + sum(1 for b in hit if b not in self.ref) > self.free_blocks:
            return StepResult(P, n_out, cached, 0, True)
        self.touch(hit)
        blocks = hit + self._take(need)
        self._cache(blocks, keys, len(hit), P // B)
        done = P // B
        rejected = False
        for t in range(1, n_out):  # decode step t computes token P + t - 1
            if (grown := self.decode(blocks, keys, done, P + t)) is None:
                rejected = True  # vLLM would preempt; alone, the request stops here
                break
            done = grown
        self._free(blocks)
        return StepResult(P, n_out, cached, (self.evicted_blocks - evicted0) * B, rejected)

    def check(self) -> None:
        """Recount: every block is referenced, free or never used, exactly once."""
        free = list(self.unhashed) + list(self.hashed)
        assert len(set(free)) == len(free), "a block is twice in the free queue"
        assert not set(free) & set(self.ref), "a referenced block is in the free queue"
        assert all(b in self.hash_of for b in self.hashed) and not any(b in self.hash_of for b in self.unhashed)
        assert len(self.by_hash) + sum(len(v) for v in self.copies.values()) == len(self.hash_of)
        assert all(self.hash_of[b] == h for h, b in self.by_hash.items())
        if self.num_blocks is not None:
            assert len(free) + len(self.ref) + (self.num_blocks - self.fresh) == self.num_blocks - 1
