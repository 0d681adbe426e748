"""Suffix decoding (Oliaro et al., 2024): propose the most frequent continuation of the recent tokens,
read from suffix trees over the prompt and over the run's earlier outputs.

The rule is the one vLLM runs (``method: suffix``, through the arctic-inference package); this is
our own implementation of it, an uncompressed depth-limited suffix trie in which each node counts
the occurrences of its string:

* Each row has a *local* tree over its prompt and its output so far; one *global* tree holds the
  outputs of this drafter's requests (the live ones included, as they grow), at most
  ``max_cached_requests`` of them (oldest evicted first; 0: no global tree). A tree holds every
  substring up to ``max_tree_depth`` tokens.
* Each step, after adding the row's new tokens, the pattern is the row's last ``max_tree_depth``
  tokens. For every match length m = 1 .. len(pattern) - 1 whose last-m-token string is in the tree
  (the first absent one ends the search), a path is drafted: from that node, repeatedly step to
  the child with the highest count, the path's probability multiplied by child count / node count,
  while the path is shorter than min(D, floor(m * max_spec_factor)) and its probability stays at
  least ``min_token_prob``. A path scores the sum of its tokens' probabilities; the best score
  wins (a later, longer match wins ties), and the local tree's best wins a tie with the global's.
* Children with equal counts keep arctic-inference's order (a node that reaches a count goes after
  the nodes already there, except one that was first among its old count, which goes first), so
  equal-count continuations are drafted as vLLM drafts them. Probabilities are float32, as there.

Proposals are deterministic (p one-hot); a row with no match proposes nothing (not counted as a
draft, as in vLLM).
"""
from __future__ import annotations

from collections import deque

import numpy as np
import torch

from ..engine.drafting import Drafter
from ..engine.speculative import Proposal


class _Node:
    __slots__ = ("count", "token", "children", "order", "parent")

    def __init__(self, token: int = -1, parent: "_Node | None" = None) -> None:
        self.count = 0
        self.token = token
        self.children: dict[int, _Node] = {}
        self.order: list[_Node] = []  # children by decreasing count (ties: see the module docstring)
        self.parent = parent


def _increment(node: _Node) -> None:
    siblings = node.parent.order
    at = siblings.index(node)
    c = node.count
    if at == 0 or siblings[at - 1].count > c + 1:
        node.count += 1
        return
    above = siblings[at - 1].count  # c (same group) or c + 1 (the group above)
    head = next(i for i, s in enumerate(siblings) if s.count == above)
    del siblings[at]
    node.count += 1
    siblings.insert(head, node)


def _decrement(node: _Node) -> None:
    parent = node.parent
    siblings = parent.order
    at = siblings.index(node)
    c = node.count
    node.count -= 1
    if node.count == 0:
        del siblings[at]
        del parent.children[node.token]
    elif at + 1 < len(siblings) and siblings[at + 1].count == c:  # goes after the others of its old count
        del siblings[at]
        below = next((i for i, s in enumerate(siblings) if s.count < c), len(siblings))
        siblings.insert(below, node)


class SuffixTrie:
    """Every substring (up to ``max_depth`` tokens) of the sequences added, with its occurrence count."""

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.root = _Node()
        self._seqs: dict[int, list[int]] = {}
        self._active: dict[int, deque] = {}  # per sequence: the nodes its last max_depth suffixes reached

    def extend(self, seq_id: int, tokens) -> None:
        seq = self._seqs.setdefault(seq_id, [])
        active = self._active.setdefault(seq_id, deque(maxlen=self.max_depth))
        for token in tokens:
            token = int(token)
            self.root.count += 1
            active.append(self.root)  # the suffix that starts at this token
            seq.append(token)
            for i, node in enumerate(active):
                child = node.children.get(token)
                if child is None:
                    child = node.children[token] = _Node(token, node)
                    child.count = 1
                    node.order.append(child)
                else:
                    _increment(child)
                active[i] = child

    def remove(self, seq_id: int) -> None:
        seq = self._seqs.pop(seq_id, [])
        self._active.pop(seq_id, None)
        for start in range(len(seq)):
            self.root.count -= 1
            node = self.root
            for token in seq[start: start + self.max_depth]:
                child = node.children[token]
                _decrement(child)
                node = child

    def _find(self, tokens) -> _Node | None:
        node = self.root
        for token in tokens:
            node = node.children.get(token)
            if node is None:
                return None
        return node

    def speculate(self, context: list[int], max_tokens: int, max_spec_factor: float,
                  min_token_prob: float) -> tuple[list[int], float]:
        """The best-scored draft for ``context`` (at most its last ``max_depth`` tokens), and its score."""
        context = context[-self.max_depth:]
        floor = np.float32(min_token_prob)
        best, best_score = [], np.float32(0.0)
        for m in range(1, len(context)):
            node = self._find(context[len(context) - m:])
            if node is None:
                break
            limit = max(0, min(max_tokens, int(m * max_spec_factor + 1e-6)))
            draft, score, prob = [], np.float32(0.0), np.float32(1.0)
            while len(draft) < limit and prob >= floor and node.order:
                child = node.order[0]
                prob = np.float32(prob * (np.float32(child.count) / np.float32(node.count)))
                if prob < floor:
                    break
                draft.append(child.token)
                score = np.float32(score + prob)
                node = child
            if score >= best_score:
                best, best_score = draft, score
        return best, float(best_score)


class SuffixDrafter(Drafter):

    def __init__(self, ctx, max_tree_depth: int = 24, max_cached_requests: int = 10000,
                 max_spec_factor: float = 1.0, min_token_prob: float = 0.1, **_options) -> None:
        if max_tree_depth < 1 or max_cached_requests < -1 or max_spec_factor < 0 or not 0 <= min_token_prob <= 1:
            raise ValueError("drafter: suffix decoding needs max_tree_depth >= 1, max_cached_requests >= -1, "
                             f"max_spec_factor >= 0 and 0 <= min_token_prob <= 1, got {max_tree_depth}, "
                             f"{max_cached_requests}, {max_spec_factor}, {min_token_prob}")
        self.depth, self.cached = max_tree_depth, max_cached_requests
        self.factor, self.min_prob = max_spec_factor, min_token_prob
        self.device = ctx.device
        # the tree of earlier outputs lives as long as the engine (vLLM keeps one per engine): warm-up,
        # every block and repeat of every cell this backend runs with these settings add to it
        key = ("suffix", max_tree_depth, max_cached_requests)
        state = ctx.engine_state if ctx.engine_state is not None else {}
        self._shared = state.setdefault(key, {"tree": SuffixTrie(max_tree_depth), "order": deque(), "next": 0})
        self.global_tree = self._shared["tree"]
        self._order: deque[int] = self._shared["order"]  # global sequence ids, oldest first

    def reset(self, history, max_len: int) -> None:
        batch = history.tokens.shape[0]
        self.local = [SuffixTrie(self.depth) for _ in range(batch)]
        self.fed = [0] * batch
        self.rows: list[int | None] = [None] * batch
        for b in range(batch):
            prompt = history.row(b).tolist()
            self.local[b].extend(0, prompt)
            self.fed[b] = len(prompt)
            if self.cached != 0:
                self.rows[b] = self._shared["next"]
                self._order.append(self._shared["next"])
                self._shared["next"] += 1
                while self.cached > 0 and len(self._order) > self.cached:
                    self.global_tree.remove(self._order.popleft())

    def propose(self, history, num_tokens, params, generator) -> Proposal:
        batch = history.tokens.shape[0]
        drafts = []
        for b in range(batch):
            row = history.row(b).tolist()
            new = row[self.fed[b]:]
            self.fed[b] = len(row)
            self.local[b].extend(0, new)
            if self.rows[b] is not None and self.rows[b] in self._order:
                self.global_tree.extend(self.rows[b], new)
            pattern = row[-self.depth:]
            draft, score = self.local[b].speculate(pattern, num_tokens, self.factor, self.min_prob)
            if self.rows[b] is not None:
                other, other_score = self.global_tree.speculate(pattern, num_tokens, self.factor, self.min_prob)
                if other_score > score:
                    draft = other
            drafts.append(draft)
        width = max((len(d) for d in drafts), default=0)
        tokens = torch.zeros(batch, width, dtype=torch.long, device=self.device)
        for b, d in enumerate(drafts):
            tokens[b, : len(d)] = torch.tensor(d, dtype=torch.long)
        counts = torch.tensor([len(d) for d in drafts], dtype=torch.long, device=self.device)
        return Proposal(tokens=tokens, n_proposed=counts)
