"""Worked examples from seed 004 (RadixAttention), pinned exactly.

1. The apple / applet / application / banana radix tree: insert, split and search through
   the public `RadixCache` API (page size 1, one character = one token).
2. The nine-step walk-through of the seed (the SGLang paper's Figure 3): two chat sessions
   R1 and R2, a few-shot request R3 with three question branches and self-consistency
   samples, with LRU evictions exactly at steps 5, 8 and 9.

Tests read tree nodes directly (`children`, `tokens()`, `lock_ref`, `tick`, `hits`) to
assert the exact shape; `invariants.check` runs after every step.
"""
import pytest

from cache_core import CacheConfig, RadixCache, ReplayStepper, TokenSeq
from cache_core import invariants


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------
from helpers import edge, shape, toks  # noqa: E402  (shared test helpers)


def find(cache, path: str):
    """The node whose root path spells exactly `path` (walking whole edges)."""
    node, rest = cache.tree.root, path
    while rest:
        for c in node.children.values():
            e = edge(c)
            if rest.startswith(e):
                node, rest = c, rest[len(e):]
                break
        else:
            raise KeyError(path)
    return node


def tree_tokens(tree: dict) -> int:
    return sum(len(e) + tree_tokens(sub) for e, sub in tree.items())


def put(cache, s: str):
    """One request through the public API: match, lock, alloc, insert, unlock."""
    seq = TokenSeq(toks(s))
    m = cache.match(seq)
    cache.lock(m)
    pages = cache.alloc(len(seq) - m.cached_tokens)
    assert pages is not None
    res = cache.insert(seq, len(seq), pages, m.cached_tokens)
    cache.unlock(m)
    invariants.check(cache)
    return m.cached_tokens, res


# ---------------------------------------------------------------------------------------
# 1. apple / applet / application / banana
# ---------------------------------------------------------------------------------------
def test_apple_inserts_split_exactly():
    cache = RadixCache(CacheConfig(page_size=1))
    assert shape(cache) == {}

    # "apple": the root gets one leaf holding the whole key.
    cached, res = put(cache, "apple")
    assert (cached, res.prefix_tokens, res.freed_pages) == (0, 0, 0)
    assert shape(cache) == {"apple": {}}
    assert cache.num_nodes == 2

    # "applet": "apple" is a whole prefix, so nothing splits; "t" hangs below "apple".
    # (The seed's text says "apple" is split into "appl"/"e" with "et" below "e" at this
    # point; that is not what a radix tree does - the appl/e split happens only when
    # "application" diverges after "appl", which is the seed's final tree.)
    cached, res = put(cache, "applet")
    assert (cached, res.prefix_tokens, res.freed_pages) == (5, 5, 0)
    assert shape(cache) == {"apple": {"t": {}}}
    assert cache.num_nodes == 3

    # "application": diverges after "appl" -> split into "appl" -> {"e" -> "t", "ication"}.
    cached, res = put(cache, "application")
    assert (cached, res.prefix_tokens, res.freed_pages) == (4, 4, 0)
    assert shape(cache) == {"appl": {"e": {"t": {}}, "ication": {}}}
    assert cache.num_nodes == 5

    # "banana": no shared prefix -> a new branch at the root.
    cached, res = put(cache, "banana")
    assert (cached, res.prefix_tokens, res.freed_pages) == (0, 0, 0)
    assert shape(cache) == {"appl": {"e": {"t": {}}, "ication": {}}, "banana": {}}
    assert cache.num_nodes == 6
    assert cache.cached_tokens_total == len("appl" + "e" + "t" + "ication" + "banana") == 19
    assert cache.full.evictable_tokens == 19 and cache.full.protected_tokens == 0
    assert all(n.lock_ref == 0 for n in cache.tree.iter_nodes() if n is not cache.tree.root)
    assert cache.tree.root.lock_ref == 1


def test_inserting_an_existing_key_changes_nothing_and_frees_duplicate_pages():
    cache = RadixCache(CacheConfig(page_size=1, capacity_tokens=32))
    put(cache, "apple")
    put(cache, "application")
    before = shape(cache)
    seq = TokenSeq(toks("apple"))
    pages = cache.alloc(5)  # pretend the KV was recomputed from scratch
    res = cache.insert(seq, 5, pages, 0)
    assert (res.prefix_tokens, res.freed_pages) == (5, 5)
    assert shape(cache) == before == {"appl": {"e": {}, "ication": {}}}
    assert cache.free_tokens == 32 - len("appl" + "e" + "ication")
    invariants.check(cache)


def _apple_tree():
    cache = RadixCache(CacheConfig(page_size=1))
    for w in ("apple", "applet", "application", "banana"):
        put(cache, w)
    return cache


def test_apple_search_lengths_and_splits():
    """match() returns the longest cached prefix; a match ending inside an edge splits it
    there (SGLang's match_prefix does the same), a match ending on a node boundary or
    falling off the tree changes nothing."""
    cache = _apple_tree()
    full = {"appl": {"e": {"t": {}}, "ication": {}}, "banana": {}}

    # seed's search example: "application" walks root -> "appl" -> "ication" (a leaf).
    m = cache.match(TokenSeq(toks("application")))
    assert m.cached_tokens == 11
    assert edge(m.handle._node) == "ication" and not m.handle._node.children
    assert shape(cache) == full

    # "apple" ends at the internal node "e" (it has child "t"): full 5-token hit.
    m = cache.match(TokenSeq(toks("apple")))
    assert m.cached_tokens == 5
    assert edge(m.handle._node) == "e" and list(map(edge, m.handle._node.children.values())) == ["t"]
    assert shape(cache) == full

    assert cache.match(TokenSeq(toks("applet"))).cached_tokens == 6
    assert cache.match(TokenSeq(toks("applications"))).cached_tokens == 11  # longer than the tree
    assert cache.match(TokenSeq(toks("cherry"))).cached_tokens == 0
    assert cache.match(TokenSeq(toks(""))).cached_tokens == 0
    assert cache.match(TokenSeq(toks("b"))).cached_tokens == 1
    assert shape(cache) == {"appl": {"e": {"t": {}}, "ication": {}}, "b": {"anana": {}}}

    # "app" ends inside "appl": split into "app" -> "l".
    m = cache.match(TokenSeq(toks("app")))
    assert m.cached_tokens == 3
    assert shape(cache) == {"app": {"l": {"e": {"t": {}}, "ication": {}}}, "b": {"anana": {}}}
    assert edge(m.handle._node) == "app"

    # "apply": "app" + "l", then no child starts with "y": 4, no change.
    assert cache.match(TokenSeq(toks("apply"))).cached_tokens == 4
    assert shape(cache) == {"app": {"l": {"e": {"t": {}}, "ication": {}}}, "b": {"anana": {}}}

    # "banana": full hit along "b" + "anana".
    assert cache.match(TokenSeq(toks("banana"))).cached_tokens == 6
    # "band": "ban" then "d" != "a": split "anana" into "an" -> "ana".
    assert cache.match(TokenSeq(toks("band"))).cached_tokens == 3
    assert shape(cache) == {"app": {"l": {"e": {"t": {}}, "ication": {}}},
                            "b": {"an": {"ana": {}}}}

    # a limit cuts the query first: "application"[:7] = "applica" splits "ication".
    assert cache.match(TokenSeq(toks("application")), 7).cached_tokens == 7
    assert shape(cache) == {"app": {"l": {"e": {"t": {}}, "ica": {"tion": {}}}},
                            "b": {"an": {"ana": {}}}}
    # splits never change the set of cached strings or their token count
    assert cache.cached_tokens_total == 19
    assert cache.num_nodes == 10
    invariants.check(cache)


def test_apple_match_ticks_hits_and_split_tick():
    """One tick per match call; a split's upper half is created with a fresh, later tick.
    The policy-visible statistics are those of leaves: a leaf's tick is the last call that
    visited it and its hits count the insert calls whose path covered it (SGLang 0.5.23:
    matches count no hits). (Internal nodes
    may keep lazy lower bounds - tree.py - so they are not pinned here.)"""
    cache = _apple_tree()
    t0 = cache.tree.now
    ication, t, banana = find(cache, "application"), find(cache, "applet"), find(cache, "banana")
    t_before, banana_before = t.tick, banana.tick
    assert (ication.hits, t.hits, banana.hits) == (1, 1, 1)  # each leaf's own insert

    cache.match(TokenSeq(toks("application")))
    t1 = t0 + 1
    assert cache.tree.now == t1
    assert ication.tick == t1 and cache.tree.root.tick == t1
    assert (t.tick, banana.tick) == (t_before, banana_before)
    assert (ication.hits, t.hits, banana.hits) == (1, 1, 1)  # a match counts no hit

    cache.match(TokenSeq(toks("band")))  # tick t1 + 1; the split creates the upper at t1 + 2
    assert cache.tree.now == t1 + 2
    ban = find(cache, "ban")
    assert find(cache, "banana") is banana  # the lower half keeps the node identity
    assert edge(banana) == "ana" and banana.parent is ban and ban.parent is cache.tree.root
    assert banana.tick == t1 + 1 and cache.tree.root.tick == t1 + 1
    assert ban.created == t1 + 2 and ban.tick == t1 + 2
    assert banana.created == t0 and banana.hits == 1  # "banana" was the last node created

    cache.match(TokenSeq(toks("cherry")))  # a miss: one tick, the root only
    assert cache.tree.now == t1 + 3 and cache.tree.root.tick == t1 + 3
    assert (banana.tick, ication.tick) == (t1 + 1, t1)

    cache.match(TokenSeq(toks("applet")))
    cache.match(TokenSeq(toks("applet")))
    assert (t.hits, t.tick) == (1, t1 + 5)

    # an insert takes one tick too and counts one hit on its path; its new leaf is fresh
    seq = TokenSeq(toks("applesauce"))
    cache.insert(seq, 10, cache.alloc(10), 0)
    assert cache.tree.now == t1 + 7
    sauce = find(cache, "applesauce")
    assert edge(sauce) == "sauce" and sauce.tick == sauce.created == t1 + 7
    assert shape(cache)["appl"]["e"] == {"t": {}, "sauce": {}}
    assert (t.hits, t.tick, sauce.hits) == (1, t1 + 5, 1)
    invariants.check(cache)


def test_apple_lock_protects_exactly_the_matched_path():
    cache = _apple_tree()
    m = cache.match(TokenSeq(toks("application")))
    cache.lock(m)
    locks = {edge(n): n.lock_ref for n in cache.tree.iter_nodes() if n is not cache.tree.root}
    assert locks == {"appl": 1, "e": 0, "t": 0, "ication": 1, "banana": 0}
    assert cache.full.protected_tokens == len("application") == 11
    assert cache.full.evictable_tokens == len("e" + "t" + "banana") == 8

    m2 = cache.match(TokenSeq(toks("apple")))  # ends at internal node "e"
    cache.lock(m2)
    locks = {edge(n): n.lock_ref for n in cache.tree.iter_nodes() if n is not cache.tree.root}
    assert locks == {"appl": 2, "e": 1, "t": 0, "ication": 1, "banana": 0}
    assert (cache.full.protected_tokens, cache.full.evictable_tokens) == (12, 7)

    # evict everything evictable: "t" and "banana" go; "e" is locked; nothing else
    assert cache.evict(10**6) == len("t" + "banana") == 7
    assert shape(cache) == {"appl": {"e": {}, "ication": {}}}
    assert (cache.full.protected_tokens, cache.full.evictable_tokens) == (12, 0)

    cache.unlock(m)
    cache.unlock(m2)
    assert (cache.full.protected_tokens, cache.full.evictable_tokens) == (0, 12)
    assert cache.tree.root.lock_ref == 1
    invariants.check(cache)
    assert cache.evict(10**6) == 12
    assert shape(cache) == {} and cache.num_nodes == 1
    invariants.check(cache)


def test_unlock_without_lock_raises():
    cache = _apple_tree()
    m = cache.match(TokenSeq(toks("apple")))
    with pytest.raises(RuntimeError):
        cache.unlock(m)


def test_invariants_check_accepts_a_held_lock():
    cache = _apple_tree()
    m = cache.match(TokenSeq(toks("application")))
    cache.lock(m)
    assert cache.tree.root.lock_ref == 1  # the root keeps its single permanent reference
    invariants.check(cache)


# ---------------------------------------------------------------------------------------
# 2. seed 004: the nine-step RadixAttention walk-through (SGLang paper, Figure 3)
# ---------------------------------------------------------------------------------------
# Interpretation (the seed only describes the figure in words):
# * one character = one token, page size 1, LRU, requests run one at a time through
#   `ReplayStepper` (match cut to len-1, lock, evict-if-needed, insert, unlock).
# * each request's `prompt` is the whole conversation so far INCLUDING the assistant's
#   reply of that turn, and no separate output is given: the figure stores "system prompt +
#   user message + LLM reply" as one edge. (With output=..., replay also inserts the
#   prompt alone and splits the node at the prompt/output boundary - pinned separately in
#   test_replay_splits_at_prompt_boundary_when_output_given.)
# * turns carry role tags ("User: ", "Q: "), so two branches diverge only AFTER their
#   common role tag: node b of step 4 is "<system prompt>User: " and the few-shot node e of
#   step 7 ends with "Q: ". The figure draws the cut at the end of the system prompt; the
#   topology (which node has which children, what gets evicted) is the same.
# * R3's few-shot prompt shares no first token with the chat system prompt, so step 6 opens
#   a new branch at the root ("the system prompt cannot be shared either").
# * step 7 = two more few-shot questions (Q2, Q3) next to step 6's Q1: three branches at e.
# * step 8: R1's new turn. R1's turn 2 (node c) was evicted at step 5, so only
#   system + turn 1 is reused and the new node i holds turn 2 (recomputed) + turn 3.
#   Memory forces out R2's two nodes (g = R2 turn 1, h = R2 turn 2), h first, then g
#   once it has become a leaf.
# * step 9: "sample more answers" for Q1 (self-consistency, the paper's wording; the
#   Chinese seed says "multi-round QA"): two sampled answers to the same question. Q1's
#   node j splits after "3+4? A: " into three answer leaves. The first sample evicts the
#   other question branches k, l (oldest first); the second evicts R1's node i. R1's
#   "Hello" turn stays (the seed only names i).
# * capacity: any C in [297, 327] tokens gives exactly this per-step eviction pattern, and
#   C in [308, 319] also splits step 9's evictions between its two samples as listed; the
#   walk-through runs the two ends and the middle of the narrower window.
SYS = "You are a helpful assistant. "
R1 = [
    "User: Hello! Assistant: Hi! ",
    "User: Solve this problem: a train leaves at 3 pm at 60 km/h; when has it covered 150 km? "
    "Assistant: Sure! At 5:30 pm. ",
    "User: Thanks! Assistant: You're welcome! ",
]
R2 = [
    "User: What can you do? Assistant: I can help. ",
    "User: Write a story. Assistant: Once upon a time, a small robot found a seed, planted it, "
    "and waited for spring. ",
]
FS = "Answer briefly. Q: 1+1? A: 2. Q: 2+3? A: 5. "
Q = ["Q: 3+4? A: 7. ", "Q: 6-2? A: 4. ", "Q: 5*5? A: 25. "]
SAMPLES = ["Q: 3+4? A: Let me count: 3, then 4, 5, 6, 7. ",
           "Q: 3+4? A: Since 4+3 is 7, the answer is 7. "]

B = SYS + "User: "  # node b after step 4
A_ = R1[0][len("User: "):]  # R1 turn 1 below b
C_ = R1[1]  # node c
D_ = R2[0][len("User: "):]  # node d (R2 turn 1), "g" in step 8's labels
H_ = R2[1]  # R2 turn 2, "h"
E_ = FS + "Q: "  # node e after the split of step 7
J_ = Q[0][len("Q: "):]  # Q1 branch "j"
K_ = Q[1][len("Q: "):]  # Q2 branch "k"
L_ = Q[2][len("Q: "):]  # Q3 branch "l"
I_ = R1[1] + R1[2]  # node i of step 8
Q1 = "3+4? A: "  # j's question part after the step-9 split
S1 = SAMPLES[0][len("Q: " + Q1):]
S2 = SAMPLES[1][len("Q: " + Q1):]

# (step, [(prompt, cached_tokens, evicted_tokens)], tree after, evicted edges in order)
WALK = [
    (2, [(SYS + R1[0], 0, 0)],
     {SYS + R1[0]: {}}, []),
    (3, [(SYS + R1[0] + R1[1], len(SYS + R1[0]), 0)],
     {SYS + R1[0]: {C_: {}}}, []),
    (4, [(SYS + R2[0], len(B), 0)],
     {B: {A_: {C_: {}}, D_: {}}}, []),
    (5, [(SYS + R2[0] + R2[1], len(SYS + R2[0]), len(C_))],
     {B: {A_: {}, D_: {H_: {}}}}, [C_]),
    (6, [(FS + Q[0], 0, 0)],
     {B: {A_: {}, D_: {H_: {}}}, FS + Q[0]: {}}, []),
    (7, [(FS + Q[1], len(E_), 0), (FS + Q[2], len(E_), 0)],
     {B: {A_: {}, D_: {H_: {}}}, E_: {J_: {}, K_: {}, L_: {}}}, []),
    (8, [(SYS + R1[0] + R1[1] + R1[2], len(SYS + R1[0]), len(H_) + len(D_))],
     {B: {A_: {I_: {}}}, E_: {J_: {}, K_: {}, L_: {}}}, [H_, D_]),
    (9, [(FS + SAMPLES[0], len(E_ + Q1), len(K_) + len(L_)),
         (FS + SAMPLES[1], len(E_ + Q1), len(I_))],
     {B: {A_: {}}, E_: {Q1: {"7. ": {}, S1: {}, S2: {}}}}, [K_, L_, I_]),
]


def _recording(cache):
    """Log the edge of every node the tree removes, in order (via the FULL on_remove hook)."""
    log = []
    orig = cache.full.on_remove

    def on_remove(node):
        log.append(edge(node))
        orig(node)

    cache.full.on_remove = on_remove
    return log


def test_walkthrough_texts_are_what_the_interpretation_says():
    # sanity of the scenario itself, so that the walk-through below tests the cache
    assert not SYS.startswith(FS[0]) and SYS[0] != FS[0]
    assert R1[0].startswith("User: ") and R2[0].startswith("User: ") and R1[0][6] != R2[0][6]
    assert len({q[3] for q in Q}) == 3
    assert len({"7. "[0], S1[0], S2[0]}) == 3
    lens = (len(SYS), *map(len, R1), *map(len, R2), len(FS), *map(len, Q), *map(len, SAMPLES))
    assert lens == (29, 28, 118, 41, 46, 113, 44, 14, 14, 15, 45, 44)


@pytest.mark.parametrize("capacity", [308, 312, 319])
def test_seed004_nine_steps(capacity):
    cache = RadixCache(CacheConfig(page_size=1, capacity_tokens=capacity, policy="lru"))
    stepper = ReplayStepper(cache)
    removed = _recording(cache)

    # step 1: the empty tree
    assert shape(cache) == {}
    assert cache.free_tokens == capacity
    invariants.check(cache)

    for step, requests, want_tree, want_evicted in WALK:
        start = len(removed)
        before = [(n, edge(n)) for n in cache.tree.iter_nodes()]  # a removed node keeps no key
        for prompt, want_cached, want_evicted_tokens in requests:
            r = stepper.step(toks(prompt))
            assert (r.prompt_tokens, r.output_tokens, r.cached_tokens, r.evicted_tokens, r.rejected) == (
                len(prompt), 0, want_cached, want_evicted_tokens, False), f"step {step}"
            invariants.check(cache)
        assert shape(cache) == want_tree, f"step {step}"
        assert removed[start:] == want_evicted, f"step {step}"
        # the removed nodes are exactly the ones that died during this step
        dead = sorted(e for n, e in before if not n.alive)
        assert dead == sorted(want_evicted), f"step {step}"
        # memory accounting: tree tokens + free = capacity; nothing is locked after a step
        used = tree_tokens(want_tree)
        assert cache.cached_tokens_total == used
        assert cache.free_tokens == capacity - used, f"step {step}"
        assert cache.full.protected_tokens == 0
        assert cache.full.evicted_tokens == sum(len(e) for e in removed)

    # evictions happened at steps 5, 8 and 9 only (asserted per step above) and totalled:
    assert removed == [C_, H_, D_, K_, L_, I_]
    assert cache.full.evicted_nodes == 6
    assert cache.full.evicted_tokens == 118 + 113 + 40 + 11 + 12 + 159


def _evictions(capacity):
    """Edges removed by each request of the walk-through, grouped by step."""
    cache = RadixCache(CacheConfig(page_size=1, capacity_tokens=capacity))
    stepper = ReplayStepper(cache)
    removed = _recording(cache)
    per_step = []
    for _, requests, _, _ in WALK:
        per_request = []
        for prompt, _, _ in requests:
            start = len(removed)
            stepper.step(toks(prompt))
            per_request.append(removed[start:])
        per_step.append(per_request)
    return per_step


def test_seed004_capacity_window_is_tight():
    """The chosen capacities sit inside exact windows: one token outside them changes which
    nodes are evicted, or when."""
    flat = lambda per_step: [sum(reqs, []) for reqs in per_step]  # noqa: E731
    want = [w for _, _, _, w in WALK]
    for c in (297, 307, 320, 327):
        assert flat(_evictions(c)) == want, c
    # 296: step 8 must also drop Q1's branch j (the next least recently used leaf)
    low = flat(_evictions(296))
    assert low[:6] == want[:6] and low[6] == [H_, D_, J_] and low[7] == [K_, L_, I_]
    # 328: step 5 fits without evicting; c goes at step 6 instead
    high = flat(_evictions(328))
    assert high[3] == [] and high[4] == [C_] and high[5:] == want[5:]
    # inside the step window, the split of step 9's evictions between its samples moves
    assert _evictions(307)[7] == [[K_, L_, I_], []]
    assert _evictions(308)[7] == [[K_, L_], [I_]]
    assert _evictions(319)[7] == [[K_, L_], [I_]]
    assert _evictions(320)[7] == [[K_], [L_, I_]]


def test_replay_splits_at_prompt_boundary_when_output_given():
    """ReplayStepper rule (d): with an output, S = prompt + output[:-1] is inserted and the
    prompt is inserted again, splitting at the prompt boundary; a repeat of the same prompt
    matches len(prompt) - 1 tokens (one token is always computed), splitting one token
    before the boundary."""
    cache = RadixCache(CacheConfig(page_size=1, capacity_tokens=100))
    stepper = ReplayStepper(cache)
    prompt = SYS + "User: Hello! Assistant:"
    r = stepper.step(toks(prompt), toks("Hi!") + [0])  # 0 = end-of-sequence token
    assert (r.prompt_tokens, r.output_tokens, r.cached_tokens, r.evicted_tokens) == (len(prompt), 4, 0, 0)
    assert shape(cache) == {prompt: {"Hi!": {}}}
    assert cache.free_tokens == 100 - len(prompt) - 3
    invariants.check(cache)

    r = stepper.step(toks(prompt), toks("Yo!") + [0])
    assert r.cached_tokens == len(prompt) - 1
    assert shape(cache) == {prompt[:-1]: {":": {"Hi!": {}, "Yo!": {}}}}
    # the second request recomputes the last prompt token (a duplicate page, freed) and
    # adds "Yo!": 3 new tokens in the tree
    assert cache.free_tokens == 100 - len(prompt) - 6
    invariants.check(cache)

    # a one-token output adds nothing beyond the prompt
    r = stepper.step(toks(SYS + "X"), [0])
    assert r.cached_tokens == len(SYS)  # limit len-1 = len(SYS): the whole shared part
    assert shape(cache) == {SYS: {"User: Hello! Assistant": {":": {"Hi!": {}, "Yo!": {}}}, "X": {}}}
    invariants.check(cache)
