// The CPU kernel of both ops (registered in csrc/registration.cpp).
#pragma once

#include "../common/fp8norm.h"

namespace fp8norm {
namespace cpu {

// Runs the op on arguments prepare() has checked.
void run(const RowArgs& a, const Tensor& input);

}  // namespace cpu
}  // namespace fp8norm
