"""Two GPUs: a non-current device, the right device's current stream, mixed devices rejected,
and concurrent calls on both devices."""
import threading

import pytest
import torch

from fp8norm_testing import Case, check_case, check_contract, int_view, make_inputs, out_buffers

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("functional", [True, False])
@pytest.mark.parametrize("h", [1152, 4096, 65536])
def test_inputs_on_cuda1_while_cuda0_is_current(fused, functional, h):
    torch.cuda.set_device(0)
    check_case(Case("cuda:1", torch.bfloat16, 600 if h < 65536 else 3, h, fused=fused, functional=functional))
    assert torch.cuda.current_device() == 0


def test_runs_on_the_current_stream_of_the_tensors_device():
    torch.cuda.set_device(0)
    c = Case("cuda:1", torch.bfloat16, 4096, 4096)
    x, r, w = make_inputs(c)
    x_new, r_new, _ = make_inputs(c)
    out, s, n = out_buffers(c)
    s1 = torch.cuda.Stream(device="cuda:1")
    big = torch.randn(8192, 8192, device="cuda:1")
    with torch.cuda.stream(s1):  # current stream of cuda:1; cuda:0 stays on its default stream
        for _ in range(4):
            big = big @ big / 8192
        x.copy_(x_new)
        r.copy_(r_new)
        torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out(x, r, w, out=out, block_scale=s, normed_out=n)
    s1.synchronize()
    check_contract(x_new, r_new, w, 1e-6, False, r, out, s, n)


@pytest.mark.parametrize("arg", ["residual", "weight", "out", "block_scale", "normed_out"])
def test_tensors_on_different_devices_rejected(arg):
    c = Case("cuda:0", torch.bfloat16, 4, 256)
    x, r, w = make_inputs(c)
    out, s, n = out_buffers(c)
    args = dict(residual=r, weight=w, out=out, block_scale=s, normed_out=n)
    args[arg] = args[arg].to("cuda:1")
    before = {k: int_view(v).clone().cpu() for k, v in args.items()}
    with pytest.raises(RuntimeError, match=f"{arg} must be on cuda:0 like input, got cuda:1"):
        torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out(
            x, args["residual"], args["weight"], out=args["out"], block_scale=args["block_scale"],
            normed_out=args["normed_out"])
    for k, v in args.items():
        assert torch.equal(int_view(v).cpu(), before[k]), f"{k} modified"


def test_both_devices_from_two_threads():
    cases = [Case(f"cuda:{d}", torch.bfloat16, 512, 7168) for d in (0, 1)]
    inputs = [make_inputs(c) for c in cases]
    expected = []
    for c, (x, r, w) in zip(cases, inputs):
        rr = r.clone()
        out, s, n = out_buffers(c)
        torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out(x, rr, w, out=out, block_scale=s, normed_out=n)
        check_contract(x, r, w, 1e-6, False, rr, out, s, n)
        expected.append([int_view(t).clone() for t in (rr, out, s, n)])
    errors = []

    def worker(i):
        try:
            c, (x, r, w) = cases[i], inputs[i]
            torch.cuda.set_device(c.device)
            for _ in range(20):
                rr = r.clone()
                out, s, n = out_buffers(c)
                torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out(x, rr, w, out=out, block_scale=s, normed_out=n)
                for a, b in zip(expected[i], (rr, out, s, n)):
                    assert torch.equal(a, int_view(b)), f"device {c.device}: result differs"
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
