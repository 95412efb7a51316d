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

static struct PyModuleDef native_module = {PyModuleDef_HEAD_INIT, "_native", "aioge's compiled kernels (see aioge.kernels.native)", -1, NULL};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&native_module); }
