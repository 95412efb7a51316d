/* Where the C tier's waiting threads run: par.c's split helpers and queue.c's runners are
 * kept off the CPU of the caller that wakes them (aioge_keep_off), within the CPUs the process
 * may use (taskset, cpusets: read once). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#include "aioge.h"

#ifdef __linux__
static cpu_set_t allowed; /* the process's CPUs, read once */
static int have_allowed;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void read_allowed(void)
{
    have_allowed = sched_getaffinity(0, sizeof allowed, &allowed) == 0;
    if (!have_allowed)
        CPU_ZERO(&allowed);
}
#endif

/* How many CPUs the process may use, 0 unknown. */
int aioge_allowed_cpus(void)
{
#ifdef __linux__
    pthread_once(&once, read_allowed);
    return have_allowed ? CPU_COUNT(&allowed) : 0;
#else
    return 0;
#endif
}

/* A thread that waits for work from a caller on `cpu` (a split's helper, a program queue's
 * runner) would, spinning on that CPU, only run when the caller yields it, and asleep it is woken
 * onto the waker's CPU (the scheduler packs threads onto few vCPUs here: sched_vcpu_pack) and
 * shares it with the caller, while the other vCPU idles, for as long as the scheduler finds it
 * cache-hot: 12 ms of a 14 ms program-queue burst. So let thread `tid` (last seen on `at`, -1
 * asleep or unknown) run anywhere but there. The scheduler moves it at once; the set stays
 * until a caller on another CPU finds the thread beside it (*excluded: the CPU its set leaves
 * out, -1 none). */
void aioge_keep_off(int tid, int at, int cpu, _Atomic int *excluded)
{
#ifdef __linux__
    pthread_once(&once, read_allowed);
    if (cpu < 0 || tid <= 0 || (at != cpu && at != -1) || atomic_load(excluded) == cpu)
        return;
    cpu_set_t set = allowed; /* never a CPU the process may not use */
    if (cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &set))
        return;
    CPU_CLR(cpu, &set);
    if (CPU_COUNT(&set) == 0)
        return;
    atomic_store(excluded, cpu);
    sched_setaffinity(tid, sizeof set, &set);
#else
    (void)tid;
    (void)at;
    (void)cpu;
    (void)excluded;
#endif
}

/* The CPU this thread runs on, -1 unknown. */
int aioge_this_cpu(void)
{
#ifdef __linux__
    return sched_getcpu();
#else
    return -1;
#endif
}
