"""Long random sequences of request lifecycles against a naive reference.

A `World` plays the scheduler: it matches, locks, allocates the request's own KV and state
slots (evicting when short), inserts at a chunk boundary and at the end, frees what the cache
hands back, and unlocks. The reference is a dict {token prefix: KV slot of its last token}
plus {token prefix: snapshot slot}; a position's key is the prefix up to the end of its page,
since pages match whole or not at all. Two worlds run in lockstep, one with the `lru` heap policy
and one with the `lru_scan` full walk, and must agree on every result. `check_integrity()` runs
after every step, with the exact number of slots the live requests hold.
"""

import random
from dataclasses import dataclass, field

import pytest
import torch

from engine.cache import make_prefix_cache
from engine.memory.allocator import SlotAllocator


@dataclass
class Req:
    seq: tuple[int, ...]
    slots: torch.Tensor  # KV slot per position (whole pages, may run past len(seq))
    owned_from: int  # positions below are the cache's
    lock_node: object
    lock_len: int
    state_slot: int | None


@dataclass
class World:
    cache_type: str
    page_size: int
    policy: str
    kv_slots: int = 48
    state_slots: int = 6
    running: list = field(default_factory=list)
    pending: list = field(default_factory=list)  # locks taken by a request not yet running

    def __post_init__(self):
        self.kv = SlotAllocator(self.kv_slots, self.page_size)
        self.state = SlotAllocator(self.state_slots, 1, name="state")
        self.cache = make_prefix_cache(self.cache_type, self.kv, self.state, self.policy)
        self.hybrid = self.cache_type == "hybrid_radix"
        self.ref_kv: dict[tuple, int] = {}  # (prefix to the end of position i's page, i) -> slot
        self.ref_snap: dict[tuple, int] = {}

    # --- reference ---------------------------------------------------------------------------

    def aligned(self, n):
        return n - n % self.page_size

    def pos(self, q, i):
        return q[: (i // self.page_size + 1) * self.page_size], i

    def ref_match(self, q):
        n = 0
        for i in range(self.page_size, self.aligned(len(q)) + 1, self.page_size):
            if self.pos(q, i - 1) not in self.ref_kv:
                break
            n = i
        if self.hybrid:
            n = max([i for i in range(self.page_size, n + 1, self.page_size) if q[:i] in self.ref_snap], default=0)
        return n, [self.ref_kv[self.pos(q, i)] for i in range(n)], self.ref_snap.get(q[:n]) if n else None

    def locks(self):
        return [(r.seq, r.lock_len) for r in self.running] + self.pending

    def locked_prefixes(self):
        return {self.pos(seq, i) for seq, n in self.locks() for i in range(n)}

    def pinned(self):
        return {seq[:n] for seq, n in self.locks() if n and seq[:n] in self.ref_snap}

    def tree_contents(self):
        kv, snap, stack = {}, {}, [(self.cache.root, ())] if hasattr(self.cache, "root") else []
        while stack:
            node, prefix = stack.pop()
            for child in node.children.values():
                p = prefix + tuple(child.key.tolist())
                for j, slot in enumerate(child.value.tolist()):
                    kv[self.pos(p, len(prefix) + j)] = slot
                if child.snapshot is not None:
                    snap[p] = child.snapshot
                stack.append((child, p))
        return kv, snap

    def check(self):
        kv_in_use = sum(len(r.slots) - r.owned_from for r in self.running)
        state_in_use = sum(r.state_slot is not None for r in self.running)
        self.kv.check_integrity()
        self.state.check_integrity()
        if self.cache_type == "none":
            assert self.kv.num_free + kv_in_use == self.kv.num_slots
            return
        self.cache.check_integrity(kv_in_use, state_in_use)
        assert self.tree_contents() == (self.ref_kv, self.ref_snap)
        rep = self.cache.cache_report()
        locked = self.locked_prefixes()
        assert (rep.cached_tokens, rep.locked_tokens, rep.num_snapshots) == (
            len(self.ref_kv),
            len(locked),
            len(self.ref_snap),
        )
        assert self.cache.mamba_stats().num_pinned == len(self.pinned())
        assert rep.max_depth == self.depth(self.cache.root)

    def depth(self, node):
        return max((1 + self.depth(c) for c in node.children.values()), default=0)

    # --- operations, each returning what a caller would see ----------------------------------

    def match(self, q):
        m = self.cache.match_prefix(q)
        if self.cache_type != "none":
            n, slots, snap = self.ref_match(q)
            assert (m.cached_len, m.kv_slot_ids.tolist(), m.state_slot) == (n, slots, snap)
        else:
            assert m.cached_len == 0
        return m.cached_len, m.kv_slot_ids.tolist(), m.state_slot

    def start(self, q):
        m = self.cache.match_prefix(q)
        self.cache.inc_lock(m.node)
        self.pending = [(q, m.cached_len)]
        try:
            return self._start(q, m)
        finally:
            self.pending = []

    def _start(self, q, m):
        state_slot = None
        if self.hybrid:
            state_slot = self.alloc_state()
            if state_slot is None:
                self.cache.dec_lock(m.node)
                return ("no state slot",)
        own = self.alloc_kv(len(q) - m.cached_len)
        if own is None:
            self.cache.dec_lock(m.node)
            if state_slot is not None:
                self.state.free([state_slot])
            return ("no kv",)
        self.running.append(Req(q, torch.cat([m.kv_slot_ids, own]), m.cached_len, m.node, m.cached_len, state_slot))
        return ("started", m.cached_len, own.tolist())

    def checkpoint(self, i, k):
        r = self.running[i]
        k = self.aligned(k)
        if k <= r.owned_from or self.cache_type == "none":
            return ("skip",)
        res = self.insert(r, r.seq[:k], with_snapshot=True)
        self.cache.inc_lock(res.node)
        self.cache.dec_lock(r.lock_node)
        r.lock_node, r.lock_len = res.node, res.cached_len
        r.slots = torch.cat([self.cache.path_kv_slot_ids(res.node), r.slots[res.cached_len :]])
        r.owned_from = res.cached_len
        return ("checkpoint", res.prefix_len, res.cached_len)

    def finish(self, i, with_snapshot):
        r = self.running.pop(i)
        self.pending = [(r.seq, r.lock_len)]  # its lock holds until dec_lock below
        res = self.insert(r, r.seq, with_snapshot)
        self.pending = []
        self.kv.free(r.slots[max(res.cached_len, r.owned_from) :])
        self.cache.dec_lock(r.lock_node)
        if r.state_slot is not None:
            self.state.free([r.state_slot])
        return ("finished", res.prefix_len, res.cached_len)

    def insert(self, r, q, with_snapshot):
        snap = self.alloc_state() if self.hybrid and with_snapshot else None
        # reference expectations, computed before the insert
        n_key = self.aligned(len(q)) if self.cache_type != "none" else 0
        prefix = 0
        while prefix < n_key and self.pos(q, prefix) in self.ref_kv:
            prefix += 1
        dups = [
            int(r.slots[i])
            for i in range(n_key)
            if self.pos(q, i) in self.ref_kv and self.ref_kv[self.pos(q, i)] != int(r.slots[i])
        ]
        adopt = snap is not None and n_key > 0 and n_key == len(q) and q not in self.ref_snap
        res = self.cache.insert(q, r.slots, snap)
        assert (res.prefix_len, res.cached_len, res.dup_kv_slot_ids.tolist()) == (prefix, n_key, dups)
        assert res.unused_snapshot_slot == (None if adopt else snap)
        for i in range(n_key):
            self.ref_kv.setdefault(self.pos(q, i), int(r.slots[i]))
        if adopt:
            self.ref_snap[q] = snap
        self.kv.free(res.dup_kv_slot_ids)
        if res.unused_snapshot_slot is not None:
            self.state.free([res.unused_snapshot_slot])
        return res

    def alloc_kv(self, n):
        if not self.kv.can_alloc(n):
            self.evict(self.kv.pages_for(n) * self.page_size - self.kv.num_free)
        return self.kv.alloc(n)

    def alloc_state(self):
        if not self.state.can_alloc(1):
            self.evict_snapshots(1)
        s = self.state.alloc(1)
        return None if s is None else int(s[0])

    def evict(self, n):
        evictable = len(self.ref_kv) - len(self.locked_prefixes())
        assert self.cache.evictable_tokens == (evictable if self.cache_type != "none" else 0)
        locked, pinned = self.locked_prefixes(), self.pinned()
        freed = self.cache.evict(n)
        if self.cache_type == "none":
            return ("evicted", freed)
        assert freed >= min(n, evictable)
        kv, snap = self.tree_contents()
        gone = set(self.ref_kv) - set(kv)
        assert len(gone) == freed and not gone & locked and set(kv) <= set(self.ref_kv)
        snaps_gone = set(self.ref_snap) - set(snap)
        assert {self.pos(p, len(p) - 1) for p in snaps_gone} <= gone and not snaps_gone & pinned
        self.ref_kv, self.ref_snap = kv, snap
        return ("evicted", freed)

    def evict_snapshots(self, k):
        pinned = self.pinned()
        n = self.cache.evict_snapshots(k)
        if self.cache_type == "none":
            return ("snap-evicted", n)
        assert n == min(k, len(self.ref_snap) - len(pinned))
        _, snap = self.tree_contents()
        gone = set(self.ref_snap) - set(snap)
        assert len(gone) == n and not gone & pinned
        self.ref_snap = snap
        return ("snap-evicted", n)


def drive(worlds, seed, steps, alphabet=3, max_len=20):
    rng = random.Random(seed)
    history: list[tuple[int, ...]] = [()]
    a = worlds[0]
    for _ in range(steps):
        op = rng.random()
        base = rng.choice(history)
        q = base[: rng.randint(0, len(base))] + tuple(rng.randrange(alphabet) for _ in range(rng.randint(1, 8)))
        q = q[:max_len]
        if op < 0.2:
            outs = [w.match(q) for w in worlds]
        elif op < 0.45 and len(a.running) < 4:
            history.append(q)
            outs = [w.start(q) for w in worlds]
        elif op < 0.55 and a.running:
            i, k = rng.randrange(len(a.running)), rng.randint(1, len(a.running[0].seq))
            i_k = (i, min(k, len(a.running[i].seq)))
            outs = [w.checkpoint(*i_k) for w in worlds]
        elif op < 0.87 and a.running:
            i, snap = rng.randrange(len(a.running)), rng.random() < 0.7
            outs = [w.finish(i, snap) for w in worlds]
        elif op < 0.94:
            n = rng.randint(1, 12)
            outs = [w.evict(n) for w in worlds]
        else:
            n = rng.randint(1, 3)
            outs = [w.evict_snapshots(n) for w in worlds]
        assert all(o == outs[0] for o in outs), outs
        for w in worlds:
            w.check()


@pytest.mark.parametrize(
    "cache_type, page_size",
    [("radix", 1), ("radix", 2), ("hybrid_radix", 1), ("hybrid_radix", 3), ("none", 1), ("none", 2)],
)
def test_random_operations_match_the_reference(cache_type, page_size):
    worlds = [
        World(cache_type, page_size, policy, kv_slots=80 * page_size, state_slots=10) for policy in ("lru", "lru_scan")
    ]
    drive(worlds, seed=page_size * 7 + len(cache_type), steps=3000)
    # the run exercised what it is meant to
    w = worlds[0]
    if cache_type != "none":
        rep = w.cache.cache_report()
        assert rep.evicted_tokens > 0 and rep.matched_tokens > 0
    if cache_type == "hybrid_radix":
        st = w.cache.mamba_stats()
        assert st.num_anchored > 0 and st.num_evicted > 0 and st.num_unused > 0


@pytest.mark.parametrize("cache_type", ["radix", "hybrid_radix"])
def test_tiny_pool_many_seeds(cache_type):
    for seed in range(6):
        worlds = [
            World(cache_type, 1 + seed % 2, policy, kv_slots=8 * (1 + seed % 2), state_slots=3)
            for policy in ("lru", "lru_scan")
        ]
        drive(worlds, seed=100 + seed, steps=300, alphabet=2, max_len=10)
