"""The gated delta rule of Gated DeltaNet, in its two forms, plus the short causal conv.

State S [Hv, Dk, Dv] per request. Per token t, with decay g_t <= 0 (log space) and
learning rate beta_t:

    S <- exp(g_t) * S
    S <- S + k_t (beta_t * (v_t - S^T k_t))^T        (the delta rule: write the correction)
    o_t = S^T q_t

`recurrent_step` runs it for one token of B requests at once (decode). `chunked` runs a
whole extend of one request in chunks of CHUNK_SIZE with the UT transform (prefill), in float32.
q and k are l2-normalised and q scaled by Dk^-0.5 here, as the reference does in-kernel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Tokens per chunk, chosen by measurement (docs/engine-model.md, "The chunked delta rule"): 32
# against 64 took 4.6 against 7.5 ms for 256 tokens of 8 value heads, 28 against 43 ms for 2,048.
CHUNK_SIZE = 32


def _l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)  # [..., D]


def _prepare(q: torch.Tensor, k: torch.Tensor, num_value_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Repeat q/k heads up to the value heads, l2-normalise in float32, scale q."""
    repeat = num_value_heads // q.shape[-2]
    if repeat > 1:
        q = q.repeat_interleave(repeat, dim=-2)  # [..., Hv, Dk]
        k = k.repeat_interleave(repeat, dim=-2)  # [..., Hv, Dk]
    q = _l2norm(q.float())  # [..., Hv, Dk]
    k = _l2norm(k.float())  # [..., Hv, Dk]
    return q * q.shape[-1] ** -0.5, k


# Decays below exp(-64) ~ 1.6e-28 are made exactly 0: they are 21 orders of magnitude below float32's
# resolution of the terms they are added to, and left alone they end in subnormal floats (below
# 1.2e-38), on which a CPU's arithmetic is ~100x slower: a 129-token extend of the default
# checkpoint took 118 ms in its linear-attention layers with them and 68 ms without.
_DECAY_FLOOR = -64.0


def decay(log_decay: torch.Tensor) -> torch.Tensor:
    """exp(log_decay), exactly 0 where log_decay < _DECAY_FLOOR (never subnormal)."""
    return log_decay.masked_fill(log_decay < _DECAY_FLOOR, float("-inf")).exp()


def recurrent_step(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, state: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per request. q, k [B, Hk, Dk]; v [B, Hv, Dv]; g, beta [B, Hv]; state [B, Hv, Dk, Dv].

    Returns o [B, Hv, Dv] (v's dtype) and the new state [B, Hv, Dk, Dv] float32.
    """
    dtype = v.dtype
    q, k = _prepare(q, k, v.shape[-2])  # [B, Hv, Dk] each
    v, g, beta = v.float(), g.float(), beta.float()
    state = state.float() * decay(g)[..., None, None]  # [B, Hv, Dk, Dv]
    kv_mem = (state * k[..., None]).sum(dim=-2)  # [B, Hv, Dv]
    delta = (v - kv_mem) * beta[..., None]  # [B, Hv, Dv]
    state = state + k[..., None] * delta[..., None, :]  # [B, Hv, Dk, Dv]
    out = (state * q[..., None]).sum(dim=-2)  # [B, Hv, Dv]
    return out.to(dtype), state


def chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor | None,
    chunk_size: int = CHUNK_SIZE,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A run of L tokens of one request. q, k [L, Hk, Dk]; v [L, Hv, Dv]; g, beta [L, Hv]; state [Hv, Dk, Dv] or None.

    Returns o [L, Hv, Dv] (v's dtype) and the final state [Hv, Dk, Dv] float32.

    The r = Hv / Hk value heads of a key head share its q and k: the products of keys with keys
    and queries with keys are taken once per key head and broadcast over its value heads (no
    repeated copies of q and k), and both right-hand sides of the UT system are written into one
    buffer rather than concatenated.
    """
    dtype = v.dtype
    length, num_heads, value_dim = v.shape
    hk, dk = q.shape[-2], q.shape[-1]
    r, c = num_heads // hk, chunk_size
    pad = (c - length % c) % c
    n = (length + pad) // c  # chunks
    q = F.pad(_l2norm(q.float()).transpose(0, 1), (0, 0, 0, pad)).view(hk, n, c, dk) * dk**-0.5  # [Hk, N, C, Dk]
    k = F.pad(_l2norm(k.float()).transpose(0, 1), (0, 0, 0, pad)).view(hk, n, c, dk)  # [Hk, N, C, Dk]
    v = F.pad(v.float().transpose(0, 1), (0, 0, 0, pad)).view(hk, r, n, c, value_dim)  # [Hk, r, N, C, Dv]
    g = F.pad(g.float().transpose(0, 1), (0, pad)).view(num_heads, n, c).cumsum(dim=-1)  # [Hv, N, C] from chunk start
    beta = F.pad(beta.float().transpose(0, 1), (0, pad)).view(hk, r, n, c, 1)  # [Hk, r, N, C, 1]
    # pair_decay[i, j] = exp(g_i - g_j) for j <= i, 0 above the diagonal (-inf added there)
    above = torch.full((c, c), float("-inf"), device=q.device).triu(1)  # [C, C]
    pair_decay = decay(g[..., :, None] - g[..., None, :] + above).view(hk, r, n, c, c)  # [Hk, r, N, C, C]
    k_t = k.transpose(-1, -2)  # [Hk, N, Dk, C]
    # the UT system's strict lower part: (beta_i k_i . k_j) exp(g_i - g_j); the queries' the same without beta
    ut = ((k @ k_t)[:, None] * pair_decay * beta).view(num_heads, n, c, c)  # [Hv, N, C, C]
    intra = ((q @ k_t)[:, None] * pair_decay).view(num_heads, n, c, c)  # [Hv, N, C, C]
    # Solve (I + strict_lower(ut)) X = RHS for both right-hand sides in one call: the values to
    # write (u) and decayed keys reading the old state (w).
    g_exp = decay(g).view(hk, r, n, c, 1)  # [Hk, r, N, C, 1]
    rhs = q.new_empty(hk, r, n, c, value_dim + dk)  # [Hk, r, N, C, Dv + Dk]
    torch.mul(v, beta, out=rhs[..., :value_dim])
    torch.mul(k[:, None], beta * g_exp, out=rhs[..., value_dim:])
    u, w = torch.linalg.solve_triangular(ut, rhs.view(num_heads, n, c, -1), upper=False, unitriangular=True).split(
        [value_dim, dk], dim=-1
    )  # [Hv, N, C, Dv], [Hv, N, C, Dk]
    wq = torch.cat((w, (q[:, None] * g_exp).view(num_heads, n, c, dk)), dim=-2)  # [Hv, N, 2C, Dk]: both read S
    end_decay = decay(g[..., -1:] - g).view(hk, r, n, c, 1)  # [Hk, r, N, C, 1] to the chunk's end
    k_end = (k[:, None] * end_decay).view(num_heads, n, c, dk).transpose(-1, -2)  # [Hv, N, Dk, C]
    chunk_decay = g_exp.view(num_heads, n, c)[..., -1, None, None]  # [Hv, N, 1, 1]
    s = torch.zeros(num_heads, dk, value_dim, device=q.device) if state is None else state.float()  # [Hv, Dk, Dv]
    out = torch.empty_like(u)  # [Hv, N, C, Dv]
    for i in range(n):
        ws, qs = (wq[:, i] @ s).split(c, dim=-2)  # [Hv, C, Dv] each
        v_new = u[:, i] - ws  # [Hv, C, Dv]
        torch.baddbmm(qs, intra[:, i], v_new, out=out[:, i])  # [Hv, C, Dv]
        s = torch.baddbmm(s * chunk_decay[:, i], k_end[:, i], v_new)  # [Hv, Dk, Dv]
    out = out.reshape(num_heads, -1, value_dim)[:, :length]  # [Hv, L, Dv]
    return out.transpose(0, 1).to(dtype), s


def causal_conv(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Depthwise causal conv + silu over one request's run. x [L, C]; conv_state [C, K-1]; weight [C, K].

    Returns y [L, C] (x's dtype) and the new conv state [C, K-1] (the last K-1 inputs).

    Token-major, as x comes: y_t = sum_j w_j * x_(t-K+1+j) is K multiply-adds of shifted rows, which
    on a CPU is 3x cheaper for 2,048 tokens than a grouped conv1d over the transposed run (the
    same products in the same order: the results agree bit for bit).
    """
    kernel, n = weight.shape[-1], x.shape[0]
    padded = torch.cat((conv_state.t().to(weight.dtype), x.to(weight.dtype)))  # [K-1+L, C]
    y = padded[:n] * weight[:, 0]  # [L, C]
    for j in range(1, kernel):
        y.addcmul_(padded[j : j + n], weight[:, j])
    new_state = padded[n:].t()  # [C, K-1]: the last K-1 inputs
    return F.silu(y, inplace=True).to(x.dtype), new_state


def causal_conv_step(
    x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per request. x [B, C]; conv_state [B, C, K-1]; weight [C, K] -> y [B, C], state [B, C, K-1]."""
    window = torch.cat((conv_state.to(weight.dtype), x[..., None].to(weight.dtype)), dim=-1)  # [B, C, K]
    y = (window * weight[None]).sum(dim=-1)  # [B, C]
    return F.silu(y).to(x.dtype), window[..., 1:]
