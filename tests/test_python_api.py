"""The Python API: the wrappers' options (scale layout, scale format, normed), their named-tuple
result, and the FusedAddRMSNormFP8 module, against the contract on every device."""
import contextlib
import io

import pytest
import torch
from torch import nn

import torch_fp8norm
from fp8norm_testing import (DEVICES, Case, LlamaRMSNorm, assert_bitwise, assert_fp8_equal, check_contract,
                             make_inputs)
from torch_fp8norm import BlockQuantized, FusedAddRMSNormFP8, block_scale_strides

H = 384


def _call(fused, x, r, w, **options):
    if fused:
        return torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r, w, 1e-6, **options)
    return torch_fp8norm.rmsnorm_fp8_block_quant(x, w, 1e-6, **options)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["deepgemm", "scaled_mm", "row"])
@pytest.mark.parametrize("fmt", ["fp32", "ue8m0"])
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("conv", ["torch", "vllm"])
def test_wrapper_options(device, layout, fmt, fused, conv):
    for m, lead in ((1, ()), (6, ()), (6, (2, 3)), (8, ())):
        x, r, w = make_inputs(Case(device, torch.bfloat16, m, H, fused=fused))
        r0 = None if r is None else r.clone()
        view = (lambda t: t.view(*lead, t.shape[-1])) if lead else (lambda t: t)
        res = _call(fused, view(x), None if r is None else view(r), w, scale_layout=layout, scale_format=fmt,
                    norm_convention=conv)
        assert isinstance(res, BlockQuantized)
        out, s, n = (t.view(m, t.shape[-1]) for t in res)
        assert res.block_scale.shape == (*(lead or (m,)), H // 128)
        assert (s if lead else res.block_scale).stride() == block_scale_strides(m, H, layout)
        check_contract(x, r0, w, 1e-6, fmt == "ue8m0", r, out, s, n, norm_convention=conv)
        # normed=False: the same out and block_scale (res is kept, so its memory is not reused).
        if r is not None:
            r.copy_(r0)
        res2 = _call(fused, view(x), None if r is None else view(r), w, scale_layout=layout, scale_format=fmt,
                     normed=False, norm_convention=conv)
        assert res2.normed is None and res2.block_scale.stride() == res.block_scale.stride()
        assert_fp8_equal(res2.out, res.out, "out")
        assert_bitwise(res2.block_scale, res.block_scale, "block_scale")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fused", [True, False])
def test_strided_input_rows_are_not_copied(device, fused):
    # A split projection's output (q_c = qkv[:, :H], 2-D and with leading dimensions): the view
    # itself reaches the op; no copy, clone or contiguous runs.
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(str(func))
            return func(*args, **(kwargs or {}))

    w = torch.ones(H, device=device, dtype=torch.bfloat16)
    for lead in ((5,), (2, 3)):
        wide = torch.randn(*lead, 2 * H, device=device).to(torch.bfloat16)
        x = wide[..., :H]
        r = torch.randn(*lead, H, device=device).to(torch.bfloat16) if fused else None
        r0 = None if r is None else r.clone()
        with torch.no_grad(), Ops() as ops:
            res = _call(fused, x, r, w, norm_convention="vllm")
        assert not [n for n in ops.names if any(k in n for k in ("copy", "clone", "contiguous"))], ops.names
        m = x.numel() // H
        check_contract(x.reshape(m, H), None if r0 is None else r0.view(m, H), w, 1e-6, False,
                       None if r is None else r.view(m, H), res.out.view(m, H), res.block_scale.reshape(m, -1),
                       res.normed.view(m, H), norm_convention="vllm")


@pytest.mark.parametrize("device", DEVICES)
def test_wrapper_option_errors(device):
    x, r, w = make_inputs(Case(device, torch.bfloat16, 2, H))
    with pytest.raises(RuntimeError, match="scale_layout must be one of"):
        torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r, w, scale_layout="tma")
    with pytest.raises(RuntimeError, match="scale_format must be one of"):
        torch_fp8norm.rmsnorm_fp8_block_quant(x, w, scale_format="e8m0")
    with pytest.raises(RuntimeError, match="norm_convention must be one of"):
        torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r, w, norm_convention="llama")
    with pytest.raises(RuntimeError, match="norm_convention must be one of"):
        torch_fp8norm.FusedAddRMSNormFP8(H, norm_convention="gemma")
    with pytest.raises(RuntimeError, match="block_scale_strides: scale_layout must be one of"):
        torch_fp8norm.block_scale_strides(4, H, "tma")
    with pytest.raises(TypeError):
        torch_fp8norm.rmsnorm_fp8_block_quant(x, w, 1e-6, True)  # options are keyword-only
    # Shapes must match as given, not only as the [M, H] views the ops see: one mistake, one
    # error (the op's), whatever the options and the number of dimensions; nothing is written.
    r0 = r.clone()
    shape_error = r"fp8norm.fused_add_rmsnorm_fp8_block_quant: residual must have the shape of input \[2, {}\], got \[1, {}\]"
    for options in ({}, dict(normed=False), dict(scale_layout="row"), dict(scale_format="ue8m0_packed")):
        with pytest.raises(RuntimeError, match=shape_error.format(H, H)):
            torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r[:1], w, **options)
        with pytest.raises(RuntimeError, match="residual must have the shape of input"):
            torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x.view(1, 2, H), r, w, **options)
        with pytest.raises(RuntimeError, match="residual must have the shape of input"):
            torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x.view(2, 1, H), r.view(1, 2, H), w, **options)
        for eps in (-1.0, float("nan"), float("inf")):
            with pytest.raises(RuntimeError, match="eps must be finite and >= 0"):
                torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r, w, eps, **options)
            with pytest.raises(RuntimeError, match="eps must be finite and >= 0"):
                torch_fp8norm.rmsnorm_fp8_block_quant(x.view(1, 2, H), w, eps, **options)
    assert torch.equal(r, r0)


def _entry_points(device):
    """(name, call(x, r, w, eps, **options)) for each Python entry point."""
    def module(x, r, w, eps=1e-6, **o):
        mod = FusedAddRMSNormFP8(w.shape[0], eps, device=device, dtype=w.dtype, **o)
        return mod(x, r)
    return [
        ("fused", lambda x, r, w, eps=1e-6, **o: torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r, w, eps, **o)),
        ("plain", lambda x, r, w, eps=1e-6, **o: torch_fp8norm.rmsnorm_fp8_block_quant(x, w, eps, **o)),
        ("module", module),
    ]


GRAD_MODES = {"grad": torch.enable_grad, "no_grad": torch.no_grad, "inference": torch.inference_mode}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", list(GRAD_MODES))
def test_wrong_types_raise_type_error(device, mode):
    # An argument of the wrong Python type raises TypeError naming it, in every grad mode, on the
    # common path and the others alike; nothing is written.
    x, r, w = make_inputs(Case(device, torch.bfloat16, 2, H))
    r0 = r.clone()
    fused = lambda *a, **o: torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(*a, **o)  # noqa: E731
    plain = lambda *a, **o: torch_fp8norm.rmsnorm_fp8_block_quant(*a, **o)  # noqa: E731
    with GRAD_MODES[mode]():
        for options in ({}, dict(normed=False), dict(scale_layout="row"), dict(scale_format="ue8m0_packed")):
            for bad in (None, 1.0, x.tolist()):
                for i, name in enumerate(("input", "residual", "weight")):
                    args = [x, r, w]
                    args[i] = bad
                    with pytest.raises(TypeError, match=f"fused_add_rmsnorm_fp8_block_quant: {name} must be a "
                                                        f"torch.Tensor, got {type(bad).__name__}"):
                        fused(*args, **options)
                    if name != "residual":
                        with pytest.raises(TypeError, match=f"rmsnorm_fp8_block_quant: {name} must be a torch.Tensor"):
                            plain(*args[::2], **options)
            with pytest.raises(TypeError, match="eps must be a float .or None"):
                fused(x, r, w, "1e-6", **options)
            with pytest.raises(TypeError, match="eps must be a float"):
                plain(x, w, [1e-6], **options)
        for value in ("False", 0, None):
            with pytest.raises(TypeError, match="normed must be a bool, got"):
                fused(x, r, w, normed=value)
        with pytest.raises(TypeError, match="scale_layout must be a str"):
            plain(x, w, scale_layout=None)
        with pytest.raises(TypeError, match="scale_format must be a str"):
            fused(x, r, w, scale_format=1)
        with pytest.raises(TypeError, match="norm_convention must be a str"):
            plain(x, w, norm_convention=None)
        with pytest.raises(TypeError, match="hidden_size must be an int"):
            FusedAddRMSNormFP8("256")
        with pytest.raises(TypeError, match="FusedAddRMSNormFP8: normed must be a bool"):
            FusedAddRMSNormFP8(256, normed="False")
    assert torch.equal(r, r0)


@pytest.mark.parametrize("device", DEVICES)
def test_one_error_type_per_mistake(device):
    # Each mistake raises one exception type from every entry point: a value the ops refuse
    # RuntimeError (the ops', the functions', the module's, from_rmsnorm's).
    x, r, w = make_inputs(Case(device, torch.bfloat16, 2, H))
    for name, call in _entry_points(device):
        for eps in (-1.0, float("nan"), float("inf")):
            with pytest.raises(RuntimeError, match="eps must be finite and >= 0"):
                call(x, r, w, eps)
        with pytest.raises(RuntimeError, match="multiple of 128"):
            call(x[:, :200], r[:, :200], w[:200])
        for option in (dict(scale_layout="tma"), dict(scale_format="e8m0")):
            with pytest.raises(RuntimeError, match="must be one of"):
                call(x, r, w, **option)
    with pytest.raises(RuntimeError, match="multiple of 128"):
        torch.ops.fp8norm.rmsnorm_fp8_block_quant(x[:, :200], w[:200])
    with pytest.raises(RuntimeError, match="eps must be finite and >= 0"):
        torch.ops.fp8norm.rmsnorm_fp8_block_quant(x, w, -1.0)
    with pytest.raises(RuntimeError, match="eps must be finite and >= 0"):
        FusedAddRMSNormFP8.from_rmsnorm(nn.RMSNorm(H, eps=-1.0))
    with pytest.raises(RuntimeError, match="multiple of 128"):
        FusedAddRMSNormFP8.from_rmsnorm(nn.RMSNorm(200))


@pytest.mark.parametrize("device", DEVICES)
def test_eps_none_is_nn_rmsnorm_eps(device):
    # eps=None: what torch.nn.RMSNorm uses for every input dtype, float32's eps, in the functions
    # and the module alike. Rows of mean square 1e-6 tell it from float16's or bfloat16's eps.
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        x = (torch.randn(3, H, dtype=torch.float64) * 1e-3).to(dtype).to(device)
        r = torch.zeros_like(x)
        w = torch.ones(H, dtype=dtype, device=device)
        want = torch_fp8norm.rmsnorm_fp8_block_quant(x, w, torch.finfo(torch.float32).eps)
        for got in (torch_fp8norm.rmsnorm_fp8_block_quant(x, w, None),
                    torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r.clone(), w, None, normed=False),
                    FusedAddRMSNormFP8(H, None, device=device, dtype=dtype)(x),
                    FusedAddRMSNormFP8.from_rmsnorm(nn.RMSNorm(H, device=device, dtype=dtype))(x)):
            assert_fp8_equal(got.out, want.out, "out")
            assert_bitwise(got.block_scale, want.block_scale, "block_scale")
        torch.testing.assert_close(want.normed.float(), nn.functional.rms_norm(x, (H,)).float(), rtol=0.02, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_inference_tensor_residual_outside_inference_mode_refused(device):
    # As torch's in-place ops: an inference tensor may be updated in place only inside
    # inference_mode. The refusal comes before anything is written, on every path.
    x, r, w = make_inputs(Case(device, torch.bfloat16, 4, H))
    with torch.inference_mode():
        ri = r.clone()
    mod = FusedAddRMSNormFP8(H, device=device, dtype=torch.bfloat16)
    for mode in ("grad", "no_grad"):
        with GRAD_MODES[mode]():
            for options in ({}, dict(normed=False), dict(scale_format="ue8m0_packed")):
                with pytest.raises(RuntimeError, match="residual is an inference tensor, updated in place"):
                    torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, ri, w, **options)
                with pytest.raises(RuntimeError, match="residual is an inference tensor"):
                    torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x.view(2, 2, H), ri.view(2, 2, H), w, **options)
            with pytest.raises(RuntimeError, match="residual is an inference tensor"):
                mod(x, ri)
    assert torch.equal(ri, r)
    torch_fp8norm.rmsnorm_fp8_block_quant(ri, w)  # read only: fine
    with torch.inference_mode():
        got = torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, ri, w)
    check_contract(x, r, w, 1e-6, False, ri, *got)


def test_version_bump_private_name_pinned():
    # ops.py bumps versions through the C function torch.autograd.graph.increment_version calls.
    from torch_fp8norm import ops
    assert ops._bump_versions is torch._C._increment_version
    t = torch.zeros(2)
    v = t._version
    ops._bump_versions((t,))
    assert t._version == v + 1


def test_direct_op_callables_pinned():
    # In eager code ops.py calls an overload's C++ callable, OpOverload._op (what OpOverload.__call__
    # runs), less __call__'s Python frame: the private name is there, and modes still see the op.
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    from torch_fp8norm import ops
    for overloads in (ops._FUSED_OPS, ops._PLAIN_OPS):
        for overload, direct in zip(overloads[:2], overloads[2:]):
            assert direct is overload._op and direct is not overload
    seen = []

    class Function(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(("function", func))
            return func(*args, **(kwargs or {}))

    class Dispatch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(("dispatch", func))
            return func(*args, **(kwargs or {}))

    x, r, w = torch.randn(2, H, dtype=torch.bfloat16), torch.randn(2, H, dtype=torch.bfloat16), torch.ones(H)
    ours = set(ops._FUSED_OPS[:2] + ops._PLAIN_OPS[:2])
    with torch.no_grad(), Function(), Dispatch():
        torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r, w)
        torch_fp8norm.rmsnorm_fp8_block_quant(x, w, scale_layout="row")
    for kind in ("function", "dispatch"):
        assert [f for k, f in seen if k == kind and f in ours] == [ops._FUSED, ops._PLAIN_OUT], kind
    with torch.no_grad(), FakeTensorMode() as mode:
        fx, fr, fw = (mode.from_tensor(t) for t in (x, r, w))
        res = torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(fx, fr, fw)
        assert type(res.out).__name__ == "FakeTensor" and res.block_scale.shape == (2, H // 128)


def test_documented():
    # The raw ops and each overload carry a docstring; the result type's fields show their types.
    import pydoc
    for packet in (torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant, torch.ops.fp8norm.rmsnorm_fp8_block_quant):
        assert "one memory pass" in packet.__doc__
        assert packet.out.__doc__.startswith("fp8norm::") and "one memory pass" in packet.default.__doc__
    text = pydoc.render_doc(BlockQuantized)
    assert "ForwardRef" not in text and "out: torch.Tensor" in text


def _hf_norm(h, eps):
    """Hugging Face's LlamaRMSNorm with a random weight."""
    norm = LlamaRMSNorm(h, eps)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(h) * 0.5 + 1)
    return norm


@pytest.mark.parametrize("device", DEVICES)
def test_module_matches_the_ops(device):
    torch_norm = nn.RMSNorm(H, eps=1e-5, device=device)
    with torch.no_grad():
        torch_norm.weight.copy_(torch.randn(H) * 0.5 + 1)
    for norm, eps in ((torch_norm, 1e-5), (_hf_norm(H, 1e-6).to(device), 1e-6)):
        mod = FusedAddRMSNormFP8.from_rmsnorm(norm, scale_layout="scaled_mm", scale_format="ue8m0")
        assert mod.weight.data_ptr() == norm.weight.data_ptr() and not mod.weight.requires_grad
        x, r, w = make_inputs(Case(device, torch.bfloat16, 5, H))
        r0 = r.clone()
        got = mod(x, r)  # grad mode on: the weight does not require grad, so the call runs
        conv = mod.norm_convention  # "torch", then "hf"
        check_contract(x, r0, norm.weight.detach(), eps, True, r, *got, norm_convention=conv)
        assert got.block_scale.stride() == block_scale_strides(5, H, "scaled_mm")
        got = mod(x)
        check_contract(x, None, norm.weight.detach(), eps, True, None, *got, norm_convention=conv)


def test_module_options_and_errors():
    mod = FusedAddRMSNormFP8.from_rmsnorm(nn.RMSNorm(256), normed=False)  # eps None: finfo(float32).eps
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    got = mod(x)
    assert got.normed is None
    want = torch_fp8norm.rmsnorm_fp8_block_quant(x, torch.ones(256), torch.finfo(torch.float32).eps)
    assert_fp8_equal(got.out, want.out, "out")
    assert "normed=False" in repr(mod)
    no_affine = FusedAddRMSNormFP8.from_rmsnorm(nn.RMSNorm(256, elementwise_affine=False))
    assert torch.equal(no_affine.weight, torch.ones(256))
    with pytest.raises(ValueError, match="only one dimension"):
        FusedAddRMSNormFP8.from_rmsnorm(nn.RMSNorm((2, 256)))
    # Norms that are not RMS norms are refused, not silently changed into one.
    for norm in (nn.LayerNorm(256), nn.LayerNorm(256, bias=False), nn.LayerNorm(256, elementwise_affine=False),
                 nn.GroupNorm(1, 256), nn.BatchNorm1d(256), nn.InstanceNorm1d(256, affine=True)):
        with pytest.raises(ValueError, match="subtracts the mean"):
            FusedAddRMSNormFP8.from_rmsnorm(norm)
    biased = _hf_norm(256, 1e-6)
    biased.bias = nn.Parameter(torch.zeros(256))
    with pytest.raises(ValueError, match="has a bias"):
        FusedAddRMSNormFP8.from_rmsnorm(biased)
    with pytest.raises(ValueError, match="Linear is not an RMS norm"):
        FusedAddRMSNormFP8.from_rmsnorm(nn.Linear(384, 384))
    with pytest.raises(RuntimeError, match="eps must be finite and >= 0"):
        FusedAddRMSNormFP8(256, eps=-1e-6)
    no_weight = nn.Module()
    no_weight.eps = 1e-6
    with pytest.raises(ValueError, match="no weight"):
        FusedAddRMSNormFP8.from_rmsnorm(no_weight)
    with pytest.raises(RuntimeError, match="multiple of 128"):
        FusedAddRMSNormFP8(200)
    with pytest.raises(RuntimeError, match="scale_format"):
        FusedAddRMSNormFP8(256, scale_format="ue8m0_pack")


@pytest.mark.parametrize("device", DEVICES)
def test_autograd_is_refused_and_versions_bumped(device):
    # The Python API is autograd-safe: a call autograd would record (grad mode on, an argument
    # requiring grad) raises at once, naming the argument, before anything is written; the
    # residual it updates gets its version counter bumped, as by torch's in-place ops.
    x, r, w = make_inputs(Case(device, torch.bfloat16, 6, 256))
    r0 = r.clone()
    mod = FusedAddRMSNormFP8(256, device=device, dtype=torch.bfloat16)
    calls = {
        "fused": lambda x, r, w, **o: torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r, w, **o),
        "plain": lambda x, r, w, **o: torch_fp8norm.rmsnorm_fp8_block_quant(x, w, **o),
        "module": lambda x, r, w, **o: mod(x, r),
    }
    options = ({}, dict(normed=False), dict(scale_format="ue8m0_packed"))
    for kind, call in calls.items():
        for o in options if kind != "module" else ({},):
            for name in ("input", "residual", "weight"):
                if (kind == "plain" and name == "residual") or (kind == "module" and name == "weight"):
                    continue
                args = {"input": x, "residual": r, "weight": w}
                args[name] = args[name].detach().clone().requires_grad_()
                with pytest.raises(RuntimeError, match=f"{name} requires grad, but these ops have no backward"):
                    call(args["input"], args["residual"], args["weight"], **o)
    mod.weight.requires_grad_(True)
    with pytest.raises(RuntimeError, match="weight requires grad"):
        mod(x, r)
    mod.weight.requires_grad_(False)
    assert torch.equal(r, r0)
    with torch.no_grad():  # a leaf that requires grad is fine there
        got = torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r, w.detach().clone().requires_grad_())
    assert not any(t.requires_grad for t in got)
    check_contract(x, r0, w, 1e-6, False, r, *got)
    # Versions: the residual's (a view's counter is its base's) once per call; nothing else's.
    for kind, call in calls.items():
        for o in options if kind != "module" else ({},):
            for lead in ((), (2, 3)):
                xv, rv = (x, r) if not lead else (x.view(*lead, 256), r.view(*lead, 256))
                before = [t._version for t in (r, x, w)]
                call(xv, rv, w, **o)
                bumped = 0 if kind == "plain" else 1
                assert [t._version for t in (r, x, w)] == [before[0] + bumped, *before[1:]], (kind, o, lead)
    with torch.inference_mode():  # inference tensors have no version counter; nothing to bump
        xi, ri, wi = x.clone(), r.clone(), w.clone()
        torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(xi, ri, wi)
    torch_fp8norm.rmsnorm_fp8_block_quant(xi, wi)  # outside inference mode too (its update is refused)


@pytest.mark.parametrize("device", DEVICES)
def test_raw_ops_have_engine_kernel_semantics(device):
    # The raw ops have no Autograd kernel: they run whatever grad mode and requires_grad say,
    # record nothing and bump no version counter (the Python API above does both).
    x, r, w = make_inputs(Case(device, torch.float32, 2, 128))
    out, s, n = (torch.empty_like(x, dtype=torch.float8_e4m3fn), torch.empty(2, 1, device=device),
                 torch.empty_like(x))
    wg = w.detach().clone().requires_grad_()
    r0 = r.clone()
    versions = [t._version for t in (r, out, s, n)]
    torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out(x, r, wg, out=out, block_scale=s, normed_out=n)
    assert [t._version for t in (r, out, s, n)] == versions
    check_contract(x, r0, w, 1e-6, False, r, out, s, n)
    got = torch.ops.fp8norm.rmsnorm_fp8_block_quant(x, wg)
    assert not any(t.requires_grad for t in got) and all(t.grad_fn is None for t in got)


@pytest.mark.parametrize("device", DEVICES[-1:])  # one compile: on CUDA where there is one (CI compiles on CPU)
def test_module_compiles_without_graph_break(device):
    torch._dynamo.reset()
    mod = FusedAddRMSNormFP8(H, scale_layout="row", normed=False, device=device, dtype=torch.bfloat16)
    f = torch.compile(mod, fullgraph=True)
    x, r, w = make_inputs(Case(device, torch.bfloat16, 4, H))
    r0 = r.clone()
    got = f(x.view(2, 2, H), r.view(2, 2, H))
    want = torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r0, mod.weight, scale_layout="row", normed=False)
    assert got.normed is None and got.out.shape == (2, 2, H)
    assert_fp8_equal(got.out.view(4, H), want.out, "out")
    assert_bitwise(got.block_scale.view(4, H // 128), want.block_scale, "block_scale")
    assert_bitwise(r, r0, "residual")


def test_readme_quick_use_runs():
    # The README's "Quick use" block, as written (on CUDA when present, else CPU).
    import pathlib
    text = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    start = text.index("```python\nimport torch, torch_fp8norm") + len("```python\n")
    scope = {}
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        exec(text[start:text.index("```", start)], scope)
    assert scope["q"].dtype == torch.float8_e4m3fn and scope["s"].stride() == (1, 4096)
    assert printed.getvalue() == "torch.float8_e4m3fn torch.Size([4096, 56]) (1, 4096)\n"  # as its comment says


def test_readme_set_up_commands_install_what_ci_installs():
    # The README's two set-up commands (CUDA build of torch; CPU only) install the packages .ci/run
    # installs, matplotlib (the benchmark's --plot) among them; the CPU-only one builds no CUDA.
    import pathlib
    import re
    root = pathlib.Path(__file__).parents[1]
    if not (root / ".ci" / "run").exists():
        pytest.skip("runs in the repository (this copy of the tests has no .ci/run)")
    commands = re.findall(r"```bash\n(python3 -m venv .venv .*)\n```", (root / "README.md").read_text())
    ci = re.search(r"pip install -q (torch==[\d.]+ [^\n]*)", (root / ".ci" / "run").read_text()).group(1).split()
    assert len(commands) == 2 and "matplotlib" in ci
    for command in commands:
        words = command.split()
        assert all(package in words for package in ci), (command, ci)
    assert "FP8NORM_CPU_ONLY=1" in commands[1] and "whl/cpu" in commands[1]
