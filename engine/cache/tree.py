"""TreeNode: one edge of the radix tree, holding a run of whole pages of tokens and their KV slots."""

from __future__ import annotations

import itertools

import numpy as np
import torch

from engine.memory.allocator import IntegrityError

_ids = itertools.count()


class TreeNode:
    """The tokens on the edge into this node, their KV slots, and the node's bookkeeping.

    `lock_ref` counts the locks on this node and on its descendants (a lock holds the whole
    path); `direct_locks` counts the locks whose end is this node, which also pin `snapshot`.
    """

    __slots__ = (
        "id",
        "key",
        "value",
        "parent",
        "children",
        "lock_ref",
        "direct_locks",
        "last_access",
        "snapshot",
        "alive",
    )

    def __init__(self, key: np.ndarray, value: torch.Tensor, parent: TreeNode | None, last_access: int = 0) -> None:
        self.id = next(_ids)  # tie-break for equal access times, so eviction order is deterministic
        self.key = key  # int64 [n], n a multiple of page_size (empty at the root)
        self.value = value  # int64 [n], KV slot of each token
        self.parent = parent
        self.children: dict[bytes, TreeNode] = {}  # first page of the child's key -> child
        self.lock_ref = 0
        self.direct_locks = 0
        self.last_access = last_access  # operation counter, not wall time
        self.snapshot: int | None = None  # state slot holding the state after this node's end
        self.alive = True

    @property
    def is_leaf(self) -> bool:
        return not self.children

    @property
    def up(self) -> TreeNode:
        """The parent of a node below the root; the root has none (an IntegrityError)."""
        if self.parent is None:
            raise IntegrityError(f"{self} is a root: it has no parent")
        return self.parent

    def __repr__(self) -> str:
        return (
            f"TreeNode(id={self.id}, len={len(self.key)}, lock_ref={self.lock_ref}, "
            f"snapshot={self.snapshot}, children={len(self.children)})"
        )
