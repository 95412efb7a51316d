/* Splitting a C kernel over an idle core without a Python thread hop.
 *
 * kernels.parallel.split_range hands half of a range to a Python helper thread: the wake-up
 * (a condition variable, the GIL, and on this VM a halted vCPU to wake) costs 60-75 us, a
 * sixth of a 0.45 ms GEMM half. Here the caller posts the job to a C helper thread that spins
 * for a while after each job (SPIN_US, or AIOGE_SPIN_US in the environment), so a kernel that
 * follows within that time is picked up in about a microsecond; past it the helper sleeps on a
 * condition variable. onnxruntime's thread pool spins the same way. A helper that finds it was
 * descheduled while spinning (DESCHED_NS between two looks: another process took the CPU)
 * sleeps at once, so the next post wakes it with the scheduler's wake-up preference instead of
 * finding it queued behind that process. A helper woken with no job (aioge_par_wake, as a run
 * is handed to its lane) spins WAKE_SPIN_US (AIOGE_WAKE_SPIN_US): after an idle pause the lane
 * took 0.2-0.45 ms (median, load 5) to start, past SPIN_US, so the helper could sleep again and
 * the first split pay a second wake-up (mobilenet_v3_small: 1.5-1.65 helper sleeps a run 30 ms
 * apart, 0.5-0.85 back to back; bench/idle_pause.py).
 *
 * The range is cut into up to CHUNKS chunks (FINE_CHUNKS for the dense convs): the caller runs
 * the first half of them and the helper the second, each in order (a quarter of the chunks left
 * at a time, as one range), and one that is done with its own takes the other's from that half's
 * far end one at a time, so a helper that starts late only leaves more chunks to the caller.
 * Their sizes differ by one at most, the longer first: ceil-sized chunks left ResNet-18's
 * 14- and 49-unit convs 7 chunks (4 to one thread, 3 to the other). Eight chunks leave up to an
 * eighth of a job to one thread at the end when the two run at different speeds, 32 a 32nd
 * (simulated over ResNet-18's 3x3 conv ranges, the helper 10-20% slower: split walls of 0.56-0.61
 * of the whole job's with 8, 0.535-0.56 with 32; the same at equal speeds); jobs whose chunks
 * each redo some work (the local phase rows of JOB_CONV_LOCAL) keep 8. This VM's scheduler packs
 * threads onto few vCPUs (sched_vcpu_pack): a helper woken by the caller landed on the caller's
 * vCPU and ran only when the caller was done (1.4 ms for a 0.9 ms GEMM). So a caller that finds
 * the helper on its CPU, or asleep, first sets the helper's affinity to every other CPU
 * (aioge_keep_off; queue.c's runners get the same).
 *
 * Whether to split at all (an idle CPU token of the run) is the Python side's decision
 * (kernels.parallel.split_native); this file runs aioge_par_run(job, args, total, split), a job
 * being one of jobs.c's kernels with its arguments in an int64 array. Helpers are claimed one
 * caller at a time, up to the cores less one; with none free the job runs whole. A forked child
 * starts with no helpers (pthread_atfork), so a fork in the middle cannot leave a job waiting.
 *
 * On a machine other processes keep busy, a helper may be descheduled in the middle of a chunk
 * and the caller waits a scheduler slice (milliseconds) for it. So a split whose caller waited
 * for the helper's chunks longer than one and a half of its own chunks took, and 250 us more,
 * is a lost split (at load 13 on the 2 vCPUs: 33 of 2,230 splits of efficientnet_b0), and splits stop for a
 * back-off window (10 ms, doubling on each further loss up to 1 s); the first split after the
 * window is the probe, and a split that did not lose ends the back-off. AIOGE_SPLIT_BACKOFF_US
 * sets the first window (0: never back off).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "aioge.h"
#include "spin.h"

#define MAX_HELPERS 64
#define SPIN_US 300
#define WAKE_SPIN_US 1500
#define CHUNKS 8       /* a split range is cut into this many chunks at most ... */
#define FINE_CHUNKS 32 /* ... and a dense conv's (direct, or a Winograd stage) into this many */
#define BACKOFF_MIN_NS 10000000LL   /* splits stop this long after a lost one (AIOGE_SPLIT_BACKOFF_US) ... */
#define BACKOFF_MAX_NS 1000000000LL /* ... doubling on each further loss up to this */
#define LOST_SLACK_NS 250000LL      /* a wait this much past 1.5 chunks: a helper descheduled, not slow to wake */
#define DESCHED_NS 200000LL         /* a spinning helper that went this long between two looks sleeps */

/* One split job, on the caller's stack: its range cut into chunks, the first half (the larger
 * when odd) the caller's and the rest the helper's, each half a (lo, hi) pair of chunk indices
 * in one word. Its owner takes a half's chunks from lo up (a quarter of both halves' left at a
 * time, run as one range), and a thread done with its own half takes the other's from hi down,
 * one at a time, so a helper that starts late (or not at all: on a VM a vCPU may be slow to wake,
 * or the scheduler may have put the helper on the caller's own vCPU) only ever leaves more
 * chunks to the caller, never a wait, and each thread's part of the output is one or two runs of
 * the range. Taken alternately, every chunk edge was a boundary: a conv's NCHW output
 * rows had cache lines written by both cores (a 1x1 conv over MR = 6 positions writes 24 bytes
 * of each channel row), and a split 14x14 1x1 conv of MobileNetV3 ran slower than whole (in a
 * run: 35 -> 45 us; from the back 38). The helper took its chunks from the range's end down
 * until the two met (a boundary wherever they met); in halves, each in order from its start, the
 * two parts meet at the same chunk every time when neither steals, and both threads walk memory
 * upwards: in-process walls alternated run by run (chrt -f 1, load 9-10) 0.957x
 * (mobilenet_v3_small) to 0.991x (resnet18), MobileNetV2 0.973x, MnasNet 0.966-0.974x,
 * SqueezeNet 0.961-0.965x; the helper taking its half from its end down measured as before
 * (1.000-1.003x). An owner taking half its chunks left at a time, against one at a time (load
 * 15-18): 0.976-0.991x MnasNet, 0.96-0.99x MobileNetV2, 0.978-0.995x SqueezeNet, 0.972-0.978x
 * mobilenet_v3_small, 0.989-0.998x efficientnet_b0, 0.991-0.998x resnet18; only the caller's so,
 * 0.987-1.003x; a quarter of both halves' left (take) as half its own, 0.978-1.005x. */
struct split {
    int job;
    const int64_t *args;
    int64_t total, chunk, nchunks, longer; /* chunks [0, longer) hold chunk + 1 values, the rest chunk */
    _Atomic uint64_t halves[2];            /* the caller's and the helper's chunks left: lo, hi << 32 */
    _Atomic uint64_t mine[2];              /* which of the first 64 chunks each took (aioge_par_last) */
    _Atomic int64_t calls[2];              /* how many ranges each ran (aioge_par_last) */
    _Atomic int64_t done;
    _Atomic int error;
};

struct helper {
    _Atomic int claimed;                /* a caller owns it (compare-and-swap 0 -> 1) */
    _Atomic uint64_t posted;            /* bumped by the caller for each job */
    _Atomic(struct split *) current;    /* the job, NULL once its caller stopped waiting */
    _Atomic int inside;                 /* the helper may be reading *current */
    _Atomic int sleeping;
    _Atomic int cpu;                    /* where the helper last looked for work, -1 unknown */
    _Atomic pid_t tid;
    int started;
    _Atomic int excluded;               /* the CPU its affinity leaves out, -1 none */
    uint64_t initial;                   /* posted when the thread was created */
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static struct helper helpers[MAX_HELPERS];
static pthread_mutex_t start_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int nhelpers = -1;
static int64_t spin_ns, wake_spin_ns;
static int64_t desched_ns = DESCHED_NS; /* AIOGE_SPIN_DESCHED_US; 0: spin on however long descheduled */

static _Atomic int64_t backoff_until, backoff_ns; /* no split before backoff_until; the window */
static int64_t backoff_min_ns = BACKOFF_MIN_NS;
static _Atomic int64_t stats[5]; /* splits run, lost, run whole in a back-off; helpers' chunks, sleeps */
static _Atomic int64_t last[6];  /* aioge_par_last's */
static void init(void);

/* Judge one split: the caller spent caller_ns on its own `mine` chunks, then waited wait_ns
 * for the helper's. Returns the time before which splits run whole (0: no back-off). */
int64_t aioge_par_backoff(int64_t caller_ns, int64_t mine, int64_t wait_ns, int64_t now)
{
    if (nhelpers < 0)
        init();
    const int64_t chunk_ns = mine > 0 ? caller_ns / mine : 0;
    atomic_fetch_add_explicit(&stats[0], 1, memory_order_relaxed);
    if (wait_ns <= chunk_ns + chunk_ns / 2 + LOST_SLACK_NS || backoff_min_ns == 0) {
        atomic_store_explicit(&backoff_ns, 0, memory_order_relaxed);
        atomic_store_explicit(&backoff_until, 0, memory_order_relaxed);
        return 0;
    }
    atomic_fetch_add_explicit(&stats[1], 1, memory_order_relaxed);
    const int64_t prev = atomic_load_explicit(&backoff_ns, memory_order_relaxed);
    const int64_t next = prev ? (2 * prev < BACKOFF_MAX_NS ? 2 * prev : BACKOFF_MAX_NS) : backoff_min_ns;
    atomic_store_explicit(&backoff_ns, next, memory_order_relaxed);
    atomic_store_explicit(&backoff_until, now + next, memory_order_relaxed);
    return now + next;
}

/* The next chunks of a half (lo, hi) whose other half is *other: from lo, the owner's, a quarter
 * of the two halves' chunks left (at least one, at most its own: half its own while the two keep
 * pace), or from hi, another thread's, the last one; the first of them, their count in *n, or -1
 * when none is left. One call over consecutive chunks runs them as one range (a conv's units
 * share each weight block's loads; fewer calls); a quarter of both, not half of its own, so a
 * helper that starts when the caller is already taking its chunks takes few at a time, and the
 * caller does not wait long for them. */
static int64_t take(_Atomic uint64_t *half, const _Atomic uint64_t *other, int from_hi, int64_t *n)
{
    uint64_t was = atomic_load(half);
    for (;;) {
        const int64_t lo = (int64_t)(was & 0xffffffffu), hi = (int64_t)(was >> 32);
        if (lo >= hi)
            return -1;
        int64_t k = 1;
        if (!from_hi) {
            const uint64_t o = atomic_load_explicit(other, memory_order_relaxed);
            const int64_t left = (int64_t)(o >> 32) - (int64_t)(o & 0xffffffffu);
            k = (hi - lo + (left > 0 ? left : 0) + 3) / 4;
            k = k < 1 ? 1 : k > hi - lo ? hi - lo : k;
        }
        const uint64_t now = from_hi ? (uint64_t)(hi - 1) << 32 | (uint64_t)lo : (uint64_t)hi << 32 | (uint64_t)(lo + k);
        if (atomic_compare_exchange_weak(half, &was, now)) {
            *n = k;
            return from_hi ? hi - 1 : lo;
        }
    }
}

/* Run chunks of s, the helper's half first when helper is set (else the caller's), then the
 * other half's from its end, until none is left; how many chunks this thread ran. */
static int64_t work(struct split *s, int helper)
{
    int64_t took = 0, n = 1;
    for (;;) {
        int64_t i = take(&s->halves[helper], &s->halves[!helper], 0, &n);
        if (i < 0)
            i = take(&s->halves[!helper], &s->halves[helper], 1, &n);
        if (i < 0)
            break;
        took += n;
        for (int64_t j = i; j < i + n && j < 64; j++)
            atomic_fetch_or_explicit(&s->mine[helper], (uint64_t)1 << j, memory_order_relaxed);
        const int64_t e = i + n, lo = i * s->chunk + (i < s->longer ? i : s->longer), hi = e * s->chunk + (e < s->longer ? e : s->longer);
        atomic_fetch_add_explicit(&s->calls[helper], 1, memory_order_relaxed);
        const int err = aioge_job(s->job, s->args, lo, hi);
        if (err)
            atomic_store(&s->error, err);
        atomic_fetch_add(&s->done, n);
    }
    return took;
}

static void *helper_main(void *arg)
{
    struct helper *h = arg;
#ifdef __linux__
    atomic_store(&h->tid, (pid_t)syscall(SYS_gettid));
#endif
    uint64_t seen = h->initial; /* not posted: the first job may be posted before this thread runs */
    int woken = 0;              /* the last post was aioge_par_wake's, with no job */
    int rt = aioge_spin_yields();
    for (;;) {
        uint64_t now;
        int64_t last = aioge_now_ns();
        const int64_t deadline = last + (woken && wake_spin_ns > spin_ns ? wake_spin_ns : spin_ns);
        unsigned spins = 0;
        atomic_store_explicit(&h->cpu, aioge_this_cpu(), memory_order_relaxed);
        while ((now = atomic_load_explicit(&h->posted, memory_order_acquire)) == seen) {
            aioge_relax();
            if ((++spins & 255) != 0)
                continue;
            if (rt)
                sched_yield(); /* a lane's thread on this CPU runs first: spinning holds no CPU token */
            const int64_t t = aioge_now_ns(), gap = t - last;
            last = t;
            /* Descheduled (the yield gave the CPU to another process for a slice): on a busy
             * machine a spinning helper is seldom running when a job comes, while a sleeping one
             * is woken by the post with the scheduler's wake-up preference, so sleep. */
            if (t > deadline || (desched_ns && gap > desched_ns)) {
                pthread_mutex_lock(&h->mu);
                atomic_store(&h->sleeping, 1);
                atomic_fetch_add_explicit(&stats[4], 1, memory_order_relaxed);
                atomic_store_explicit(&h->cpu, -1, memory_order_relaxed);
                while ((now = atomic_load(&h->posted)) == seen)
                    pthread_cond_wait(&h->cv, &h->mu);
                atomic_store(&h->sleeping, 0);
                pthread_mutex_unlock(&h->mu);
                rt = aioge_spin_yields();
                break;
            }
        }
        seen = now;
        atomic_store(&h->inside, 1); /* sequentially consistent, against the caller's store of NULL */
        struct split *s = atomic_load(&h->current);
        woken = s == NULL;
        if (s)
            atomic_fetch_add_explicit(&stats[3], work(s, 1), memory_order_relaxed);
        atomic_store(&h->inside, 0);
    }
    return NULL;
}

static void reset_helpers(void)
{
    for (int i = 0; i < MAX_HELPERS; i++) {
        struct helper *h = &helpers[i];
        atomic_store(&h->claimed, 0);
        atomic_store(&h->posted, 0);
        atomic_store(&h->current, NULL);
        atomic_store(&h->inside, 0);
        atomic_store(&h->sleeping, 0);
        atomic_store(&h->cpu, -1);
        atomic_store(&h->tid, 0);
        h->started = 0;
        atomic_store(&h->excluded, -1);
        pthread_mutex_init(&h->mu, NULL);
        pthread_cond_init(&h->cv, NULL);
    }
}

static void after_fork_in_child(void) /* the helper threads stayed in the parent */
{
    reset_helpers();
    pthread_mutex_init(&start_mu, NULL);
}

static void init(void)
{
    pthread_mutex_lock(&start_mu);
    if (nhelpers < 0) {
        const char *env = getenv("AIOGE_SPIN_US");
        const long us = env ? strtol(env, NULL, 10) : SPIN_US;
        spin_ns = (int64_t)(us > 0 ? us : 0) * 1000;
        const char *wake_env = getenv("AIOGE_WAKE_SPIN_US");
        const long wus = wake_env ? strtol(wake_env, NULL, 10) : WAKE_SPIN_US;
        wake_spin_ns = (int64_t)(wus > 0 ? wus : 0) * 1000;
        const char *desched = getenv("AIOGE_SPIN_DESCHED_US");
        if (desched)
            desched_ns = strtol(desched, NULL, 10) > 0 ? (int64_t)strtol(desched, NULL, 10) * 1000 : 0;
        const char *backoff = getenv("AIOGE_SPLIT_BACKOFF_US");
        if (backoff) {
            const long b = strtol(backoff, NULL, 10);
            backoff_min_ns = b > 0 ? (int64_t)b * 1000 : 0;
        }
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        if (aioge_allowed_cpus() > 0) /* taskset, cpusets */
            cores = aioge_allowed_cpus();
        reset_helpers();
        pthread_atfork(NULL, NULL, after_fork_in_child);
        nhelpers = cores > 1 ? (cores - 1 < MAX_HELPERS ? (int)cores - 1 : MAX_HELPERS) : 0;
    }
    pthread_mutex_unlock(&start_mu);
}

/* A free helper, its thread started, or NULL. */
static struct helper *claim(void)
{
    if (nhelpers < 0)
        init();
    for (int i = 0; i < nhelpers; i++) {
        struct helper *h = &helpers[i];
        int free_ = 0;
        if (!atomic_compare_exchange_strong(&h->claimed, &free_, 1))
            continue;
        if (!h->started) {
            pthread_t t;
            pthread_attr_t attr;
            pthread_attr_init(&attr);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            h->initial = atomic_load(&h->posted);
            const int err = pthread_create(&t, &attr, helper_main, h);
            pthread_attr_destroy(&attr);
            if (err) {
                atomic_store(&h->claimed, 0);
                return NULL;
            }
#ifdef __linux__
            pthread_setname_np(t, "aioge-par"); /* for ps and per-thread CPU in bench/twocore.py */
#endif
            h->started = 1;
        }
        return h;
    }
    return NULL;
}

/* Run job over [0, total): whole, or with split != 0 and a helper free, in chunks that this
 * thread and the helper take in turn. Returns the number of threads that were offered the job
 * (1 or 2), or the job's (negative) error code, or AIOGE_EJOB for an unknown job. */
int aioge_par_run(int job, const int64_t *args, int64_t total, int split)
{
    if (job < 0 || job >= AIOGE_NJOBS)
        return AIOGE_EJOB;
    if (total < 0)
        return AIOGE_EGEOMETRY;
    const int64_t t0 = split ? aioge_now_ns() : 0;
    if (t0 && t0 < atomic_load_explicit(&backoff_until, memory_order_relaxed)) {
        split = 0; /* a recent split waited for a helper another process held: run whole */
        atomic_fetch_add_explicit(&stats[2], 1, memory_order_relaxed);
    }
    struct helper *h = split && total >= 2 ? claim() : NULL;
    if (!h) {
        const int r = aioge_job(job, args, 0, total);
        return r ? r : 1;
    }
    struct split s = {.job = job, .args = args, .total = total};
    const int64_t most = job == JOB_CONV_T || job == JOB_CONV_DIRECT || job == JOB_WINOGRAD ? FINE_CHUNKS : CHUNKS;
    s.nchunks = total < most ? total : most;
    s.chunk = total / s.nchunks;
    s.longer = total % s.nchunks;
    const int64_t mid = (s.nchunks + 1) / 2;
    atomic_store(&s.halves[0], (uint64_t)mid << 32);
    atomic_store(&s.halves[1], (uint64_t)s.nchunks << 32 | (uint64_t)mid);
    atomic_store(&s.mine[0], 0);
    atomic_store(&s.mine[1], 0);
    atomic_store(&s.calls[0], 0);
    atomic_store(&s.calls[1], 0);
    atomic_store(&s.done, 0);
    atomic_store(&s.error, 0);
    aioge_keep_off(atomic_load(&h->tid), atomic_load_explicit(&h->cpu, memory_order_relaxed), aioge_this_cpu(), &h->excluded);
    atomic_store(&h->current, &s);
    atomic_fetch_add(&h->posted, 1); /* sequentially consistent: pairs with the helper's sleeping flag */
    if (atomic_load(&h->sleeping)) {
        pthread_mutex_lock(&h->mu);
        pthread_cond_signal(&h->cv);
        pthread_mutex_unlock(&h->mu);
    }
    const int64_t mine = work(&s, 0), t1 = aioge_now_ns();
    unsigned spins = 0;
    while (atomic_load(&s.done) < s.nchunks) /* chunks the helper took and has not finished */
        if (++spins < 1u << 14)
            aioge_relax();
        else
            sched_yield();
    const int64_t t2 = aioge_now_ns();
    aioge_par_backoff(t1 - t0, mine, t2 - t1, t2);
    atomic_store(&h->current, NULL);
    while (atomic_load(&h->inside)) /* the helper may still hold &s: wait until it lets go */
        if (++spins < 1u << 14)
            aioge_relax();
        else
            sched_yield();
    atomic_store(&h->claimed, 0);
    const int64_t rec[6] = {s.nchunks, mid, (int64_t)atomic_load(&s.mine[0]), (int64_t)atomic_load(&s.mine[1]),
                            atomic_load(&s.calls[0]), atomic_load(&s.calls[1])};
    for (int i = 0; i < 6; i++)
        atomic_store_explicit(&last[i], rec[i], memory_order_relaxed);
    const int err = atomic_load(&s.error);
    return err ? err : 2;
}

/* The last split's chunks: out[0] how many, out[1] the first of the helper's half, out[2] and
 * out[3] bit masks of the ones the caller and the helper ran (chunks past 64 not shown), out[4]
 * and out[5] how many ranges (job calls) each ran them in. Only meaningful with one caller
 * splitting (the tests). */
void aioge_par_last(int64_t *out)
{
    for (int i = 0; i < 6; i++)
        out[i] = atomic_load_explicit(&last[i], memory_order_relaxed);
}

/* A native program: n jobs run in order in this thread, entries holding (job, args, total,
 * worth) each; a job whose worth is set splits over a helper when split is. The GIL is released
 * once for the whole run (kernels.native.run_program). Returns 0, or the job's error (minus)
 * with *failed set to its entry. */
int aioge_run_jobs(const int64_t *entries, int64_t n, int split, int64_t *failed)
{
    for (int64_t i = 0; i < n; i++) {
        const int64_t *e = entries + 4 * i;
        const int r = aioge_par_run((int)e[0], (const int64_t *)(intptr_t)e[1], e[2], split && e[3]);
        if (r < 0) {
            *failed = i;
            return r;
        }
    }
    return 0;
}

/* Wake the free helpers that sleep, with no job: each spins WAKE_SPIN_US from now, so the first split
 * of a run that is about to start (its lane or the loop's thread still waking up) finds it
 * spinning instead of paying its wake-up (tens of microseconds on this VM, and the helper's
 * vCPU halted) in the middle of a big job. Nothing while splits back off or a helper is
 * claimed or spinning. Returns the helpers woken. */
int aioge_par_wake(void)
{
    if (nhelpers < 0)
        init();
    if (aioge_now_ns() < atomic_load_explicit(&backoff_until, memory_order_relaxed))
        return 0;
    int woken = 0;
    for (int i = 0; i < nhelpers; i++) {
        struct helper *h = &helpers[i];
        int free_ = 0;
        if (!h->started || !atomic_load(&h->sleeping) || !atomic_compare_exchange_strong(&h->claimed, &free_, 1))
            continue;
        pthread_mutex_lock(&h->mu);
        atomic_store(&h->current, NULL); /* no job: it only wakes, then spins for the next post */
        atomic_fetch_add(&h->posted, 1);
        pthread_cond_signal(&h->cv);
        pthread_mutex_unlock(&h->mu);
        atomic_store(&h->claimed, 0);
        woken++;
    }
    return woken;
}

/* The split counters since the process started: out[0] splits run, out[1] of them lost (the
 * caller waited for the helper), out[2] splits run whole in a back-off window, out[3] chunks the
 * helpers took, out[4] times a helper went to sleep (each a wake-up to pay at its next post). */
void aioge_par_stats(int64_t *out)
{
    for (int i = 0; i < 5; i++)
        out[i] = atomic_load_explicit(&stats[i], memory_order_relaxed);
}

/* How many helpers a split may use (the cores less one; 0 on one core). */
int aioge_par_helpers(void)
{
    init();
    return nhelpers;
}
