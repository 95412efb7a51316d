/* aioge.kernels._native: kernels compiled at install time, called through ctypes.
 *
 * The extension module itself is empty: Python imports it only so the loader finds the shared
 * object the build put beside the package; aioge.kernels.native opens that file with ctypes and
 * calls the plain C functions the other files of this folder export (ctypes releases the GIL for
 * the length of each call, so two threads run two halves of a kernel at once).
 *
 * Every function takes raw pointers to C-contiguous float32 arrays plus their sizes; the Python
 * side checks dtypes, contiguity and shapes before calling. ABI bumps when any signature changes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "aioge.h"

int aioge_native_abi(void) { return AIOGE_ABI; }

int64_t aioge_native_isa(void)
{
    int64_t isa = 0;
#ifdef __AVX__
    isa |= 1 << 0;
#endif
#ifdef __AVX2__
    isa |= 1 << 1;
#endif
#ifdef __FMA__
    isa |= 1 << 2;
#endif
#ifdef __AVX512F__
    isa |= 1 << 3;
#endif
#ifdef __AVX512BW__
    isa |= 1 << 4;
#endif
#ifdef __AVX512VL__
    isa |= 1 << 5;
#endif
#ifdef __AVX512BF16__
    isa |= 1 << 6;
#endif
#ifdef __AVX512VNNI__
    isa |= 1 << 7;
#endif
#if defined(__ARM_NEON) && defined(__aarch64__)
    isa |= 1 << 8;
#endif
    return isa;
}

/* What this CPU runs, in aioge_native_isa's bits, from CPUID (so right under an emulator too,
 * whose /proc/cpuinfo is the host's): avx2 stands for all of x86-64-v3 and avx512f for all of
 * x86-64-v4, the -march levels of setup.py's tiers. -1 off x86 (Python reads /proc/cpuinfo).
 * Compiled into every tier, but only the baseline tier's is called before a tier is chosen. */
int64_t aioge_cpu_isa(void)
{
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HAS(name, bit) ((int64_t)(__builtin_cpu_supports(name) != 0) << (bit))
    __builtin_cpu_init();
    return HAS("avx", 0) | HAS("x86-64-v3", 1) | HAS("fma", 2) | HAS("x86-64-v4", 3) | HAS("avx512bw", 4) |
           HAS("avx512vl", 5) | HAS("avx512bf16", 6) | HAS("avx512vnni", 7);
#undef HAS
#else
    return -1;
#endif
}

/* Each ISA tier is its own extension module (setup.py names it with -DAIOGE_MODULE). */
#ifndef AIOGE_MODULE
#define AIOGE_MODULE _native
#endif
#define AIOGE_STR2(m) #m
#define AIOGE_STR(m) AIOGE_STR2(m)
#define AIOGE_INIT2(m) PyInit_##m
#define AIOGE_INIT(m) AIOGE_INIT2(m)

static struct PyModuleDef native_module = {PyModuleDef_HEAD_INIT, AIOGE_STR(AIOGE_MODULE), "aioge's compiled kernels (see aioge.kernels.native)", -1, NULL};

PyMODINIT_FUNC AIOGE_INIT(AIOGE_MODULE)(void) { return PyModule_Create(&native_module); }
