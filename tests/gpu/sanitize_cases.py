"""The CUDA cases run under compute-sanitizer by tests/gpu/sanitize.sh (a plain script: pytest
itself is slow under the sanitizer), each checked against the contract as in the tests: every
kernel of the launch policy forced on the shapes that exercise it (tests/test_kernels.py's
CASES), then a grid under the policy's own choices (odd H, long rows, M in {1, 3, 5, 1024, 133},
strided and unaligned rows, every block_scale layout, normed_out=None, scale_ue8m0, both ops, every
norm convention; the kernel cases run each convention too),
and packed UE8M0 scales under every kernel (tests/test_ue8m0_packed.py)."""
import itertools
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import fp8norm_testing  # noqa: E402
from fp8norm_testing import LAYOUTS, Case, check_case, forced_kernel, kernel_runs_here  # noqa: E402
from torch_fp8norm.reference import NORM_CONVENTIONS  # noqa: E402
from test_kernels import kernel_cases  # noqa: E402
from test_ue8m0_packed import KERNEL_CASES, test_packed_every_cuda_kernel  # noqa: E402

# References on the CPU: racecheck reports hazards inside torch's own CUDA reduction kernels.
fp8norm_testing.REFERENCE_DEVICE = "cpu"


def policy_cases(device="cuda"):
    opts = list(itertools.product([0, 128, 1], LAYOUTS, [False, True], [False, True], [True, False]))
    i = 0
    for dtype in (torch.bfloat16, torch.float32):
        for h, m in itertools.product((128, 1152, 5120, 32768, 65536), (1, 3, 5, 1024, 133)):
            if (m == 1024 and h > 5120) or (m == 133 and h < 32768):
                continue
            pad, layout, normed_none, ue8m0, fused = opts[(i * 7) % len(opts)]
            conv = NORM_CONVENTIONS[i % len(NORM_CONVENTIONS)]
            i += 1
            yield Case(device, dtype, m, h, fused=fused, pad=pad, layout=layout, normed_none=normed_none, ue8m0=ue8m0,
                       norm_convention=conv)


GROUPS = ("kernels", "policy", "packed")


def main(groups=GROUPS):
    n = 0
    if "kernels" in groups:
        for param in kernel_cases():
            kernel, case = param.values
            if not kernel_runs_here(kernel):
                continue
            with forced_kernel(kernel):
                check_case(case)
            n += 1
    if "policy" in groups:
        for case in policy_cases():
            check_case(case)
            n += 1
    if "packed" in groups:
        for i in range(len(KERNEL_CASES)):
            if not kernel_runs_here(KERNEL_CASES[i][0]):
                continue
            test_packed_every_cuda_kernel(i)
            n += 1
    torch.cuda.synchronize()
    print(f"sanitize_cases: {n} cases checked")


if __name__ == "__main__":
    unknown = set(sys.argv[1:]) - set(GROUPS)
    if unknown:
        sys.exit(f"unknown case groups {sorted(unknown)}; groups: {' '.join(GROUPS)} (default: all)")
    main(sys.argv[1:] or GROUPS)
