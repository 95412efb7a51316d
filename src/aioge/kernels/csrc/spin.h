/* A waiting thread's two tools, one copy for par.c's split helpers, queue.c's runners and rnn.c's
 * step barrier: the CPU's spin-wait hint, and the monotonic clock in nanoseconds. */
#ifndef AIOGE_SPIN_H
#define AIOGE_SPIN_H
#include <stdint.h>
#include <time.h>

static inline void aioge_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static inline int64_t aioge_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}
#endif
