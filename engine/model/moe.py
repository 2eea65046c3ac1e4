"""Sparse MoE feed-forward: softmax router, top-k, routed experts, gated shared expert.

Expert weights are not parameters of this module: each forward asks the layer's
`ExpertProvider` for the experts the router picked, and only for those, so an expert
cache can sit behind the provider.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.model.experts import ExpertProvider
from engine.model.mlp import MLP


class Router(nn.Module):
    def __init__(self, hidden_size: int, num_experts: int, top_k: int, norm_topk_prob: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(num_experts, hidden_size))  # [E, H]
        self.top_k = top_k
        self.norm_topk_prob = norm_topk_prob

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Routing weights [T, k] (in x's dtype) and expert ids [T, k]."""
        logits = F.linear(x, self.weight)  # [T, E]
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)  # [T, E]
        top_w, top_ids = torch.topk(probs, self.top_k, dim=-1)  # [T, k], [T, k]
        if self.norm_topk_prob:
            top_w = top_w / top_w.sum(dim=-1, keepdim=True)  # [T, k]
        return top_w.to(logits.dtype), top_ids


class SparseMoE(nn.Module):
    def __init__(
        self,
        layer: int,
        hidden_size: int,
        num_experts: int,
        top_k: int,
        norm_topk_prob: bool,
        shared_intermediate_size: int,
        experts: ExpertProvider,
    ) -> None:
        super().__init__()
        self.layer = layer
        self.gate = Router(hidden_size, num_experts, top_k, norm_topk_prob)
        self.has_shared = shared_intermediate_size > 0
        if self.has_shared:
            self.shared_expert = MLP(hidden_size, shared_intermediate_size)
            self.shared_expert_gate = nn.Linear(hidden_size, 1, bias=False)
        self.experts = experts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        top_w, top_ids = self.gate(x)  # [T, k], [T, k]
        out = self._one_token(x, top_w, top_ids) if x.shape[0] == 1 else self._many_tokens(x, top_w, top_ids)
        if self.has_shared:
            shared = self.shared_expert(x)  # [T, H]
            out = out + torch.sigmoid(self.shared_expert_gate(x)) * shared  # [T, H]
        return out

    def _expert(self, expert: int, x: torch.Tensor) -> torch.Tensor:
        w = self.experts.get(self.layer, expert)
        gate, up = F.linear(x, w.gate_up).chunk(2, dim=-1)  # [n, I], [n, I]
        return F.linear(F.silu(gate) * up, w.down)  # [n, H]

    def _one_token(self, x: torch.Tensor, top_w: torch.Tensor, top_ids: torch.Tensor) -> torch.Tensor:
        """Decode at batch 1: no index bookkeeping, experts added in ascending id like the general path."""
        picks = sorted(zip(top_ids[0].tolist(), range(top_ids.shape[1])))
        out = torch.zeros_like(x)  # [1, H]
        for expert, k in picks:
            out = out + self._expert(expert, x) * top_w[:, k : k + 1]  # [1, H]
        return out

    def _many_tokens(self, x: torch.Tensor, top_w: torch.Tensor, top_ids: torch.Tensor) -> torch.Tensor:
        order, token_idx, groups = group_by_expert(top_ids)
        xs = x[token_idx]  # [T*k, H]
        h = torch.empty_like(xs)  # [T*k, H]: each expert's rows written in place, not concatenated
        for expert, start, end in groups:
            h[start:end] = self._expert(expert, xs[start:end])  # [n, H]
        h.mul_(top_w.reshape(-1)[order, None])  # [T*k, H]
        out = torch.zeros_like(x)  # [T, H]
        out.index_add_(0, token_idx, h)
        return out


def group_by_expert(top_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[tuple[int, int, int]]]:
    """The (token, pick) pairs of top_ids [T, k] grouped by expert with one stable sort, instead of a
    torch.where per expert: each expert gets the same rows in the same (token) order as a per-expert
    search would, and one index_add_ of the results adds them expert by expert in ascending id, as
    the reference does.
      pairs      (t0,e5) (t0,e2) (t1,e2) (t1,e7)      flat_ids [T*k] = top_ids row by row
      sorted     (t0,e2) (t1,e2) (t0,e5) (t1,e7)      token_idx = order // k
    Returns order [T*k] (pair index of each sorted position), token_idx [T*k] and
    (expert, start, end) of each expert's run in the sorted order.
    """
    num_picks = top_ids.shape[1]
    flat_ids = top_ids.reshape(-1)  # [T*k]
    order = torch.argsort(flat_ids, stable=True)  # [T*k]
    experts, counts = torch.unique_consecutive(flat_ids[order], return_counts=True)  # [E'], [E']
    groups, start = [], 0
    for expert, n in zip(experts.tolist(), counts.tolist()):
        groups.append((expert, start, start + n))
        start += n
    return order, order // num_picks, groups
