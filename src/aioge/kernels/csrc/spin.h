/* A waiting thread's two tools, one copy for par.c's split helpers, queue.c's runners and rnn.c's
 * step barrier: the CPU's spin-wait hint, and the monotonic clock in nanoseconds. */
#ifndef AIOGE_SPIN_H
#define AIOGE_SPIN_H
#include <sched.h>
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

/* Whether a spinning thread should sched_yield between looks: under a real-time policy (chrt
 * -f) only, where a thread of equal priority on its CPU runs only when the spinner yields. Under
 * SCHED_OTHER (EEVDF, Linux 6.6 on) each yield moves the yielder's deadline a slice later: beside
 * a CPU-bound process a thread that spins and yields got 0.1% of its CPU, so a job posted to a
 * spinning helper or runner waited slices for it (busy4). */
static inline int aioge_spin_yields(void)
{
#ifdef __linux__
    const int p = sched_getscheduler(0);
    return p == SCHED_FIFO || p == SCHED_RR;
#else
    return 1;
#endif
}
#endif
