/* A queue of native programs with runner threads of its own (runtime.native_program).
 *
 * Concurrent callers of a small graph on an event loop spend part of each request in Python
 * (the task switch, the feed check, staging, copying outputs) and part in their program's C
 * jobs. Run one after the other on the loop's thread, the second core idles while Python runs;
 * run in synchronous groups it idled while the group's callers ran their Python (the builder
 * CNN's 64 callers: about 24K requests/s where a balance of both would give 31K). Here a
 * caller pushes its staged program and goes back to the loop; runner threads (the cores less
 * one) take programs off the queue as soon as they arrive and never wait for Python. The loop's
 * thread may take one too (aioge_queue_take) when the queue grows: whichever side is behind
 * gets help.
 *
 * A program is a record of six int64 (entries, count, failed, result, split, ns; NativeProgram's
 * record_address): the runner runs aioge_run_jobs(entries, count, split, failed), stores the
 * run's nanoseconds at ns and what it returns at result. A lone caller's long program comes
 * with split set (its big jobs split over par.c's helper): the runner, a C thread that spins
 * after each program, starts it without a Python thread's wake-up, and the loop learns of its
 * end from the eventfd, written before any Python runs (a lane hands back through the GIL and
 * the loop's self-pipe). The caller keeps the record and everything it points at alive until its result
 * is in. Completions are counted; the event loop learns of them through an eventfd (a pipe
 * off Linux), written only when a waiter armed it (aioge_queue_arm), so a busy loop pays no
 * system call per program.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/eventfd.h>
#endif

#include "aioge.h"
#include "spin.h"

#define QCAP 256     /* programs queued at most (a session lets 2 x cores runs in flight) */
#define RUNNERS 8    /* runner threads at most */
#define QSPIN_US 300 /* how long an idle runner spins before it sleeps (as par.c's helper) */
#define QDESCHED_NS 200000LL /* a spinning runner that went this long between two looks sleeps */


/* A runner thread: where it is, for a pusher to keep it off the pusher's CPU (aioge_keep_off). */
struct runner {
    struct queue *q;
    pthread_t thread;
    _Atomic int tid;
    _Atomic int cpu;      /* where it last ran a program or looked for work, -1 asleep or unknown */
    _Atomic int excluded; /* the CPU its affinity leaves out, -1 none */
    _Atomic int splitting; /* it runs (or last ran) a split program: a lone caller's, who sleeps meanwhile */
};

struct queue {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t *slots[QCAP];
    _Atomic int64_t head, tail; /* taken, pushed (both under mu; read without it to spin) */
    _Atomic int64_t completed;
    _Atomic int armed;
    _Atomic int sleepers;
    _Atomic int stop;
    int efd, wfd, nrunners; /* read and write ends: one eventfd, or a pipe where there is none */
#ifdef __linux__
    cpu_set_t all; /* the creating thread's CPUs: a runner let back onto every one */
    int have_all;
#endif
    struct runner runners[RUNNERS];
};

/* The oldest queued record, taken off the queue; NULL when none is, or (whole_only) when the
 * oldest splits: the loop's thread must not run a long program. */
static int64_t *q_pop(struct queue *q, int whole_only)
{
    int64_t *r = NULL;
    pthread_mutex_lock(&q->mu);
    const int64_t h = atomic_load(&q->head);
    if (h < atomic_load(&q->tail) && !(whole_only && q->slots[h % QCAP][4])) {
        r = q->slots[h % QCAP];
        atomic_store(&q->head, h + 1);
    }
    pthread_mutex_unlock(&q->mu);
    return r;
}

static void q_run(struct queue *q, int64_t *r)
{
    const int64_t t0 = aioge_now_ns();
    const int64_t res = aioge_run_jobs((const int64_t *)(intptr_t)r[0], r[1], (int)r[4], (int64_t *)(intptr_t)r[2]);
    *(int64_t *)(intptr_t)r[5] = aioge_now_ns() - t0; /* before the result: the waiter reads it after */
    atomic_store_explicit((_Atomic int64_t *)(intptr_t)r[3], res, memory_order_release);
    atomic_fetch_add(&q->completed, 1); /* sequentially consistent: pairs with aioge_queue_arm */
    if (atomic_exchange(&q->armed, 0)) {
        const uint64_t one = 1;
        ssize_t w;
        do
            w = write(q->wfd, &one, q->wfd == q->efd ? sizeof one : 1);
        while (w < 0 && errno == EINTR);
    }
}

static void *q_main(void *arg)
{
    struct runner *me = arg;
    struct queue *q = me->q;
#ifdef __linux__
    atomic_store(&me->tid, (int)syscall(SYS_gettid));
#endif
    for (;;) {
        int64_t *r = q_pop(q, 0);
        if (r) {
            atomic_store(&me->splitting, r[4] != 0);
            q_run(q, r);
            /* where it is now, for a poller: the loop, woken by this runner's completion, may
             * have been woken onto this CPU */
            atomic_store_explicit(&me->cpu, aioge_this_cpu(), memory_order_relaxed);
            continue;
        }
        if (atomic_load(&q->stop))
            break; /* stopped, and every pushed program taken */
        atomic_store_explicit(&me->cpu, aioge_this_cpu(), memory_order_relaxed);
        const int rt = aioge_spin_yields();
        int64_t last = aioge_now_ns();
        const int64_t deadline = last + QSPIN_US * 1000;
        unsigned spins = 0;
        while (atomic_load(&q->head) >= atomic_load(&q->tail) && !atomic_load(&q->stop)) {
            aioge_relax();
            if ((++spins & 255) != 0)
                continue;
            if (rt)
                sched_yield();
            /* past the spin, or descheduled for a slice (another process has the CPU): sleep,
             * so the next push wakes it with the scheduler's wake-up preference (as par.c) */
            const int64_t t = aioge_now_ns(), gap = t - last;
            last = t;
            if (t > deadline || gap > QDESCHED_NS) {
                pthread_mutex_lock(&q->mu);
                atomic_fetch_add(&q->sleepers, 1);
                atomic_store_explicit(&me->cpu, -1, memory_order_relaxed);
                while (atomic_load(&q->head) >= atomic_load(&q->tail) && !atomic_load(&q->stop))
                    pthread_cond_wait(&q->cv, &q->mu);
                atomic_fetch_sub(&q->sleepers, 1);
                pthread_mutex_unlock(&q->mu);
                break;
            }
        }
    }
    return NULL;
}

static void close_fds(struct queue *q)
{
    close(q->efd);
    if (q->wfd != q->efd)
        close(q->wfd);
}

/* A runner beside the calling thread (the event loop's), or asleep (it would be woken onto this
 * CPU), runs elsewhere from now on. Sharing the loop's CPU, a runner ran 1-2 ms of a 14 ms burst
 * of the builder MLP's 64 callers while the other vCPU idled: about one burst in two ran at 4.5K
 * programs/s instead of 8K. The loop moves too (woken by a runner's completion, onto the
 * runner's CPU), so pushes and polls both look. */
static void keep_runners_off(struct queue *q)
{
    const int cpu = aioge_this_cpu();
    for (int i = 0; i < q->nrunners; i++) {
        struct runner *rn = &q->runners[i];
        if (atomic_load(&rn->splitting))
            continue;
        aioge_keep_off(atomic_load(&rn->tid), atomic_load_explicit(&rn->cpu, memory_order_relaxed), cpu, &rn->excluded);
    }
}

/* A lone caller's split program: its caller sleeps while it runs, so a runner woken onto the
 * caller's CPU (this VM packs a wakee onto its waker's vCPU) starts on a vCPU that is awake, and
 * par.c's helper, kept off the runner's CPU, spins on the other one undisturbed by the loop's
 * Python between runs. A runner kept off this CPU before is let back onto every CPU. */
static void let_runners_on(struct queue *q)
{
    for (int i = 0; i < q->nrunners; i++) {
        struct runner *rn = &q->runners[i];
        int was = atomic_load(&rn->excluded);
#ifdef __linux__
        if (was >= 0 && q->have_all && atomic_compare_exchange_strong(&rn->excluded, &was, -1))
            sched_setaffinity(atomic_load(&rn->tid), sizeof q->all, &q->all);
#else
        (void)was;
#endif
    }
}

/* A queue with `runners` threads (1 to RUNNERS), or NULL. */
void *aioge_queue_new(int runners)
{
    struct queue *q = aioge_calloc(sizeof *q);
    if (!q)
        return NULL;
#ifdef __linux__
    q->efd = q->wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (q->efd < 0) {
        free(q);
        return NULL;
    }
#else
    int ends[2];
    if (pipe(ends) != 0) {
        free(q);
        return NULL;
    }
    for (int i = 0; i < 2; i++) {
        fcntl(ends[i], F_SETFL, fcntl(ends[i], F_GETFL) | O_NONBLOCK);
        fcntl(ends[i], F_SETFD, FD_CLOEXEC);
    }
    q->efd = ends[0];
    q->wfd = ends[1];
#endif
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
#ifdef __linux__
    q->have_all = sched_getaffinity(0, sizeof q->all, &q->all) == 0;
#endif
    runners = runners < 1 ? 1 : runners > RUNNERS ? RUNNERS : runners;
    for (int i = 0; i < runners; i++) {
        struct runner *rn = &q->runners[i];
        rn->q = q;
        atomic_store(&rn->cpu, -1);
        atomic_store(&rn->excluded, -1);
        if (pthread_create(&rn->thread, NULL, q_main, rn) != 0)
            break;
#ifdef __linux__
        pthread_setname_np(rn->thread, "aioge-queue"); /* named before this returns: ps, /proc, the tests */
#endif
        q->nrunners++;
    }
    if (q->nrunners == 0) {
        close_fds(q);
        free(q);
        return NULL;
    }
    return q;
}

/* The eventfd the event loop waits on (readable after an armed completion). */
int aioge_queue_fd(void *handle) { return ((struct queue *)handle)->efd; }

/* Queue the record; returns the programs queued and not yet taken, this one included, or 0
 * when the queue is full (the caller runs the program itself). */
int64_t aioge_queue_push(void *handle, int64_t *record)
{
    struct queue *q = handle;
    pthread_mutex_lock(&q->mu);
    const int64_t t = atomic_load(&q->tail), h = atomic_load(&q->head);
    if (t - h >= QCAP) {
        pthread_mutex_unlock(&q->mu);
        return 0;
    }
    q->slots[t % QCAP] = record;
    atomic_store(&q->tail, t + 1);
    const int wake = atomic_load(&q->sleepers) > 0;
    pthread_mutex_unlock(&q->mu);
    if (record[4])
        let_runners_on(q);
    else
        keep_runners_off(q);
    if (wake) /* after the unlock: the woken runner does not wait for the mutex on this CPU */
        pthread_cond_signal(&q->cv);
    return t + 1 - h;
}

/* Take the oldest queued program and run it in this thread: 1, or 0 when none was queued or
 * the oldest is a split one (a lone caller's long program: the runners' alone). */
int aioge_queue_take(void *handle)
{
    struct queue *q = handle;
    int64_t *r = q_pop(q, 1);
    if (!r)
        return 0;
    q_run(q, r);
    return 1;
}

/* Arm the eventfd for the next completion and return the completions so far: a waiter that
 * finds the count unchanged may wait on the fd, since a program that completes after this
 * call writes it. */
int64_t aioge_queue_arm(void *handle)
{
    struct queue *q = handle;
    keep_runners_off(q);
    atomic_store(&q->armed, 1);
    return atomic_load(&q->completed);
}

/* Stop the runners once every pushed program has run, and free the queue (no push after). */
void aioge_queue_free(void *handle)
{
    struct queue *q = handle;
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    atomic_store(&q->stop, 1);
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    for (int i = 0; i < q->nrunners; i++)
        pthread_join(q->runners[i].thread, NULL);
    close_fds(q);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q);
}
