"""A radix tree over page-aligned token sequences, one node per page.

Each node carries the page's tokens, its chained storage hash (``get_storage_hash_str``
seeded by the tree's namespace at the root), its device indices (L1, ``value``) and host
indices (L2, ``host_value``), the host slots of TRAILING sidecar pools holding this page's
state (``side``: pool name -> slots; only on host-resident nodes), and the lock references
that pin it:
``lock_ref`` (device) and ``host_lock_ref`` (host). A node with locks is never evicted from
that tier. Trailing tokens short of a page are never inserted (nor matched).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from hicache_sdk import get_storage_hash_str

_ids = itertools.count(1)


@dataclass(eq=False)
class TreeNode:
    tokens: tuple[int, ...] = ()
    parent: TreeNode | None = None
    hash: str | None = None
    value: torch.Tensor | None = None
    host_value: torch.Tensor | None = None
    children: dict[tuple[int, ...], TreeNode] = field(default_factory=dict)
    lock_ref: int = 0
    host_lock_ref: int = 0
    hit_count: int = 0
    last_access: int = 0
    backed_up_storage: bool = False
    side: dict[str, torch.Tensor] = field(default_factory=dict)  # TRAILING sidecar host slots
    id: int = field(default_factory=lambda: next(_ids))

    @property
    def is_root(self) -> bool:
        return self.parent is None

    @property
    def on_device(self) -> bool:
        return self.value is not None

    @property
    def on_host(self) -> bool:
        return self.host_value is not None

    def path(self) -> list[TreeNode]:
        """Nodes from the root's first child down to this one (empty for the root)."""
        out: list[TreeNode] = []
        n: TreeNode | None = self
        while n is not None and n.parent is not None:
            out.append(n)
            n = n.parent
        return out[::-1]


@dataclass
class MatchResult:
    """The three-tier breakdown of a prefix match.

    ``device_len``: leading tokens resident on device; ``host_len``: the tokens after them
    resident on host only; ``last_device_node``: the deepest node of the device
    run (the root when empty); ``last_host_node``: the deepest matched node, the L3 anchor
    (storage is consulted only when it is backed up on host, or is the root);
    ``storage_span``: the page-aligned tokens after both runs, the L3 candidate."""

    device_len: int
    host_len: int
    last_device_node: TreeNode
    last_host_node: TreeNode
    storage_span: list[int]


class RadixTree:
    """Page-granular prefix tree. ``namespace`` seeds root hashes (a ``prior_hash`` for the
    first page; ``None`` means SGLang's default seed)."""

    def __init__(self, page_size: int, namespace: str | None = None) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self.page_size = page_size
        self.namespace = namespace
        self.root = TreeNode()
        self._tick = itertools.count(1)

    def pages(self, tokens: Sequence[int]) -> list[tuple[int, ...]]:
        ps = self.page_size
        return [tuple(tokens[i : i + ps]) for i in range(0, len(tokens) - len(tokens) % ps, ps)]

    def page_hash(self, page: tuple[int, ...], prior: str | None) -> str:
        h = get_storage_hash_str(list(page), prior if prior is not None else self.namespace, self.page_size)
        assert isinstance(h, list)
        return h[0]

    def hashes(self, tokens: Sequence[int], prior: str | None) -> list[str]:
        """Chained page hashes of the full pages of ``tokens`` continuing from ``prior``."""
        out: list[str] = []
        for page in self.pages(tokens):
            prior = self.page_hash(page, prior)
            out.append(prior)
        return out

    def match_prefix(self, tokens: Sequence[int]) -> MatchResult:
        """Walk the full pages of ``tokens``; touching every matched node (LRU)."""
        node = self.root
        last_dev = last_host = self.root
        dev_len = host_len = 0
        dev_run = True
        tick = next(self._tick)
        for page in self.pages(tokens):
            child = node.children.get(page)
            if child is None or not (child.on_device or child.on_host):
                break
            child.last_access = tick
            if dev_run and child.on_device:
                dev_len += self.page_size
                last_dev = child
            else:
                dev_run = False
                if not child.on_host:
                    break
                host_len += self.page_size
            node = child
        last_host = node
        end = len(tokens) - len(tokens) % self.page_size
        span = list(tokens[dev_len + host_len : end])
        return MatchResult(dev_len, host_len, last_dev, last_host, span)

    def insert(self, parent: TreeNode, tokens: Sequence[int]) -> list[TreeNode]:
        """Nodes for the full pages of ``tokens`` under ``parent`` (existing ones reused)."""
        out: list[TreeNode] = []
        tick = next(self._tick)
        for page in self.pages(tokens):
            child = parent.children.get(page)
            if child is None:
                child = TreeNode(tokens=page, parent=parent, hash=self.page_hash(page, parent.hash))
                parent.children[page] = child
            child.last_access = tick
            out.append(child)
            parent = child
        return out

    def walk(self) -> list[TreeNode]:
        """Every node but the root."""
        out: list[TreeNode] = []
        stack = list(self.root.children.values())
        while stack:
            n = stack.pop()
            out.append(n)
            stack.extend(n.children.values())
        return out

    @staticmethod
    def inc_lock_ref(node: TreeNode) -> None:
        for n in node.path():
            n.lock_ref += 1

    @staticmethod
    def dec_lock_ref(node: TreeNode) -> None:
        for n in node.path():
            if n.lock_ref <= 0:
                raise RuntimeError(f"lock_ref underflow on node {n.id}")
            n.lock_ref -= 1

    @staticmethod
    def inc_host_lock_ref(node: TreeNode) -> None:
        for n in node.path():
            n.host_lock_ref += 1

    @staticmethod
    def dec_host_lock_ref(node: TreeNode) -> None:
        for n in node.path():
            if n.host_lock_ref <= 0:
                raise RuntimeError(f"host_lock_ref underflow on node {n.id}")
            n.host_lock_ref -= 1

    def evictable_device(self) -> list[TreeNode]:
        """Device-resident leaves-of-the-device-run without locks, least recently used first
        (a node is device-evictable when no child is device-resident)."""
        c = [
            n
            for n in self.walk()
            if n.on_device and n.lock_ref == 0 and not any(ch.on_device for ch in n.children.values())
        ]
        return sorted(c, key=lambda n: n.last_access)

    def evictable_host(self) -> list[TreeNode]:
        """Host-resident nodes without host locks, not device-resident, with no host-resident
        child (host backups stay contiguous from the root), LRU first."""
        c = [
            n
            for n in self.walk()
            if n.on_host
            and n.host_lock_ref == 0
            and not n.on_device
            and not any(ch.on_host for ch in n.children.values())
        ]
        return sorted(c, key=lambda n: n.last_access)

    def prune(self, node: TreeNode) -> None:
        """Drop ``node`` from its parent when it holds nothing and has no children."""
        while (
            node.parent is not None
            and not node.children
            and not node.on_device
            and not node.on_host
            and node.lock_ref == 0
            and node.host_lock_ref == 0
        ):
            del node.parent.children[node.tokens]
            node = node.parent
