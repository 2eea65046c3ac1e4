"""The chunked delta rule (prefill) is the recurrent one (decode) run token by token, whatever the
chunk size, with value heads sharing key heads, and from a carried state."""

import pytest
import torch

from engine.model import delta_rule


@pytest.mark.parametrize("chunk_size", [8, 32, 64])
@pytest.mark.parametrize("length", [1, 31, 32, 77])
def test_chunked_is_the_recurrent_rule_token_by_token(chunk_size, length):
    gen = torch.Generator().manual_seed(length * 100 + chunk_size)
    hk, hv, dk, dv = 2, 4, 16, 8
    q, k = torch.randn(length, hk, dk, generator=gen), torch.randn(length, hk, dk, generator=gen)
    v = torch.randn(length, hv, dv, generator=gen)
    g = -torch.rand(length, hv, generator=gen)  # log decays
    beta = torch.rand(length, hv, generator=gen)
    state = torch.randn(hv, dk, dv, generator=gen) * 0.1
    out, final = delta_rule.chunked(q, k, v, g, beta, state, chunk_size=chunk_size)
    s, outs = state[None], []
    for t in range(length):
        o, s = delta_rule.recurrent_step(q[t : t + 1], k[t : t + 1], v[t : t + 1], g[t : t + 1], beta[t : t + 1], s)
        outs.append(o[0])
    torch.testing.assert_close(out, torch.stack(outs), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(final, s[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("size", [1, 2, 5, 16, 32, 33])
def test_unit_lower_inverse_is_the_inverse_of_one_plus_the_strict_lower_part(size):
    gen = torch.Generator().manual_seed(size)
    a = torch.randn(2, 3, size, size, generator=gen) * 0.5  # diagonal and upper part must not be read
    want = torch.linalg.inv(torch.eye(size, dtype=torch.float64) + a.double().tril(-1))
    got = delta_rule.unit_lower_inverse(a).double()
    assert got.shape == want.shape
    assert (got - want).abs().max() <= 1e-6 * want.abs().max()


@pytest.mark.parametrize("length", [1, 2, 3, 40])
def test_causal_conv_is_the_grouped_conv_over_the_state_and_the_run(length):
    gen = torch.Generator().manual_seed(length)
    channels, kernel = 6, 4
    x, state = torch.randn(length, channels, generator=gen), torch.randn(channels, kernel - 1, generator=gen)
    weight = torch.randn(channels, kernel, generator=gen)
    y, new_state = delta_rule.causal_conv(x, state, weight)
    window = torch.cat((state, x.t()), dim=-1)  # [C, K-1+L]
    want = torch.nn.functional.conv1d(window[None], weight[:, None, :], groups=channels)[0].t()  # [L, C]
    torch.testing.assert_close(y, torch.nn.functional.silu(want))
    torch.testing.assert_close(new_state, window[:, -(kernel - 1) :])
