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

static struct PyModuleDef native_module = {PyModuleDef_HEAD_INIT, "_native", "aioge's compiled kernels (see aioge.kernels.native)", -1, NULL};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&native_module); }
