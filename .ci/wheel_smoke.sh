#!/usr/bin/env bash
# Packaging check, run by .ci/run in its venv: `python -m build --no-isolation` (an sdist, then the
# default wheel built from it: every GPU architecture when nvcc is there), the wheel's tags,
# metadata, size and kernel images (cuobjdump), then installed with torch into a fresh venv,
# imported and called from another folder.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
echo "building the sdist, then the default wheel from it (all GPU architectures when CUDA is built)"
(unset TORCH_CUDA_ARCH_LIST; time python -m build --no-isolation --outdir "$work/dist" > "$work/build.log" 2>&1) \
  || { tail -40 "$work/build.log"; exit 1; }
ls "$work"/dist/*.tar.gz
wheel=$(ls "$work"/dist/*.whl)
cuda=$(python -c "import torch_fp8norm; print(int(torch_fp8norm.has_cuda_kernels()))")  # the editable build's
cuobjdump=""
if [ "$cuda" = 1 ]; then
  cuobjdump=$(command -v cuobjdump || ls "${CUDA_HOME:-/nonexistent}/bin/cuobjdump" 2>/dev/null || true)
  if [ -z "$cuobjdump" ]; then
    python -m pip install -q nvidia-cuda-cuobjdump
    cuobjdump=$(python -c "import glob, sysconfig; print(glob.glob(sysconfig.get_paths()['purelib'] + '/nvidia/*/bin/cuobjdump')[0])")
  fi
fi
python - "$wheel" "$cuobjdump" <<'PY'
import email, os, re, subprocess, sys, tempfile, zipfile

import torch

wheel, cuobjdump = sys.argv[1], sys.argv[2]
name = os.path.basename(wheel)
size = os.path.getsize(wheel)
print(f"{name}: {size / 1e6:.1f} MB")
assert "-cp310-abi3-" in name, name
assert size <= 50e6, f"the wheel is {size / 1e6:.1f} MB, over 50 MB"
with zipfile.ZipFile(wheel) as z:
    meta = email.message_from_bytes(z.read(next(n for n in z.namelist() if n.endswith("METADATA"))))
    so = next(n for n in z.namelist() if n.endswith(".so"))
    assert meta["Requires-Python"] == ">=3.10", meta["Requires-Python"]
    assert meta.get_all("Requires-Dist") == [f"torch=={torch.__version__.split('+')[0]}"], meta.get_all("Requires-Dist")
    if cuobjdump:
        path = z.extract(so, tempfile.mkdtemp())
        listing = subprocess.run([cuobjdump, "--list-elf", "--list-ptx", path], capture_output=True, text=True,
                                 check=True).stdout
        images = {}
        for unit, arch, kind in re.findall(r"(\w+)\.(sm_\d+a?)\.(cubin|ptx)", listing):
            images.setdefault(unit, set()).add(f"{arch}.{kind}")
        # setup.py's DEFAULT_ARCHS, e.g. "8.0;9.0;12.0+PTX": a cubin each, and the +PTX one's PTX.
        archs = re.search(r'^DEFAULT_ARCHS = "([^"]+)"', open("setup.py").read(), re.M).group(1).split(";")
        sm = lambda a: "sm_" + a.split("+")[0].replace(".", "")
        want = {sm(a) + ".cubin" for a in archs} | {sm(a) + ".ptx" for a in archs if a.endswith("+PTX")}
        assert images and all(v == want for v in images.values()), images
        print(f"kernel images of {sorted(images)}: {sorted(want)}")
PY
python3 -m venv "$work/venv"
torch_version=$(python -c "import torch; print(torch.__version__.split('+')[0])")  # the CI venv's
"$work/venv/bin/python" -m pip install -q "torch==$torch_version" "$wheel"
cd "$work"
"$work/venv/bin/python" - <<'PY'
import importlib.metadata as md

import torch
import torch_fp8norm
from torch_fp8norm import reference

assert md.version("torch_fp8norm") == torch_fp8norm.__version__
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
print("wheel smoke test passed: torch_fp8norm", torch_fp8norm.__version__, "from", torch_fp8norm.__file__,
      "| CUDA kernels:", torch_fp8norm.has_cuda_kernels())
PY
rm -rf "$work"
