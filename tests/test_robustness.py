"""Determinism, threads, CUDA graphs, streams and memory."""
import threading

import pytest
import torch

from fp8norm_testing import DEVICES, Case, check_contract, int_view, make_inputs, out_buffers, poison_

cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _call_out(x, r, w, out, s, n, ue8m0=False):
    torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out(x, r, w, 1e-6, ue8m0, out=out, block_scale=s,
                                                            normed_out=n)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(7, 1152), (300, 4096), (2, 65536)])
def test_50_calls_bitwise_identical(device, shape):
    c = Case(device, torch.bfloat16, *shape)
    x, r0, w = make_inputs(c)
    first = None
    for _ in range(50):
        r = r0.clone()
        out, s, n = out_buffers(c)
        _call_out(x, r, w, out, s, n)
        got = [int_view(t).clone() for t in (r, out, s, n)]
        if first is None:
            first = got
        else:
            for a, b in zip(first, got):
                assert torch.equal(a, b)


def test_cpu_calls_from_several_threads():
    cases = [Case("cpu", dt, m, h) for dt, m, h in
             [(torch.bfloat16, 64, 4096), (torch.float16, 33, 1152), (torch.float32, 17, 2048), (torch.bfloat16, 5, 16384)]]
    inputs = [make_inputs(c) for c in cases]
    expected = []
    for c, (x, r, w) in zip(cases, inputs):
        rr = r.clone()
        out, s, n = out_buffers(c)
        _call_out(x, rr, w, out, s, n)
        expected.append([int_view(t).clone() for t in (rr, out, s, n)])
    errors = []

    def worker(i):
        try:
            c, (x, r, w) = cases[i], inputs[i]
            for _ in range(20):
                rr = r.clone()
                out, s, n = out_buffers(c)
                _call_out(x, rr, w, out, s, n)
                for a, b in zip(expected[i], (rr, out, s, n)):
                    assert torch.equal(a, int_view(b)), f"thread {i}: result differs"
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i % len(cases),)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@cuda_only
@pytest.mark.parametrize("shape", [(1, 4096), (600, 2048), (3, 32768)])
def test_cuda_graph_replay_with_fresh_data(shape):
    c = Case("cuda", torch.bfloat16, *shape)
    x, r, w = make_inputs(c)
    out, s, n = out_buffers(c)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside capture
        _call_out(x, r.clone(), w, out, s, n)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        _call_out(x, r, w, out, s, n)
    for _ in range(3):
        x2, r2, _ = make_inputs(c)
        x.copy_(x2)
        r.copy_(r2)
        for t in (out, s, n):
            poison_(t)
        g.replay()
        torch.cuda.synchronize()
        check_contract(x, r2, w, 1e-6, False, r, out, s, n)


@cuda_only
def test_cuda_runs_on_the_current_stream():
    c = Case("cuda", torch.bfloat16, 4096, 4096)
    x, r, w = make_inputs(c)
    x_new, r_new, _ = make_inputs(c)
    out, s, n = out_buffers(c)
    side = torch.cuda.Stream()
    big = torch.randn(8192, 8192, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(4):
            big = big @ big / 8192  # keep the side stream busy for a while
        x.copy_(x_new)              # ... before the new data arrives
        r.copy_(r_new)
        _call_out(x, r, w, out, s, n)  # must run after the copies on this stream
    side.synchronize()
    check_contract(x_new, r_new, w, 1e-6, False, r, out, s, n)


@cuda_only
def test_cuda_out_call_allocates_nothing():
    c = Case("cuda", torch.bfloat16, 1000, 7168)
    x, r, w = make_inputs(c)
    out, s, n = out_buffers(c)
    _call_out(x, r, w, out, s, n)  # warm-up (launch configuration, attribute caches)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    _call_out(x, r, w, out, s, n)
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == before
    assert torch.cuda.max_memory_allocated() == before


@cuda_only
def test_cuda_functional_call_allocates_only_its_outputs():
    c = Case("cuda", torch.bfloat16, 1000, 7168)
    x, r, w = make_inputs(c)
    torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r, w)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out, s, n = torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r, w)
    torch.cuda.synchronize()
    # the caching allocator hands out blocks in multiples of 512 bytes
    sizes = sum((t.untyped_storage().nbytes() + 511) // 512 * 512 for t in (out, s, n))
    assert torch.cuda.memory_allocated() - before == sizes
    assert torch.cuda.max_memory_allocated() - before == sizes
