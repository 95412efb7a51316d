/* Every allocation of the C tier goes through here, so a test can make one fail: after
 * aioge_fail_alloc(n), the nth allocation from then on returns NULL (once), and the kernel
 * that asked must report AIOGE_ENOMEM, never write a partial output and return success
 * (tests/engines/test_native_errors.py makes each allocation site fail in turn). One atomic
 * load per allocation; allocations sit at job entry, never in an inner loop. The kernels' work
 * buffers kept per thread (aioge_thread_scratch) are here too. */
#include <pthread.h>
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

/* This thread's work buffer ``slot`` (of SCRATCH_SLOTS) of at least n floats, 64-byte aligned,
 * kept from call to call (and freed with the thread): an allocation per call past glibc's mmap
 * threshold (128 KB at M = 512) paid its page faults every time. Slot 0 is the GEMM
 * accumulators' (tile.h), slot 1 gemm.c's weight copy, slot 2 a direct
 * conv's phase image of one image. NULL without memory. */
#define SCRATCH_SLOTS 3
struct scratch {
    float *buf[SCRATCH_SLOTS];
    size_t cap[SCRATCH_SLOTS];
};
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void free_scratch(void *p)
{
    struct scratch *a = p;
    for (int i = 0; i < SCRATCH_SLOTS; i++)
        free(a->buf[i]);
    free(a);
}

static void make_scratch_key(void) { pthread_key_create(&scratch_key, free_scratch); }

float *aioge_thread_scratch(int slot, size_t n)
{
    pthread_once(&scratch_once, make_scratch_key);
    struct scratch *a = pthread_getspecific(scratch_key);
    if (!a) {
        a = aioge_calloc(sizeof *a);
        if (!a || pthread_setspecific(scratch_key, a)) {
            free(a);
            return NULL;
        }
    }
    if (n > a->cap[slot]) {
        float *grown = aioge_aligned_alloc(64, n * sizeof(float));
        if (!grown)
            return NULL;
        free(a->buf[slot]);
        a->buf[slot] = grown;
        a->cap[slot] = n;
    }
    return a->buf[slot];
}
