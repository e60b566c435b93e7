// Force-included (-include) into every C++ and CUDA host translation unit, so that the libraries
// need nothing newer than glibc 2.28 and libstdc++ 3.4.24 (manylinux_2_28, as torch's own wheels),
// although built with a newer toolchain. glibc 2.34 gave dlsym (torch's stable headers look up
// newer shim functions with it) and pthread_once (libstdc++'s call_once) new symbol versions:
// bind them to the versions every x86-64 glibc has. libstdc++'s reference-count fast path reads
// glibc 2.32's __libc_single_threaded: it reads a variable of ours instead (compat.cpp: 0, "may be
// multi-threaded", so it always takes the atomic path).
#pragma once
#if defined(__linux__) && defined(__x86_64__) && !defined(__CUDA_ARCH__)
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
__asm__(".symver pthread_once,pthread_once@GLIBC_2.2.5");
#define __libc_single_threaded fp8norm_libc_single_threaded
#endif
