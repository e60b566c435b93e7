#include "fp8norm.h"

#include <ATen/ATen.h>
#include <c10/core/SymBool.h>
#include <c10/util/irange.h>

#include <algorithm>
#include <array>
#include <utility>

#include "numerics.h"

namespace fp8norm {

std::string to_str(int64_t v) { return std::to_string(v); }

std::string to_str(const c10::SymInt& v) {
  if (auto i = v.maybe_as_int()) return std::to_string(*i);
  return v.toSymNodeImplUnowned()->str();
}

template <typename R>
static std::string list_str(R values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + to_str(values[i]);
  return s + "]";
}
std::string to_str(c10::IntArrayRef v) { return list_str(v); }
std::string to_str(c10::SymIntArrayRef v) { return list_str(v); }

namespace {

bool is_activation_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16;
}

// [M, H] tensor with a contiguous last dimension; `what` names the argument in messages.
void check_rows(const char* op, const char* what, const at::Tensor& t, const at::Tensor& input,
                at::ScalarType dtype) {
  TORCH_CHECK(t.dim() == 2, op, ": ", what, " must be 2-D [M, H], got ", to_str(t.dim()), "-D");
  TORCH_CHECK(t.device() == input.device(), op, ": ", what, " must be on ", input.device().str(),
              " like input, got ", t.device().str());
  TORCH_CHECK(t.scalar_type() == dtype, op, ": ", what, " must have dtype ", dtype, ", got ",
              t.scalar_type());
  TORCH_SYM_CHECK(t.sym_size(0).sym_eq(input.sym_size(0)).sym_and(t.sym_size(1).sym_eq(input.sym_size(1))),
                  op, ": ", what, " must have the shape of input ", to_str(input.sym_sizes()), ", got ",
                  to_str(t.sym_sizes()));
  TORCH_SYM_CHECK(t.sym_stride(1).sym_eq(1), op, ": ", what,
                  " must have a contiguous last dimension (stride 1), got strides ",
                  to_str(t.sym_strides()));
}

}  // namespace

void check_inputs(const char* op, const at::Tensor& input, const at::Tensor* residual,
                  const at::Tensor& weight) {
  TORCH_CHECK(input.dim() == 2, op, ": input must be 2-D [M, H], got ", to_str(input.dim()), "-D");
  TORCH_CHECK(is_activation_dtype(input.scalar_type()), op,
              ": input must be float16, bfloat16 or float32, got ", input.scalar_type());
  const c10::SymInt& H = input.sym_size(1);
  TORCH_SYM_CHECK(H.sym_gt(0).sym_and((H % kBlock).sym_eq(0)), op,
                  ": the hidden size H (input.size(1)) must be a positive multiple of 128, got ",
                  to_str(H));
  TORCH_SYM_CHECK(input.sym_stride(1).sym_eq(1), op,
                  ": input must have a contiguous last dimension (stride 1), got strides ",
                  to_str(input.sym_strides()));
  if (residual != nullptr) check_rows(op, "residual", *residual, input, input.scalar_type());
  TORCH_CHECK(weight.dim() == 1, op, ": weight must be 1-D [H], got ", to_str(weight.dim()), "-D");
  TORCH_CHECK(weight.device() == input.device(), op, ": weight must be on ", input.device().str(),
              " like input, got ", weight.device().str());
  TORCH_CHECK(weight.scalar_type() == input.scalar_type() || weight.scalar_type() == at::kFloat, op,
              ": weight must have input's dtype (", input.scalar_type(), ") or float32, got ",
              weight.scalar_type());
  TORCH_SYM_CHECK(weight.sym_size(0).sym_eq(H), op, ": weight must have H = ", to_str(H),
                  " elements, got ", to_str(weight.sym_size(0)));
  TORCH_SYM_CHECK(weight.sym_stride(0).sym_eq(1), op, ": weight must be contiguous, got stride ",
                  to_str(weight.sym_stride(0)));
}

void check_outputs(const char* op, const at::Tensor& input, bool scale_ue8m0, const at::Tensor& out,
                   const at::Tensor& block_scale, const std::optional<at::Tensor>& normed_out) {
  check_rows(op, "out", out, input, at::kFloat8_e4m3fn);
  if (normed_out.has_value()) check_rows(op, "normed_out", *normed_out, input, input.scalar_type());
  TORCH_CHECK(block_scale.dim() == 2, op, ": block_scale must be 2-D [M, H/128], got ",
              to_str(block_scale.dim()), "-D");
  TORCH_CHECK(block_scale.device() == input.device(), op, ": block_scale must be on ",
              input.device().str(), " like input, got ", block_scale.device().str());
  const bool packed = block_scale.scalar_type() == at::kInt;
  TORCH_CHECK(block_scale.scalar_type() == at::kFloat || (packed && scale_ue8m0), op,
              ": block_scale must have dtype float32, or int32 (packed UE8M0 exponents) with scale_ue8m0=True, got ",
              block_scale.scalar_type(), scale_ue8m0 ? "" : " (scale_ue8m0=False)");
  const c10::SymInt cols = packed ? (input.sym_size(1) / kBlock + 3) / 4 : input.sym_size(1) / kBlock;
  TORCH_SYM_CHECK(block_scale.sym_size(0).sym_eq(input.sym_size(0)).sym_and(block_scale.sym_size(1).sym_eq(cols)),
                  op, ": block_scale must have shape [M, ", packed ? "ceil(H/512)" : "H/128", "] = [",
                  to_str(input.sym_size(0)), ", ", to_str(cols), "], got ", to_str(block_scale.sym_sizes()));
}

namespace {

// The memory a tensor of at most two dimensions covers. Torch strides are never negative, so
// its bytes lie in [lo, hi). A "row" tensor (last dim contiguous) covers `rows` runs of
// `row_bytes` bytes, `row_step` bytes apart.
struct Footprint {
  uintptr_t lo = 0, hi = 0;
  bool empty = true;
  bool row_tensor = false;
  int64_t rows = 0, row_bytes = 0, row_step = 0;
};

Footprint footprint(const at::Tensor& t) {
  Footprint f;
  if (t.numel() == 0) return f;
  f.empty = false;
  const int64_t item = static_cast<int64_t>(t.element_size());
  int64_t last = 0;
  for (const auto d : c10::irange(t.dim())) last += (t.size(d) - 1) * t.stride(d);
  f.lo = reinterpret_cast<uintptr_t>(t.data_ptr());
  f.hi = f.lo + static_cast<uintptr_t>((last + 1) * item);
  if (t.dim() == 1 && t.stride(0) == 1) {
    f.row_tensor = true;
    f.rows = 1;
    f.row_bytes = t.size(0) * item;
  } else if (t.dim() == 2 && (t.stride(1) == 1 || t.size(1) == 1)) {
    f.row_tensor = true;
    f.rows = t.size(0);
    f.row_bytes = t.size(1) * item;
    f.row_step = t.stride(0) * item;
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
bool overlaps_itself(const at::Tensor& t) {
  if (t.numel() <= 1) return false;
  std::array<std::pair<int64_t, int64_t>, 2> dims;  // (stride, size) of the dims of size > 1
  size_t n = 0;                                      // (the op's tensors have at most two)
  for (const auto d : c10::irange(t.dim())) {
    if (t.size(d) > 1) dims.at(n++) = {t.stride(d), t.size(d)};
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

}  // namespace

void check_no_overlap(const char* op, const at::Tensor& input, const at::Tensor* residual,
                      const at::Tensor& weight, const at::Tensor& out,
                      const at::Tensor& block_scale, const std::optional<at::Tensor>& normed_out) {
  struct Arg {
    const char* name;
    const at::Tensor* t;
    bool written;
  };
  std::array<Arg, 6> args;  // no allocation: this runs on every call
  size_t n = 0;
  args[n++] = {"input", &input, false};
  args[n++] = {"weight", &weight, false};
  if (residual != nullptr) args[n++] = {"residual", residual, true};
  args[n++] = {"out", &out, true};
  args[n++] = {"block_scale", &block_scale, true};
  if (normed_out.has_value()) args[n++] = {"normed_out", &*normed_out, true};

  std::array<Footprint, 6> prints;
  for (size_t k = 0; k < n; ++k) {
    const Arg& a = args[k];
    if (a.written) {
      TORCH_CHECK(!overlaps_itself(*a.t), op, ": ", a.name,
                  " has overlapping elements (its strides ", to_str(a.t->strides()),
                  " map two elements to one address); it is written, so it must not");
    }
    prints[k] = footprint(*a.t);
  }
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      if (!args[i].written && !args[j].written) continue;
      TORCH_CHECK(!overlaps(prints[i], prints[j]), op, ": ", args[j].name, " overlaps ",
                  args[i].name, " in memory; ", args[j].written ? args[j].name : args[i].name,
                  " is written by this op, so it must not share memory with another argument");
    }
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> allocate_outputs(const at::Tensor& input) {
  const c10::SymInt M = input.sym_size(0);
  const c10::SymInt H = input.sym_size(1);
  at::Tensor out = at::empty_symint({M, H}, input.options().dtype(at::kFloat8_e4m3fn));
  at::Tensor block_scale = at::empty_strided_symint({M, H / kBlock}, {1, scale_column_stride(M)},
                                                    input.options().dtype(at::kFloat));
  at::Tensor normed = at::empty_symint({M, H}, input.options());
  return {out, block_scale, normed};
}

RowArgs prepare(const char* op, const at::Tensor& input, const at::Tensor* residual,
                const at::Tensor& weight, double eps, bool scale_ue8m0, const at::Tensor& out,
                const at::Tensor& block_scale, const std::optional<at::Tensor>& normed_out) {
  check_inputs(op, input, residual, weight);
  check_outputs(op, input, scale_ue8m0, out, block_scale, normed_out);
  check_no_overlap(op, input, residual, weight, out, block_scale, normed_out);
  return row_args(input, residual, weight, eps, scale_ue8m0, out, block_scale, normed_out);
}

RowArgs row_args(const at::Tensor& input, const at::Tensor* residual, const at::Tensor& weight, double eps,
                 bool scale_ue8m0, const at::Tensor& out, const at::Tensor& block_scale,
                 const std::optional<at::Tensor>& normed_out) {
  RowArgs a;
  a.rows = input.size(0);
  a.hidden = input.size(1);
  a.input = input.data_ptr();
  a.input_stride = input.stride(0);
  if (residual != nullptr) {
    a.residual = residual->data_ptr();
    a.residual_stride = residual->stride(0);
  }
  a.weight = weight.data_ptr();
  a.weight_is_float = weight.scalar_type() == at::kFloat;
  a.out = out.data_ptr();
  a.out_stride = out.stride(0);
  a.scale_packed = block_scale.scalar_type() == at::kInt;
  a.block_scale = static_cast<float*>(block_scale.data_ptr());
  a.scale_stride_row = block_scale.stride(0);
  a.scale_stride_col = block_scale.stride(1);
  if (normed_out.has_value()) {
    a.normed = normed_out->data_ptr();
    a.normed_stride = normed_out->stride(0);
  }
  a.eps = static_cast<float>(eps);
  a.ue8m0 = scale_ue8m0;
  return a;
}

}  // namespace fp8norm
