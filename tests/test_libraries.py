"""Which libraries load beside which torch: the CPU kernels everywhere; the CUDA kernels only beside
a torch built for their CUDA major version. Beside any other (a CUDA 12 build of torch, say, or
with a build that has no CUDA kernels) the package imports, its CPU kernels work, and a CUDA tensor
gets one clear error from every op, function and the module."""
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import torch

import torch_fp8norm

_BUILT = sorted(re.fullmatch(r"_C_cu(\d+)\..*", p.name).group(1)
                for p in pathlib.Path(torch_fp8norm.__file__).parent.glob("_C_cu*.so"))


def test_has_cuda_kernels_follows_torch_build():
    major = None if torch.version.cuda is None else torch.version.cuda.split(".")[0]
    assert torch_fp8norm.has_cuda_kernels() == (major in _BUILT)


# Run in a fresh process whose torch says it is built for CUDA 12.8, as PyPI's default torch 2.10.0
# is: the library loader sees what it would see there. A CUDA tensor is a real one where a GPU is
# present, else CPU tensors dispatched to the ops' CUDA kernels.
_MISMATCH = textwrap.dedent("""
    import contextlib, torch
    torch.version.cuda = "12.8"
    import torch_fp8norm
    from torch_fp8norm import reference
    assert not torch_fp8norm.has_cuda_kernels()
    # The CPU kernels work as everywhere.
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    r = torch.randn_like(x)
    w = torch.rand(256, dtype=torch.bfloat16) + 0.5
    r_ref = r.clone()
    got = torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r, w)
    reference.fused_add_rmsnorm_fp8_block_quant(x, r_ref, w)
    assert torch.equal(r, r_ref) and torch.equal(got.block_scale, reference.quantize_fp8_block(got.normed)[1])
    if torch.cuda.is_available():
        device, on_cuda = "cuda", contextlib.nullcontext
    else:
        device, on_cuda = "cpu", lambda: torch._C._IncludeDispatchKeyGuard(torch._C.DispatchKey.CUDA)
    x, r, w = x.to(device), r.to(device), w.to(device)
    r0 = r.clone()
    out = torch.empty(3, 256, dtype=torch.float8_e4m3fn, device=device)
    scale = torch.empty(3, 2, device=device)
    mod = torch_fp8norm.FusedAddRMSNormFP8(256, device=device, dtype=torch.bfloat16)
    ops = torch.ops.fp8norm
    calls = [
        lambda: torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r, w),
        lambda: torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r, w, normed=False, scale_layout="row"),
        lambda: torch_fp8norm.rmsnorm_fp8_block_quant(x, w),
        lambda: mod(x, r),
        lambda: mod(x),
        lambda: ops.fused_add_rmsnorm_fp8_block_quant(x, r, w),
        lambda: ops.fused_add_rmsnorm_fp8_block_quant.out(x, r, w, out=out, block_scale=scale),
        lambda: ops.rmsnorm_fp8_block_quant(x, w),
        lambda: ops.rmsnorm_fp8_block_quant.out(x, w, out=out, block_scale=scale),
    ]
    for call in calls:
        try:
            with on_cuda():
                call()
        except RuntimeError as e:
            print("REFUSED", e)
        else:
            raise AssertionError("a CUDA call ran")
    if device == "cuda":  # (on torch 2.10, the CPU tensors' dispatch to CUDA leaves CPU ops broken)
        assert torch.equal(r, r0)
""")


def test_torch_of_another_cuda_major_version():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(pathlib.Path(torch_fp8norm.__file__).parents[1]),
                                                                    os.environ.get("PYTHONPATH")]))}
    run = subprocess.run([sys.executable, "-c", _MISMATCH], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    refusals = [line for line in run.stdout.splitlines() if line.startswith("REFUSED")]
    assert len(refusals) == 9, run.stdout
    if _BUILT:
        why = (rf"torch_fp8norm's CUDA kernels are built for CUDA {' and '.join(_BUILT)} builds of torch, but this "
               rf"torch .* is built for CUDA 12.8, so only its CPU kernels are loaded: install a torch built for CUDA "
               rf"{_BUILT[-1]}, or build torch_fp8norm from source against this torch")
    else:
        why = "this build of torch_fp8norm has no CUDA kernels"
    for line in refusals:
        assert re.match(rf"REFUSED fp8norm\.(fused_add_)?rmsnorm_fp8_block_quant: {why}", line), line
