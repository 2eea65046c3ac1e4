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
DECAY_FLOOR = -64.0


def decay(log_decay: torch.Tensor) -> torch.Tensor:
    """exp(log_decay), exactly 0 where log_decay < DECAY_FLOOR (never subnormal)."""
    return log_decay.masked_fill(log_decay < DECAY_FLOOR, float("-inf")).exp()


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

    The whole chunks first, then what is left as one shorter chunk: no padding tokens are
    computed (a 129-token append is 4 chunks of 32 and one of 1, not 5 of 32).
    """
    dtype = v.dtype
    length, num_heads, value_dim = v.shape
    dk = q.shape[-1]
    q = _l2norm(q.float()) * dk**-0.5  # [L, Hk, Dk]
    k = _l2norm(k.float())  # [L, Hk, Dk]
    v, g, beta = v.float(), g.float(), beta.float()
    s = torch.zeros(num_heads, dk, value_dim, device=v.device) if state is None else state.float()  # [Hv, Dk, Dv]
    whole = length - length % chunk_size
    parts = []
    for start, end, size in ((0, whole, chunk_size), (whole, length, length - whole)):
        if end > start:
            o, s = _chunks(q[start:end], k[start:end], v[start:end], g[start:end], beta[start:end], s, size)
            parts.append(o)
    out = parts[0] if len(parts) == 1 else torch.cat(parts)  # [L, Hv, Dv]
    return out.to(dtype), s


def _chunks(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, s: torch.Tensor, c: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Whole chunks of c tokens with the UT transform. q, k [L, Hk, Dk] (l2-normalised, q scaled);
    v [L, Hv, Dv]; g, beta [L, Hv]; s [Hv, Dk, Dv]; all float32, L a multiple of c.

    Returns o [L, Hv, Dv] (a view) and the final state [Hv, Dk, Dv].

    Laid out chunk-major ([N, heads, C, ...]), so that each step of the loop over chunks reads
    contiguous blocks. The r = Hv / Hk value heads of a key head share its q and k: the products of
    keys with keys and queries with keys are taken once per key head and broadcast over its value
    heads, and both right-hand sides of the UT system are solved together.
    """
    length, hk, dk = q.shape
    num_heads, value_dim = v.shape[1], v.shape[2]
    r, n = num_heads // hk, length // c
    q = q.view(n, c, hk, dk).transpose(1, 2).contiguous()  # [N, Hk, C, Dk]
    k = k.view(n, c, hk, dk).transpose(1, 2).contiguous()  # [N, Hk, C, Dk]
    v = v.view(n, c, hk, r, value_dim).permute(0, 2, 3, 1, 4)  # [N, Hk, r, C, Dv]
    g = g.view(n, c, num_heads).transpose(1, 2).cumsum(dim=-1)  # [N, Hv, C] from each chunk's start
    beta = beta.view(n, c, hk, r).permute(0, 2, 3, 1)[..., None]  # [N, Hk, r, C, 1]
    # pair_decay[i, j] = exp(g_i - g_j) for j <= i, 0 above the diagonal (-inf added there)
    above = torch.full((c, c), float("-inf"), device=q.device).triu(1)  # [C, C]
    pair_decay = decay(g[..., :, None] - g[..., None, :] + above).view(n, hk, r, c, c)  # [N, Hk, r, C, C]
    k_t = k.transpose(-1, -2)  # [N, Hk, Dk, C]
    # the UT system's strict lower part: (beta_i k_i . k_j) exp(g_i - g_j); the queries' the same without beta
    ut = ((k @ k_t)[:, :, None] * pair_decay * beta).view(n, num_heads, c, c)  # [N, Hv, C, C]
    intra = ((q @ k_t)[:, :, None] * pair_decay).view(n, num_heads, c, c)  # [N, Hv, C, C]
    # (I + strict_lower(ut)) X = RHS for both right-hand sides: the values to write (u) and decayed
    # keys reading the old state (w)
    g_exp = decay(g).view(n, hk, r, c, 1)  # [N, Hk, r, C, 1]
    rhs = q.new_empty(n, hk, r, c, value_dim + dk)  # [N, Hk, r, C, Dv + Dk]
    torch.mul(v, beta, out=rhs[..., :value_dim])
    torch.mul(k[:, :, None], beta * g_exp, out=rhs[..., value_dim:])
    uw = unit_lower_inverse(ut) @ rhs.view(n, num_heads, c, -1)  # [N, Hv, C, Dv + Dk]
    u = uw[..., :value_dim].contiguous()  # [N, Hv, C, Dv]
    wq = torch.cat((uw[..., value_dim:], (q[:, :, None] * g_exp).view(n, num_heads, c, dk)), dim=-2)  # [N, Hv, 2C, Dk]
    end_decay = decay(g[..., -1:] - g).view(n, hk, r, c, 1)  # [N, Hk, r, C, 1] to the chunk's end
    k_end = (k[:, :, None] * end_decay).view(n, num_heads, c, dk).transpose(-1, -2).contiguous()  # [N, Hv, Dk, C]
    chunk_decay = g_exp.view(n, num_heads, c)[..., -1, None, None].contiguous()  # [N, Hv, 1, 1]
    out = q.new_empty(n, num_heads, c, value_dim)  # [N, Hv, C, Dv]
    for i in range(n):
        ws_qs = torch.bmm(wq[i], s)  # [Hv, 2C, Dv]: both read the state at the chunk's start
        v_new = u[i] - ws_qs[:, :c]  # [Hv, C, Dv]
        torch.baddbmm(ws_qs[:, c:], intra[i], v_new, out=out[i])  # [Hv, C, Dv]
        s = torch.baddbmm(s * chunk_decay[i], k_end[i], v_new)  # [Hv, Dk, Dv]
    return out.transpose(1, 2).reshape(length, num_heads, value_dim), s


def unit_lower_inverse(a: torch.Tensor) -> torch.Tensor:
    """(I + L)^-1 for L the strictly lower part of a [..., C, C] (nothing else of a is read).

    By block doubling: the inverse of [[A, 0], [B, D]] is [[A^-1, 0], [-D^-1 B A^-1, D^-1]], from
    blocks of 1 up to C (padded with zeros to a power of 2), each level two batched products over
    all blocks at once. On a CPU that is ~10 ops a level where `solve_triangular` solves matrix
    by matrix: the delta rule over 2,048 tokens of 8 heads (512 chunk matrices) took 36 against
    46 ms with it (one run, median of 3).
    """
    c = a.shape[-1]
    size = 1 << max(c - 1, 0).bit_length()  # the power of 2 at or above c
    if size != c:
        a = F.pad(a, (0, size - c, 0, size - c))  # [..., P, P]
    lead = a.shape[:-2]
    inv = a.new_ones(*lead, size, 1, 1)  # the inverses of the size-1 diagonal blocks
    block = 1
    while block < size:
        m = size // (2 * block)  # pairs of diagonal blocks
        pairs = a.view(*lead, m, 2, block, m, 2, block)
        # each pair's lower-left block B: rows of its second block, columns of its first
        b = torch.diagonal(pairs[..., :, 1, :, :, 0, :], dim1=-4, dim2=-2).movedim(-1, -3)  # [..., M, b, b], b = block
        halves = inv.view(*lead, m, 2, block, block)
        first, second = halves[..., 0, :, :], halves[..., 1, :, :]  # [..., M, b, b] each
        merged = a.new_zeros(*lead, m, 2 * block, 2 * block)
        merged[..., :block, :block] = first
        merged[..., block:, block:] = second
        merged[..., block:, :block] = -(second @ b @ first)
        inv, block = merged, 2 * block
    return inv.view(*lead, size, size)[..., :c, :c]


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
