/* Every allocation of the C tier goes through here, so a test can make one fail: after
 * aioge_fail_alloc(n), the nth allocation from then on returns NULL (once), and the kernel
 * that asked must report AIOGE_ENOMEM, never write a partial output and return success
 * (tests/engines/test_native_errors.py makes each allocation site fail in turn). One atomic
 * load per allocation; allocations sit at job entry, never in an inner loop. */
#include <stdatomic.h>
#include <stdlib.h>

#include "aioge.h"

static _Atomic int64_t fail_in; /* 0: never; n: the nth allocation from now fails */

void aioge_fail_alloc(int64_t nth) { atomic_store(&fail_in, nth > 0 ? nth : 0); }

static int failing(void)
{
    int64_t n = atomic_load_explicit(&fail_in, memory_order_relaxed);
    while (n > 0) {
        if (atomic_compare_exchange_weak(&fail_in, &n, n - 1))
            return n == 1;
    }
    return 0;
}

void *aioge_malloc(size_t n) { return failing() ? NULL : malloc(n ? n : 1); }

void *aioge_calloc(size_t n) { return failing() ? NULL : calloc(1, n ? n : 1); }

void *aioge_aligned_alloc(size_t align, size_t n)
{
    if (failing())
        return NULL;
    n = (n + align - 1) / align * align;
    return aligned_alloc(align, n ? n : align);
}
