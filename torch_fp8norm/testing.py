"""Testing helpers for code that calls the fp8norm ops.

``torch.library.opcheck`` compares the tensors an op mutates with ``torch.allclose``, which has no
float8 kernel: on the ``.out`` overloads (whose ``out`` is float8_e4m3fn) it fails inside torch, not
in the op. :func:`opcheck` runs it with float8 tensors compared by their bytes instead.
"""
from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, Optional, Tuple

import torch

__all__ = ["fp8_comparing_allclose", "opcheck"]


@contextlib.contextmanager
def fp8_comparing_allclose() -> Iterator[None]:
    """Inside this block ``torch.allclose`` compares float8 tensors by their bytes (equal dtype and
    identical bytes); every other call is unchanged. Not thread-safe: it swaps a torch attribute."""
    orig = torch.allclose

    def allclose(a, b, *args, **kwargs):
        fp8 = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz,
               torch.float8_e8m0fnu, torch.float4_e2m1fn_x2)
        if a.dtype in fp8 or b.dtype in fp8:
            return a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))
        return orig(a, b, *args, **kwargs)

    torch.allclose = allclose
    try:
        yield
    finally:
        torch.allclose = orig


def opcheck(op, args: Tuple[Any, ...], kwargs: Optional[Dict[str, Any]] = None, **opcheck_kwargs) -> Dict[str, str]:
    """``torch.library.opcheck(op, args, kwargs, **opcheck_kwargs)`` with float8 outputs compared by
    their bytes. Works for every fp8norm overload, e.g.
    ``opcheck(torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out, (x, r, w), dict(out=q, block_scale=s))``.
    Needs the ``expecttest`` package (torch's opcheck imports it)."""
    with fp8_comparing_allclose():
        return torch.library.opcheck(op, args, kwargs, **opcheck_kwargs)
