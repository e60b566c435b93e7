// The definitions glibc_2_28.h's bindings need, compiled into each library (exports.map keeps
// them, like everything but PyInit_*, local to it).
#include <sstream>

#if defined(__linux__) && defined(__x86_64__)
// libstdc++'s reference counts take the atomic path (glibc_2_28.h).
extern "C" {
char fp8norm_libc_single_threaded = 0;
}
#endif

// The string streams torch's stable headers build error messages with: instantiated here rather
// than taken from libstdc++, whose C++20 members (basic_stringbuf::str() const&, the default
// constructors) carry GLIBCXX_3.4.26 and 3.4.29.
template class std::basic_stringbuf<char>;
template class std::basic_ostringstream<char>;
template class std::basic_stringstream<char>;
