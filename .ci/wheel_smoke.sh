#!/usr/bin/env bash
# Packaging check, run by .ci/run in its venv: `python -m build --wheel --no-isolation` (CPU
# kernels only, to keep CI short: the same setup.py adds the CUDA kernels when nvcc is there),
# installed with torch into a fresh venv, imported and called from another folder.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
python -m pip install -q build
FP8NORM_CPU_ONLY=1 python -m build --wheel --no-isolation --outdir "$work/dist" > "$work/build.log" 2>&1 || { tail -40 "$work/build.log"; exit 1; }
python3 -m venv "$work/venv"
torch_version=$(python -c "import torch; print(torch.__version__.split('+')[0])")  # the CI venv's
"$work/venv/bin/python" -m pip install -q "torch==$torch_version" "$work"/dist/*.whl
cd "$work"
"$work/venv/bin/python" - <<'PY'
import importlib.metadata as md

import torch
import torch_fp8norm
from torch_fp8norm import reference

assert md.version("torch_fp8norm") == torch_fp8norm.__version__
assert any(r.split()[0].startswith("torch") for r in md.requires("torch_fp8norm")), md.requires("torch_fp8norm")
assert "site-packages" in torch_fp8norm.__file__, torch_fp8norm.__file__
x = torch.randn(3, 256, dtype=torch.bfloat16)
r = torch.randn_like(x)
w = torch.rand(256, dtype=torch.bfloat16) + 0.5
r_ref = r.clone()
got = torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r, w)
reference.fused_add_rmsnorm_fp8_block_quant(x, r_ref, w)
q, s = reference.quantize_fp8_block(got.normed)
assert torch.equal(r, r_ref) and torch.equal(got.block_scale, s)
assert torch.equal(got.out.view(torch.uint8), q.view(torch.uint8))
norm = torch_fp8norm.FusedAddRMSNormFP8.from_rmsnorm(torch.nn.RMSNorm(256))
assert norm(x).out.shape == (3, 256)
print("wheel smoke test passed: torch_fp8norm", torch_fp8norm.__version__, "from", torch_fp8norm.__file__)
PY
rm -rf "$work"
