"""llama-server's slots share one batch: what else ran beside each request's prefill and decode.

llama-server builds one batch per step from every busy slot: a token for each slot decoding and
up to `n_batch` prompt tokens of the slots prefilling. A request's `eval time` therefore holds
every step it shared with the others: a decode that ran while another slot's 2,500-token prompt
went in took that prompt's time too (0.55 tok/s beside 160 alone), and a `prompt eval time`
holds the other slots' prompts and decodes. Where the log's stamps place each request's prompt
and decode (slots.py), their windows show what ran beside every row:

- `slots_decoding`: slots decoding over the row's window on average, itself included for a decode;
- `slots_prefilling`: the same for slots prefilling, itself included for a prefill;
- `other_prompt`: prompt tokens other requests computed inside the row's window (each request's
  prompt spread evenly over its prefill).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np


class Work(NamedTuple):
    """What each request did, one entry per request and phase: when, and how many prompt tokens."""

    request: np.ndarray  # int: the request's number
    decode: np.ndarray  # bool: a decode (else a prefill)
    start: np.ndarray  # seconds on the file's clock
    end: np.ndarray
    tokens: np.ndarray  # a prefill's prompt tokens (0 for a decode)


class Company(NamedTuple):
    slots_decoding: np.ndarray
    slots_prefilling: np.ndarray
    other_prompt: np.ndarray


def company(request: np.ndarray, start: np.ndarray, end: np.ndarray, work: Work) -> Company:
    """For rows of `request` over the windows [start, end): what the other requests did meanwhile
    (the row's own request is taken out wherever its windows overlap the row's)."""
    span = end - start
    decoding = _integral(work.start[work.decode], work.end[work.decode], np.ones(int(work.decode.sum())))
    prefill = ~work.decode
    length = work.end - work.start
    rate = np.where(length > 0, work.tokens / np.where(length > 0, length, 1.0), 0.0)
    prefilling = _integral(work.start[prefill], work.end[prefill], np.ones(int(prefill.sum())))
    prompts = _integral(work.start[prefill], work.end[prefill], rate[prefill])
    own_decode, own_prefill_s, own_prompt = _own(request, start, end, work, rate)
    with np.errstate(divide="ignore", invalid="ignore"):
        others_decoding = (decoding(end) - decoding(start) - own_decode) / span
        others_prefilling = (prefilling(end) - prefilling(start) - own_prefill_s) / span
    other_prompt = np.maximum(prompts(end) - prompts(start) - own_prompt, 0.0)
    return Company(np.maximum(others_decoding, 0.0), np.maximum(others_prefilling, 0.0), other_prompt)


def _own(
    request: np.ndarray, start: np.ndarray, end: np.ndarray, work: Work, rate: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: seconds its own request decoded and prefilled inside the row's window, and the
    prompt tokens it computed there."""
    own_decode = np.zeros(len(request))
    own_prefill = np.zeros(len(request))
    own_prompt = np.zeros(len(request))
    order = np.argsort(work.request, kind="stable")
    keys = work.request[order]
    lo = np.searchsorted(keys, request, side="left")
    hi = np.searchsorted(keys, request, side="right")
    for k in range(int((hi - lo).max(initial=0))):  # a request has a prefill and a decode: two passes
        has = lo + k < hi
        j = order[np.minimum(lo + k, len(order) - 1)]
        overlap = np.where(
            has, np.clip(np.minimum(end, work.end[j]) - np.maximum(start, work.start[j]), 0.0, None), 0.0
        )
        own_decode += np.where(work.decode[j], overlap, 0.0)
        own_prefill += np.where(work.decode[j], 0.0, overlap)
        own_prompt += np.where(work.decode[j], 0.0, overlap * rate[j])
    return own_decode, own_prefill, own_prompt


def _integral(start: np.ndarray, end: np.ndarray, rate: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """t -> the integral, from the first edge to t, of the sum of `rate` over the windows [start, end)."""
    if len(start) == 0:
        return lambda t: np.zeros(len(t))
    edges = np.concatenate([start, end])
    steps = np.concatenate([rate, -rate])
    order = np.argsort(edges, kind="stable")
    edges, steps = edges[order], steps[order]
    level = np.cumsum(steps)  # the sum of rates just after each edge
    area = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(edges))])  # piecewise linear between edges
    return lambda t: np.interp(t, edges, area, left=0.0, right=float(area[-1]))
