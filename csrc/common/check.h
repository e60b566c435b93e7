// Errors of the fp8norm libraries: a std::runtime_error carrying exactly the message (torch turns
// it into a RuntimeError). Messages are assembled from strings and integers by cat(), not by
// torch's STD_TORCH_CHECK, which prefixes the C++ function, file and line. No torch header: the
// kernel translation units include this too.
#pragma once

#include <string>
#include <type_traits>

namespace fp8norm {

[[noreturn]] void fail(const std::string& message);

inline void append(std::string& s, const char* v) { s += v; }
inline void append(std::string& s, const std::string& v) { s += v; }
template <typename I, typename = std::enable_if_t<std::is_integral_v<I>>>
void append(std::string& s, I v) {
  s += std::to_string(v);
}

template <typename... A>
std::string cat(const A&... parts) {
  std::string s;
  (append(s, parts), ...);
  return s;
}

}  // namespace fp8norm

#define FP8NORM_CHECK(cond, ...)                    \
  do {                                              \
    if (!(cond)) {                                  \
      ::fp8norm::fail(::fp8norm::cat(__VA_ARGS__)); \
    }                                               \
  } while (0)
