#!/usr/bin/env bash
# Packaging check, run by .ci/run in its venv: `python -m build --no-isolation` (an sdist, then the
# default wheel built from it: every GPU architecture when nvcc is there), `auditwheel repair`
# (manylinux_2_28, as torch's own wheels; torch's libraries and the CUDA runtime stay outside),
# then the wheel's tags, metadata, size, libraries (NEEDED, stable-ABI symbols only) and kernel
# images (cuobjdump). Then the wheel is installed into fresh venvs from another folder: beside the
# CI venv's torch (a smoke test), and beside torch 2.13.0's CPU build and torch 2.10.0's CUDA 12.8
# build, where the whole CPU test suite runs.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT  # several GB of venvs: never left behind, pass or fail
echo "building the sdist, then the default wheel from it (all GPU architectures when CUDA is built)"
(unset TORCH_CUDA_ARCH_LIST; time python -m build --no-isolation --outdir "$work/dist" > "$work/build.log" 2>&1) \
  || { tail -40 "$work/build.log"; exit 1; }
banners=$(grep -c "building the CUDA kernels too" "$work/build.log" || true)
[ "$banners" -le 1 ] || { echo "the build banner was printed $banners times"; exit 1; }
ls "$work"/dist/*.tar.gz
python -m auditwheel show "$work"/dist/*.whl
python -m auditwheel repair --plat manylinux_2_28_x86_64 --exclude 'libtorch*.so' --exclude 'libc10*.so' \
  --exclude 'libcudart.so.*' -w "$work/wheel" "$work"/dist/*.whl > "$work/repair.log" 2>&1 || { cat "$work/repair.log"; exit 1; }
wheel=$(ls "$work"/wheel/*.whl)
cuobjdump=""
if ls "$work"/dist/*.whl | xargs unzip -l | grep -q "_C_cu"; then
  cuobjdump=$(command -v cuobjdump || ls "${CUDA_HOME:-/nonexistent}/bin/cuobjdump" 2>/dev/null || true)
  if [ -z "$cuobjdump" ]; then
    python -m pip install -q nvidia-cuda-cuobjdump
    cuobjdump=$(python -c "import glob, sysconfig; print(glob.glob(sysconfig.get_paths()['purelib'] + '/nvidia/*/bin/cuobjdump')[0])")
  fi
fi
python - "$wheel" "$cuobjdump" <<'PY'
import email, os, re, subprocess, sys, tempfile, zipfile

wheel, cuobjdump = sys.argv[1], sys.argv[2]
name = os.path.basename(wheel)
size = os.path.getsize(wheel)
print(f"{name}: {size / 1e6:.1f} MB")
assert re.search(r"-cp310-abi3-(manylinux_2_\d+_x86_64\.)*manylinux_2_28_x86_64\.whl$", name), name
assert size <= 50e6, f"the wheel is {size / 1e6:.1f} MB, over 50 MB"
tmp = tempfile.mkdtemp()
with zipfile.ZipFile(wheel) as z:
    meta = email.message_from_bytes(z.read(next(n for n in z.namelist() if n.endswith("METADATA"))))
    sos = [z.extract(n, tmp) for n in z.namelist() if n.endswith(".so")]
assert meta["Requires-Python"] == ">=3.10", meta["Requires-Python"]
assert meta.get_all("Requires-Dist") == ["torch>=2.10"], meta.get_all("Requires-Dist")
assert meta["Description-Content-Type"] == "text/markdown" and "# torch_fp8norm" in meta.get_payload()
# Only the two libraries, each needing only torch's C-shim libraries (and the CUDA runtime).
names = sorted(os.path.basename(p) for p in sos)
assert names[0] == "_C.abi3.so" and all(re.fullmatch(r"_C_cu\d+\.abi3\.so", n) for n in names[1:]), names
for so in sos:
    needed = set(re.findall(r"\(NEEDED\).*\[(.+)\]", subprocess.run(["readelf", "-d", so], capture_output=True,
                                                                    text=True, check=True).stdout))
    torch_libs = {n for n in needed if re.match(r"lib(torch|c10)", n)}
    want = {"libtorch_cpu.so"} | ({"libtorch_cuda.so"} if "_C_cu" in so else set())
    assert torch_libs == want, (so, needed)
    print(f"{os.path.basename(so)} needs {sorted(needed)}")
if cuobjdump:
    so = next(p for p in sos if "_C_cu" in p)
    listing = subprocess.run([cuobjdump, "--list-elf", "--list-ptx", so], capture_output=True, text=True,
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
smoke() {  # venv python: import, call and compare with the reference, from another folder
  (cd "$work" && "$1" - <<'PY'
import importlib.metadata as md

import torch
import torch_fp8norm
from torch_fp8norm import reference

assert md.version("torch_fp8norm") == torch_fp8norm.__version__
assert "site-packages" in torch_fp8norm.__file__, torch_fp8norm.__file__
import pathlib
built = {p.name.split(".")[0] for p in pathlib.Path(torch_fp8norm.__file__).parent.glob("_C_cu*.so")}
major = None if torch.version.cuda is None else torch.version.cuda.split(".")[0]
assert torch_fp8norm.has_cuda_kernels() == (f"_C_cu{major}" in built), (torch.version.cuda, built)
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
print("wheel smoke test passed: torch_fp8norm", torch_fp8norm.__version__, "on torch", torch.__version__,
      "| CUDA kernels:", torch_fp8norm.has_cuda_kernels())
PY
  )
}

# Beside the CI venv's torch (a CUDA build).
python3 -m venv "$work/venv"
torch_version=$(python -c "import torch; print(torch.__version__.split('+')[0])")
"$work/venv/bin/python" -m pip install -q "torch==$torch_version" numpy "$wheel"
smoke "$work/venv/bin/python"
rm -rf "$work/venv"  # one CUDA torch on disk at a time

# Beside torch 2.13.0's CPU build (on this machine's disk) and beside PyPI's default torch 2.10.0, a
# CUDA 12.8 build: no CUDA library loaded (the ops refuse CUDA tensors), and the whole test suite
# (its CPU tests; tests/test_stable_abi.py on the wheel's libraries) passes, from a copy of the
# tests outside the repository.
mkdir "$work/suite" && cp -r tests examples benchmarks README.md pyproject.toml "$work/suite/"
for torch_version in 2.13.0 2.10.0; do
  venv="$work/venv-$torch_version"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q "torch==$torch_version" "$wheel" pytest hypothesis numpy expecttest tqdm
  smoke "$venv/bin/python"
  (cd "$work/suite" && time "$venv/bin/python" -m pytest -q -p no:cacheprovider tests)
  rm -rf "$venv"
done
