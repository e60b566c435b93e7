#include "fp8norm.h"

#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <stdexcept>
#include <utility>

#include "numerics.h"

namespace fp8norm {

void fail(const std::string& message) { throw std::runtime_error(message); }

std::string to_str(torch::headeronly::IntHeaderOnlyArrayRef v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string device_str(const torch::stable::Device& d) {
  using torch::headeronly::DeviceType;
  const DeviceType t = d.type();
  std::string s = t == DeviceType::CPU    ? "cpu"
                  : t == DeviceType::CUDA ? "cuda"
                  : t == DeviceType::Meta ? "meta"
                                          : "device type " + std::to_string(static_cast<int>(t));
  if (t != DeviceType::CPU && d.has_index()) s += ":" + std::to_string(d.index());
  return s;
}

const char* dtype_str(ScalarType t) {
  switch (t) {
    case ScalarType::Byte: return "uint8";
    case ScalarType::Char: return "int8";
    case ScalarType::Short: return "int16";
    case ScalarType::Int: return "int32";
    case ScalarType::Long: return "int64";
    case ScalarType::Half: return "float16";
    case ScalarType::Float: return "float32";
    case ScalarType::Double: return "float64";
    case ScalarType::Bool: return "bool";
    case ScalarType::BFloat16: return "bfloat16";
    case ScalarType::Float8_e5m2: return "float8_e5m2";
    case ScalarType::Float8_e4m3fn: return "float8_e4m3fn";
    case ScalarType::Float8_e8m0fnu: return "float8_e8m0fnu";
    case ScalarType::Float4_e2m1fn_x2: return "float4_e2m1fn_x2";
    default: return torch::headeronly::toString(t);
  }
}

namespace {

// The dtype from the C shim's code, which is c10::ScalarType's value: Tensor::scalar_type() of the
// stable headers for torch 2.10 raises an unhelpful "Not yet supported ScalarType" for the dtypes
// they do not name (float8_e8m0fnu, float4_e2m1fn_x2), where the checks should name the argument.
ScalarType dtype_of(const Tensor& t) {
  int32_t code = 0;
  FP8NORM_SHIM_CHECK(aoti_torch_get_dtype(t.get(), &code));
  return static_cast<ScalarType>(code);
}

// What the checks and the kernels' arguments read of a tensor, read once: each read is a call
// into libtorch's C shim, and an op reads up to six tensors on every call.
struct Info {
  explicit Info(const Tensor& t) : dtype(dtype_of(t)), device(t.device()), data(t.data_ptr()) {
    int64_t* s = nullptr;
    int64_t* st = nullptr;
    FP8NORM_SHIM_CHECK(aoti_torch_get_dim(t.get(), &dim));
    FP8NORM_SHIM_CHECK(aoti_torch_get_sizes(t.get(), &s));
    FP8NORM_SHIM_CHECK(aoti_torch_get_strides(t.get(), &st));
    sizes = {s, static_cast<size_t>(dim)};
    strides = {st, static_cast<size_t>(dim)};
  }
  int64_t numel() const {
    int64_t n = 1;
    for (const int64_t size : sizes) n *= size;
    return n;
  }
  int64_t dim = 0;
  torch::headeronly::IntHeaderOnlyArrayRef sizes, strides;
  ScalarType dtype;
  torch::stable::Device device;
  void* data;
};

// After a failure while reading the tensors: torch passes None for a Tensor argument as an
// undefined tensor (torch's Python argument parsing maps None to one, for every op's Tensor
// arguments), whose dtype the stable ABI cannot name. Names the first undefined argument, if any;
// else returns, and the caller rethrows. Valid calls never get here.
void refuse_none(const char* op, std::initializer_list<std::pair<const char*, const Tensor*>> args) {
  for (const auto& [what, t] : args) {
    bool defined = true;
    if (t != nullptr) FP8NORM_SHIM_CHECK(aoti_torch_is_defined(t->get(), &defined));
    FP8NORM_CHECK(defined, op, ": ", what, " must be a Tensor, got None");
  }
}

bool is_activation_dtype(ScalarType t) {
  return t == ScalarType::Float || t == ScalarType::Half || t == ScalarType::BFloat16;
}

// The weight dtypes an input dtype takes, as error messages name them.
std::string weight_dtypes(ScalarType input) {
  return input == ScalarType::Float ? "float32 (input's)" : std::string(dtype_str(input)) + " (input's) or float32";
}

std::string eps_str(double eps) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", eps);
  return buf;
}

const char* format_name(Format f) {
  switch (f) {
    case Format::kFp8_1x128: return "fp8_1x128";
    case Format::kMxfp8: return "mxfp8";
    case Format::kMxfp4: return "mxfp4";
    case Format::kNvfp4: return "nvfp4";
  }
  return "?";
}

bool is_fp4(Format f) { return f == Format::kMxfp4 || f == Format::kNvfp4; }

// [M, H] tensor (or with cols, [M, cols], named `shape`) with a contiguous last dimension; `what`
// names the argument in messages.
void check_rows(const char* op, const char* what, const Info& t, const Info& input, ScalarType dtype,
                int64_t cols = -1, const char* shape = nullptr) {
  FP8NORM_CHECK(t.dim == 2, op, ": ", what, " must be 2-D ", shape ? shape : "[M, H]", ", got ", t.dim, "-D");
  FP8NORM_CHECK(t.device == input.device, op, ": ", what, " must be on ", device_str(input.device), " like input, got ",
                device_str(t.device));
  FP8NORM_CHECK(t.dtype == dtype, op, ": ", what, " must have dtype ", dtype_str(dtype), ", got ", dtype_str(t.dtype));
  if (cols < 0) {
    FP8NORM_CHECK(t.sizes[0] == input.sizes[0] && t.sizes[1] == input.sizes[1], op, ": ", what,
                  " must have the shape of input ", to_str(input.sizes), ", got ", to_str(t.sizes));
  } else {
    FP8NORM_CHECK(t.sizes[0] == input.sizes[0] && t.sizes[1] == cols, op, ": ", what, " must have shape ", shape,
                  " = [", input.sizes[0], ", ", cols, "], got ", to_str(t.sizes));
  }
  FP8NORM_CHECK(t.strides[1] == 1, op, ": ", what, " must have a contiguous last dimension (stride 1), got strides ",
                to_str(t.strides));
}

void check_inputs(const char* op, const Info& input, const Info* residual, const Info& weight, double eps,
                  Format format) {
  FP8NORM_CHECK(input.dim == 2, op, ": input must be 2-D [M, H], got ", input.dim, "-D");
  FP8NORM_CHECK(is_activation_dtype(input.dtype), op, ": input must be float16, bfloat16 or float32, got ",
                dtype_str(input.dtype));
  const int64_t H = input.sizes[1];
  const int block = format_block(format);
  FP8NORM_CHECK(H > 0 && H % block == 0, op, ": the hidden size H (input.size(1)) must be a positive multiple of ",
                block, format == Format::kFp8_1x128 ? "" : cat(" (format '", format_name(format), "')"), ", got ", H);
  FP8NORM_CHECK(input.strides[1] == 1, op, ": input must have a contiguous last dimension (stride 1), got strides ",
                to_str(input.strides));
  if (residual != nullptr) check_rows(op, "residual", *residual, input, input.dtype);
  FP8NORM_CHECK(weight.dim == 1, op, ": weight must be 1-D [H], got ", weight.dim, "-D");
  FP8NORM_CHECK(weight.device == input.device, op, ": weight must be on ", device_str(input.device),
                " like input, got ", device_str(weight.device));
  FP8NORM_CHECK(weight.dtype == input.dtype || weight.dtype == ScalarType::Float, op, ": weight must have dtype ",
                weight_dtypes(input.dtype), ", got ", dtype_str(weight.dtype));
  FP8NORM_CHECK(weight.sizes[0] == H, op, ": weight must have H = ", H, " elements, got ", weight.sizes[0]);
  FP8NORM_CHECK(weight.strides[0] == 1, op, ": weight must be contiguous, got stride ", weight.strides[0]);
  FP8NORM_CHECK(std::isfinite(eps) && eps >= 0, op, ": eps must be finite and >= 0, got ", eps_str(eps));
}

// The convention's two choices (row_args.h), before the dtype and the residual normalize them.
struct Convention {
  bool sum_f32, round_twice;
};

// None (the schemas' default: no string to convert on the common call) is "torch".
Convention parse_convention(const char* op, const OptString& conv) {
  if (!conv) return {false, false};
  const std::string& c = *conv;
  if (c == "torch") return {false, false};
  if (c == "hf") return {false, true};
  if (c == "vllm") return {true, true};
  if (c == "flashinfer") return {true, false};
  fail(cat(op, ": norm_convention must be one of 'torch', 'hf', 'vllm', 'flashinfer', got '", c, "'"));
  return {};
}

void check_fp8_block_scale(const char* op, const Info& input, const Quant& q, const Info& block_scale) {
  FP8NORM_CHECK(block_scale.dim == 2, op, ": block_scale must be 2-D [M, H/128], got ", block_scale.dim, "-D");
  FP8NORM_CHECK(block_scale.device == input.device, op, ": block_scale must be on ", device_str(input.device),
                " like input, got ", device_str(block_scale.device));
  const bool packed = block_scale.dtype == ScalarType::Int;
  if (q.packed < 0) {
    FP8NORM_CHECK(block_scale.dtype == ScalarType::Float || (packed && q.ue8m0), op,
                  ": block_scale must have dtype float32, or int32 (packed UE8M0 exponents) with "
                  "scale_ue8m0=True, got ",
                  dtype_str(block_scale.dtype), q.ue8m0 ? "" : " (scale_ue8m0=False)");
  } else {
    FP8NORM_CHECK(packed == (q.packed == 1) && (packed || block_scale.dtype == ScalarType::Float), op,
                  ": block_scale must have dtype ", q.packed ? "int32 (packed UE8M0 exponents)" : "float32",
                  " with scale_format '", q.packed ? "ue8m0_packed" : q.ue8m0 ? "ue8m0" : "fp32", "', got ",
                  dtype_str(block_scale.dtype));
  }
  const int64_t cols = packed ? (input.sizes[1] / kBlock + 3) / 4 : input.sizes[1] / kBlock;
  FP8NORM_CHECK(block_scale.sizes[0] == input.sizes[0] && block_scale.sizes[1] == cols, op,
                ": block_scale must have shape [M, ", packed ? "ceil(H/512)" : "H/128", "] = [", input.sizes[0], ", ",
                cols, "], got ", to_str(block_scale.sizes));
}

// The one-byte scales of the MX and NV formats, in the Quant's layout.
void check_byte_block_scale(const char* op, const Info& input, const Quant& q, const Info& block_scale) {
  const char* name = format_name(q.format);
  const ScalarType dtype = q.format == Format::kNvfp4 ? ScalarType::Float8_e4m3fn : ScalarType::Float8_e8m0fnu;
  const int block = format_block(q.format);
  const int64_t m = input.sizes[0], ks = input.sizes[1] / block;
  const std::string ks_name = cat("H/", block);
  FP8NORM_CHECK(block_scale.device == input.device, op, ": block_scale must be on ", device_str(input.device),
                " like input, got ", device_str(block_scale.device));
  FP8NORM_CHECK(block_scale.dtype == dtype, op, ": block_scale must have dtype ", dtype_str(dtype), " (format '", name,
                "'), got ", dtype_str(block_scale.dtype));
  if (q.layout == ScaleLayout::kRow) {
    const std::string shape = cat("[M, ", ks_name, "] (scale_layout 'row')");
    check_rows(op, "block_scale", block_scale, input, dtype, ks, shape.c_str());
    return;
  }
  const int64_t mp = (m + 127) / 128 * 128, kp = (ks + 3) / 4 * 4;
  FP8NORM_CHECK(block_scale.dim == 2 && block_scale.sizes[0] == mp && block_scale.sizes[1] == kp, op,
                ": block_scale must have shape [round_up(M, 128), round_up(", ks_name, ", 4)] = [", mp, ", ", kp,
                "] (scale_layout 'swizzled'), got ", to_str(block_scale.sizes));
  FP8NORM_CHECK(block_scale.numel() == 0 || (block_scale.strides[0] == kp && block_scale.strides[1] == 1), op,
                ": block_scale must be contiguous (scale_layout 'swizzled'), got strides ",
                to_str(block_scale.strides));
}

void check_global_scale(const char* op, const Info& input, const Info& g) {
  FP8NORM_CHECK(g.dtype == ScalarType::Float, op, ": global_scale must have dtype float32, got ", dtype_str(g.dtype));
  FP8NORM_CHECK(g.device == input.device, op, ": global_scale must be on ", device_str(input.device),
                " like input (the kernels read it there), got ", device_str(g.device));
  FP8NORM_CHECK(g.numel() == 1, op,
                ": global_scale must have one element (the per-tensor NVFP4 encode scale), got shape ",
                to_str(g.sizes));
}

void check_outputs(const char* op, const Info& input, const Quant& q, const Info& out, const Info& block_scale,
                   const Info* normed_out) {
  if (is_fp4(q.format)) {
    check_rows(op, "out", out, input, ScalarType::Float4_e2m1fn_x2, input.sizes[1] / 2, "[M, H/2]");
  } else {
    check_rows(op, "out", out, input, ScalarType::Float8_e4m3fn);
  }
  if (normed_out != nullptr) check_rows(op, "normed_out", *normed_out, input, input.dtype);
  if (q.format == Format::kFp8_1x128) {
    check_fp8_block_scale(op, input, q, block_scale);
  } else {
    check_byte_block_scale(op, input, q, block_scale);
  }
}

// The memory a tensor of at most two dimensions covers. Torch strides are never negative, so
// its bytes lie in [lo, hi). A "row" tensor (last dim contiguous) covers `rows` runs of
// `row_bytes` bytes, `row_step` bytes apart.
struct Footprint {
  uintptr_t lo = 0, hi = 0;
  bool empty = true;
  bool row_tensor = false;
  int64_t rows = 0, row_bytes = 0, row_step = 0;
};

// Bytes per element of the dtypes the checks accept.
int64_t item_size(ScalarType t) {
  switch (t) {
    case ScalarType::Float8_e4m3fn:
    case ScalarType::Float8_e8m0fnu:
    case ScalarType::Float4_e2m1fn_x2: return 1;
    case ScalarType::Half:
    case ScalarType::BFloat16: return 2;
    case ScalarType::Float:
    case ScalarType::Int: return 4;
    default: fail(std::string("fp8norm: internal error: no element size for dtype ") + dtype_str(t));
  }
  return 0;
}

Footprint footprint(const Info& t) {
  Footprint f;
  if (t.numel() == 0) return f;
  f.empty = false;
  const auto& sizes = t.sizes;
  const auto& strides = t.strides;
  const int64_t item = item_size(t.dtype);
  int64_t last = 0;
  for (size_t d = 0; d < sizes.size(); ++d) last += (sizes[d] - 1) * strides[d];
  f.lo = reinterpret_cast<uintptr_t>(t.data);
  f.hi = f.lo + static_cast<uintptr_t>((last + 1) * item);
  if (sizes.size() == 1 && strides[0] == 1) {
    f.row_tensor = true;
    f.rows = 1;
    f.row_bytes = sizes[0] * item;
  } else if (sizes.size() == 2 && (strides[1] == 1 || sizes[1] == 1)) {
    f.row_tensor = true;
    f.rows = sizes[0];
    f.row_bytes = sizes[1] * item;
    f.row_step = strides[0] * item;
  }
  return f;
}

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// Whether two footprints share a byte. Exact for two row tensors with the same row step (or
// a single row); conservative (true) for other layouts whose address ranges intersect.
bool overlaps(const Footprint& a, const Footprint& b) {
  if (a.empty || b.empty) return false;
  if (a.hi <= b.lo || b.hi <= a.lo) return false;
  if (!a.row_tensor || !b.row_tensor) return true;
  // Row i of a is [a.lo + i*step, +a.row_bytes); row j of b is [b.lo + j*step, +b.row_bytes).
  // With d = b.lo - a.lo and k = i - j, they meet iff d - a.row_bytes < k*step < d + b.row_bytes.
  const int64_t d = static_cast<int64_t>(b.lo - a.lo);  // wraps correctly for b.lo < a.lo
  if (a.rows == 1 && b.rows == 1) return d - a.row_bytes < 0 && 0 < d + b.row_bytes;
  if (a.rows > 1 && b.rows > 1 && a.row_step != b.row_step) return true;
  const int64_t step = a.rows > 1 ? a.row_step : b.row_step;
  if (step <= 0) return true;
  const int64_t k_lo = floor_div(d - a.row_bytes, step) + 1;
  const int64_t k_hi = -floor_div(-(d + b.row_bytes), step) - 1;
  const int64_t lo = std::max(k_lo, -(b.rows - 1));
  const int64_t hi = std::min(k_hi, a.rows - 1);
  return lo <= hi;
}

// Whether a written tensor has two elements at one address.
bool overlaps_itself(const Info& t) {
  if (t.numel() <= 1) return false;
  const auto& sizes = t.sizes;
  const auto& strides = t.strides;
  std::array<std::pair<int64_t, int64_t>, 2> dims;  // (stride, size) of the dims of size > 1
  size_t n = 0;                                      // (the op's tensors have at most two)
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] > 1) dims.at(n++) = {strides[d], sizes[d]};
  }
  if (n == 2 && dims[1] < dims[0]) std::swap(dims[0], dims[1]);  // by stride, then size
  int64_t span = 1;  // elements covered by the inner dims so far
  for (size_t i = 0; i < n; ++i) {
    const auto& [stride, size] = dims[i];
    if (stride < span) return true;  // conservative: inner dims not nested inside this stride
    span = stride * (size - 1) + span;
  }
  return false;
}

void check_no_overlap(const char* op, const Info& input, const Info* residual, const Info& weight, const Info& out,
                      const Info& block_scale, const Info* normed_out, const Info* global_scale) {
  struct Arg {
    const char* name;
    const Info* t;
    bool written;
  };
  std::array<Arg, 7> args;  // no allocation: this runs on every call
  size_t n = 0;
  args[n++] = {"input", &input, false};
  args[n++] = {"weight", &weight, false};
  if (global_scale != nullptr) args[n++] = {"global_scale", global_scale, false};
  if (residual != nullptr) args[n++] = {"residual", residual, true};
  args[n++] = {"out", &out, true};
  args[n++] = {"block_scale", &block_scale, true};
  if (normed_out != nullptr) args[n++] = {"normed_out", normed_out, true};

  std::array<Footprint, 7> prints;
  for (size_t k = 0; k < n; ++k) {
    const Arg& a = args[k];
    if (a.written) {
      FP8NORM_CHECK(!overlaps_itself(*a.t), op, ": ", a.name, " is written by this op, so each of its elements needs "
                    "memory of its own, but its strides ", to_str(a.t->strides), " for shape ", to_str(a.t->sizes),
                    " give several elements one address (an expanded or broadcast view?)");
    }
    prints[k] = footprint(*a.t);
  }
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      if (!args[i].written && !args[j].written) continue;
      FP8NORM_CHECK(!overlaps(prints[i], prints[j]), op, ": ", args[j].name, " overlaps ", args[i].name,
                    " in memory; ", args[j].written ? args[j].name : args[i].name,
                    " is written by this op, so it must not share memory with another argument");
    }
  }
}

RowArgs row_args(const Info& input, const Info* residual, const Info& weight, double eps, const Quant& q,
                 Convention conv, const Info& out, const Info& block_scale, const Info* normed_out,
                 const Info* global_scale) {
  RowArgs a;
  const bool two_bytes = input.dtype != ScalarType::Float;  // float32: each rounding is exact
  a.sum_f32 = conv.sum_f32 && two_bytes && residual != nullptr;
  a.round_twice = conv.round_twice && two_bytes;
  a.rows = input.sizes[0];
  a.hidden = input.sizes[1];
  a.input = input.data;
  a.input_stride = input.strides[0];
  if (residual != nullptr) {
    a.residual = residual->data;
    a.residual_stride = residual->strides[0];
  }
  a.weight = weight.data;
  a.weight_is_float = weight.dtype == ScalarType::Float;
  a.format = q.format;
  a.out = out.data;
  a.out_stride = out.strides[0];
  a.scale_packed = block_scale.dtype == ScalarType::Int;
  a.block_scale = static_cast<float*>(block_scale.data);
  a.scale_stride_row = block_scale.strides[0];
  a.scale_stride_col = block_scale.strides[1];
  a.scale_swizzled = q.format != Format::kFp8_1x128 && q.layout == ScaleLayout::kSwizzled;
  a.scale_k_tiles = (input.sizes[1] / format_block(q.format) + 3) / 4;
  a.scale_floor = q.floor;
  if (global_scale != nullptr) a.global_scale = static_cast<const float*>(global_scale->data);
  if (normed_out != nullptr) {
    a.normed = normed_out->data;
    a.normed_stride = normed_out->strides[0];
  }
  a.eps = static_cast<float>(eps);
  a.ue8m0 = q.ue8m0;
  return a;
}

Tensor empty_strided(std::array<int64_t, 2> sizes, std::array<int64_t, 2> strides, int32_t dtype, int32_t device_type,
                     int32_t device_index) {
  AtenTensorHandle handle = nullptr;
  FP8NORM_SHIM_CHECK(
      aoti_torch_empty_strided(2, sizes.data(), strides.data(), dtype, device_type, device_index, &handle));
  return Tensor(handle);
}

// The functional ops' outputs, on input's device (info: input's Info, read once already).
Outputs allocate_outputs(const Tensor& input, const Info& info, const Quant& q) {
  int32_t dtype = 0, device_type = 0;
  FP8NORM_SHIM_CHECK(aoti_torch_get_dtype(input.get(), &dtype));
  FP8NORM_SHIM_CHECK(aoti_torch_get_device_type(input.get(), &device_type));
  const int32_t device_index = info.device.index();
  const int64_t m = info.sizes[0], h = info.sizes[1];
  auto empty = [&](std::array<int64_t, 2> sizes, std::array<int64_t, 2> strides, int32_t dt) {
    return empty_strided(sizes, strides, dt, device_type, device_index);
  };
  // The shim's codes are c10::ScalarType's; torch 2.10's shim has no functions for these two.
  const int32_t e8m0 = static_cast<int32_t>(ScalarType::Float8_e8m0fnu);
  const int32_t e2m1x2 = static_cast<int32_t>(ScalarType::Float4_e2m1fn_x2);
  const int32_t e4m3 = aoti_torch_dtype_float8_e4m3fn();
  Tensor out = is_fp4(q.format) ? empty({m, h / 2}, {h / 2, 1}, e2m1x2) : empty({m, h}, {h, 1}, e4m3);
  Tensor normed = empty({m, h}, {h, 1}, dtype);
  if (q.format == Format::kFp8_1x128) {
    const bool packed = q.packed == 1;
    const int64_t cols = packed ? (h / kBlock + 3) / 4 : h / kBlock;
    // deepgemm: (1, round_up(M, 4)); scaled_mm: (1, max(M, 1)); row: contiguous.
    const int64_t col_stride = q.layout == ScaleLayout::kScaledMm ? std::max<int64_t>(m, 1) : scale_column_stride(m);
    const bool row = q.layout == ScaleLayout::kRow;
    Tensor scale = empty({m, cols}, {row ? cols : 1, row ? 1 : col_stride},
                         packed ? aoti_torch_dtype_int32() : aoti_torch_dtype_float32());
    return {std::move(out), std::move(scale), std::move(normed)};
  }
  const int32_t scale_dtype = q.format == Format::kNvfp4 ? e4m3 : e8m0;
  const int64_t ks = h / format_block(q.format);
  const int64_t rows = q.layout == ScaleLayout::kSwizzled ? (m + 127) / 128 * 128 : m;
  const int64_t cols = q.layout == ScaleLayout::kSwizzled ? (ks + 3) / 4 * 4 : ks;
  return {std::move(out), empty({rows, cols}, {cols, 1}, scale_dtype), std::move(normed)};
}

std::optional<Info> info_of(const Tensor* t) { return t != nullptr ? std::optional<Info>(*t) : std::nullopt; }
const Info* ptr(const std::optional<Info>& i) { return i ? &*i : nullptr; }

}  // namespace

RowArgs prepare(const char* op, const Tensor& input, const Tensor* residual, const Tensor& weight, double eps,
                const Quant& quant, const OptString& norm_convention, const Tensor& out, const Tensor& block_scale,
                const OptTensor& normed_out) {
  const Tensor* n_t = normed_out ? &*normed_out : nullptr;
  try {
    const Convention conv = parse_convention(op, norm_convention);
    const Info i(input), w(weight), o(out), s(block_scale);
    const std::optional<Info> r = info_of(residual), n = info_of(n_t), g = info_of(quant.global_scale);
    check_inputs(op, i, ptr(r), w, eps, quant.format);
    if (g) check_global_scale(op, i, *g);
    check_outputs(op, i, quant, o, s, ptr(n));
    check_no_overlap(op, i, ptr(r), w, o, s, ptr(n), ptr(g));
    return row_args(i, ptr(r), w, eps, quant, conv, o, s, ptr(n), ptr(g));
  } catch (const std::exception&) {
    refuse_none(op, {{"input", &input}, {"residual", residual}, {"weight", &weight}, {"out", &out},
                     {"block_scale", &block_scale}, {"normed_out", n_t}, {"global_scale", quant.global_scale}});
    throw;
  }
}

std::pair<RowArgs, Outputs> prepare_functional(const char* op, const Tensor& input, const Tensor* residual,
                                               const Tensor& weight, double eps, const Quant& quant,
                                               const OptString& norm_convention) {
  try {
    const Convention conv = parse_convention(op, norm_convention);
    const Info i(input), w(weight);
    const std::optional<Info> r = info_of(residual), g = info_of(quant.global_scale);
    check_inputs(op, i, ptr(r), w, eps, quant.format);
    if (g) check_global_scale(op, i, *g);
    Outputs outs = allocate_outputs(input, i, quant);
    const Info o(std::get<0>(outs)), s(std::get<1>(outs)), n(std::get<2>(outs));
    check_no_overlap(op, i, ptr(r), w, o, s, &n, ptr(g));  // the residual against input, weight, global_scale
    return {row_args(i, ptr(r), w, eps, quant, conv, o, s, &n, ptr(g)), std::move(outs)};
  } catch (const std::exception&) {
    refuse_none(op, {{"input", &input}, {"residual", residual}, {"weight", &weight},
                     {"global_scale", quant.global_scale}});
    throw;
  }
}

Quant parse_quant(const char* op, const std::string& format, const OptString& scale_layout,
                  const OptString& scale_format, const OptString& scale_mode, const OptTensor& global_scale) {
  Quant q;
  if (format == "fp8_1x128") {
    q.format = Format::kFp8_1x128;
  } else if (format == "mxfp8") {
    q.format = Format::kMxfp8;
  } else if (format == "mxfp4") {
    q.format = Format::kMxfp4;
  } else if (format == "nvfp4") {
    q.format = Format::kNvfp4;
  } else {
    fail(cat(op, ": format must be one of 'fp8_1x128', 'mxfp8', 'mxfp4', 'nvfp4', got '", format, "'"));
  }
  const bool fp8 = q.format == Format::kFp8_1x128, mx = q.format == Format::kMxfp8 || q.format == Format::kMxfp4;
  const char* name = format_name(q.format);
  q.layout = fp8 ? ScaleLayout::kDeepgemm : ScaleLayout::kSwizzled;
  if (scale_layout) {
    const std::string& l = *scale_layout;
    if (fp8 && (l == "deepgemm" || l == "scaled_mm" || l == "row")) {
      q.layout = l == "row" ? ScaleLayout::kRow : l == "scaled_mm" ? ScaleLayout::kScaledMm : ScaleLayout::kDeepgemm;
    } else if (!fp8 && (l == "swizzled" || l == "row")) {
      q.layout = l == "row" ? ScaleLayout::kRow : ScaleLayout::kSwizzled;
    } else {
      fail(cat(op, ": scale_layout must be one of ", fp8 ? "'deepgemm', 'scaled_mm', 'row'" : "'swizzled', 'row'",
               " for format '", name, "', got '", l, "'"));
    }
  }
  if (fp8) q.packed = 0;
  if (scale_format) {
    const std::string& f = *scale_format;
    FP8NORM_CHECK(fp8, op, ": scale_format applies to format 'fp8_1x128' only (format '", name,
                  "' has its own scale dtype), got '", f, "'");
    FP8NORM_CHECK(f == "fp32" || f == "ue8m0" || f == "ue8m0_packed", op,
                  ": scale_format must be one of 'fp32', 'ue8m0', 'ue8m0_packed', got '", f, "'");
    q.ue8m0 = f != "fp32";
    q.packed = f == "ue8m0_packed" ? 1 : 0;
  }
  if (scale_mode) {
    const std::string& m = *scale_mode;
    FP8NORM_CHECK(mx, op, ": scale_mode applies to the MX formats only ('mxfp8', 'mxfp4'), got '", m,
                  "' with format '", name, "'");
    FP8NORM_CHECK(m == "rceil" || m == "floor", op, ": scale_mode must be one of 'rceil', 'floor', got '", m, "'");
    q.floor = m == "floor";
  }
  if (q.format == Format::kNvfp4) {
    FP8NORM_CHECK(global_scale.has_value(), op,
                  ": format 'nvfp4' needs global_scale (a float32 tensor of one element: the encode scale "
                  "448 * 6 / amax of the tensor)");
    q.global_scale = &*global_scale;
  } else {
    FP8NORM_CHECK(!global_scale.has_value(), op, ": global_scale applies to format 'nvfp4' only, got one with format '",
                  name, "'");
  }
  return q;
}

}  // namespace fp8norm
