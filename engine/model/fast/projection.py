"""The fast path's projections: input-major weights, several of one input fused into one product, the
residual folded in, and the C kernel small_gemm for a few rows where this CPU's rule names it."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn

from engine.kernels import cpu as cpu_kernels
from engine.model.moe import Router

CKernel = Callable[..., int]  # a function of engine/kernels/*.c through ctypes: its status, 0 when it went well


class Projection(NamedTuple):
    """A projection for `torch.mm(x, weight_t)` / `torch.addmm(bias, x, weight_t)`; where `rows` (the C
    kernel small_gemm) is given, a product of `row_range` rows goes through it (faster there)."""

    weight_t: torch.Tensor  # [I, O] contiguous (input-major, experts.input_major)
    bias: torch.Tensor | None  # [O] or None
    rows: CKernel | None = None  # engine/kernels/small_gemm.c's small_gemm, or None
    row_range: tuple[int, int] = (2, 8)  # rows of x it takes, cpu_kernels.small_gemm_rule()

    def plus(self, residual: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """residual + x @ weight_t (+ bias): [T, O]."""
        if self.bias is None and not self._in_c(x):
            return torch.addmm(residual, x, self.weight_t)
        return self(x).add_(residual)

    def _in_c(self, x: torch.Tensor) -> bool:
        return self.rows is not None and self.row_range[0] <= x.shape[0] <= self.row_range[1] and x.is_contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.rows is not None and self._in_c(x):
            w = self.weight_t
            out = x.new_empty(x.shape[0], w.shape[1])  # [B, O]
            self.rows(
                x.shape[0],
                w.shape[0],
                w.shape[1],
                x.data_ptr(),
                x.stride(0),
                w.data_ptr(),
                w.stride(0),
                out.data_ptr(),
                out.stride(0),
                torch.get_num_threads(),
            )
            return out if self.bias is None else out.add_(self.bias)
        return torch.mm(x, self.weight_t) if self.bias is None else torch.addmm(self.bias, x, self.weight_t)


def c_kernel(name: str, *weights: torch.Tensor) -> CKernel | None:
    """The C kernel `name` (engine/kernels/) where the weights are float32 on a CPU and the kernels
    were built; else None."""
    if any(w.device.type != "cpu" or w.dtype != torch.float32 for w in weights):
        return None
    lib = cpu_kernels.load()
    return None if lib is None else getattr(lib, name)


def fuse(*linears: nn.Linear | Router) -> Projection:
    """One input-major weight (and bias) for several projections of the same input (modules
    with a `weight` [O, I] and maybe a `bias`); their parameters become views of it, so every
    path keeps reading the same memory."""
    weight_t = torch.cat([m.weight.detach().t() for m in linears], dim=1).contiguous()  # [I, sum O]
    biases: list[torch.Tensor | None] = [getattr(m, "bias", None) for m in linears]
    bias = None
    if any(b is not None for b in biases):  # a missing bias is zeros
        bias = torch.cat(
            [b.detach() if b is not None else weight_t.new_zeros(m.weight.shape[0]) for m, b in zip(linears, biases)]
        )  # [sum O]
    start = 0
    for m, b in zip(linears, biases):
        rows = m.weight.shape[0]
        m.weight = nn.Parameter(weight_t[:, start : start + rows].t(), requires_grad=False)
        if bias is not None and b is not None:
            m.bias = nn.Parameter(bias[start : start + rows], requires_grad=False)
        start += rows
    return Projection(weight_t, bias)


def unfused(module: nn.Linear) -> Projection:
    """A projection left alone, for `Projection`'s calls (its weight is input-major since loading)."""
    return Projection(module.weight.detach().t(), None if module.bias is None else module.bias.detach())
