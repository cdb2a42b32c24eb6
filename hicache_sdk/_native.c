/*
 * hicache_sdk._native: bulk memory copies with the GIL released.
 *
 * copy_runs(runs) -> int
 *   runs: a sequence of (dst, src, nbytes) tuples of ints (addresses). Every run is parsed
 *   first, with the GIL (a bad entry raises before any byte moves); then the copies run
 *   without the GIL, adjacent runs (dst and src both continuing the previous run) merged
 *   into one memmove. Returns the bytes copied.
 *
 * gather(dst, segments) -> int     segments (addr, nbytes) copied back to back to dst
 * scatter(src, segments) -> int    contiguous src split into segments (addr, nbytes)
 *
 * A copy of at least PAR_MIN bytes is split into equal byte ranges copied by several threads
 * at once (one of them the caller's): on this project's 2-core test machine one thread copies
 * 32 MiB in 5.4-6 ms and two in 2.2-2.3 ms. Runs must therefore not overlap one another (a run
 * may overlap itself: such a copy is not split, and that run is one memmove). The thread count is at most the online CPUs
 * (4 at most) and one per PART_MIN bytes; copy_threads(n) sets it (1: never split; 0: the
 * default), as does the environment variable HICACHE_COPY_THREADS at import.
 *
 * copy_threads(n=-1) -> int        the thread count setting before the call (-1: only read)
 *
 * A copy of at least STREAM_MIN bytes in all writes its pieces of at least STREAM_PIECE bytes
 * with non-temporal (streaming) stores on x86-64: no read-for-ownership of the destination
 * and no eviction of the cache for data nobody reads back soon (staging copies: a read's
 * pages go on to the GPU, a write's snapshot goes to the network). glibc switches to them
 * only above 3/4 of the shared cache (41 MiB on the test machine), so a 32 MiB staging copy
 * paid the RFO: 25-40 % slower there. A piece that overlaps itself is a plain memmove.
 * copy_stream(flag) turns this off (0) or on (1), as does HICACHE_COPY_STREAM=0 at import.
 *
 * copy_stream(flag=-1) -> int       the streaming setting before the call (-1: only read)
 *
 * current_cpu() -> int              the CPU the calling thread runs on (sched_getcpu), or -1
 *                                   where that cannot be known; the deadline runner places
 *                                   its worker on the caller's CPU with it (resilience/deadline.py)
 *
 * Baton()                           a binary hand-off signal (a POSIX semaphore; Linux):
 *   .post()                          signal it (one waiter goes on, or the next wait returns
 *                                    at once)
 *   .wait(timeout) -> bool           wait for a post, at most `timeout` seconds (< 0: no limit),
 *                                    with the GIL released; False on timeout
 * post_wait(a, b, timeout) -> bool   a.post() then b.wait(timeout), both with the GIL released
 *
 * post_wait is the deadline runner's hand-off (resilience/deadline.py). Posting while holding
 * the GIL wakes a thread that at once needs the GIL the poster still holds: on one CPU that is
 * two extra context switches per hand-off, four per call through the runner (a 256-key Mooncake
 * batch_is_exist measured 12 switches per call through the runner against 6 inline). Giving
 * the GIL up first, then posting, then sleeping leaves the woken thread a free GIL. A wait
 * interrupted by a signal runs Python's signal handlers (KeyboardInterrupt propagates) and
 * goes on waiting until the same deadline; the post is never repeated.
 *
 * The Python fallback (hicache_sdk.kit.segments) loops over ctypes.memmove when this module
 * could not be compiled: same results, more per-segment overhead.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <semaphore.h>
#include <time.h>
#endif

#include "_native_sync.h"

#ifdef __linux__
int native_runner_add_types(PyObject *m); /* _native_runner.c: Runner, Call */
#endif

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#define HAVE_STREAM 1
#else
#define HAVE_STREAM 0
#endif

#define PAR_MIN ((size_t)4 << 20)
#define PART_MIN ((size_t)2 << 20)
#define MAX_THREADS 8
#define STREAM_MIN ((size_t)4 << 20)
#define STREAM_PIECE ((size_t)4 << 10)

/* 0: the default (online CPUs, at most 4). */
static int copy_threads_setting = 0;
/* 1: copies of STREAM_MIN bytes or more use non-temporal stores (where the CPU has them). */
static int copy_stream_setting = 1;

typedef struct {
    uintptr_t dst, src;
    size_t n;
} run_t;

static int parse_u(PyObject *o, uintptr_t *out, const char *what, Py_ssize_t i) {
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "entry %zd: %s must be a non-negative int", i, what);
        return -1;
    }
    *out = (uintptr_t)v;
    return 0;
}

#if HAVE_STREAM
/* dst <- src with streaming stores; the two must not overlap. Fenced: the bytes are
 * globally visible before it returns, like a memmove's. */
static void stream_copy(char *d, const char *s, size_t n) {
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    head = head < n ? head : n;
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    size_t body = n & ~(size_t)63;
    for (size_t i = 0; i < body; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
        _mm_stream_si128((__m128i *)(d + i), a);
        _mm_stream_si128((__m128i *)(d + i + 16), b);
        _mm_stream_si128((__m128i *)(d + i + 32), c);
        _mm_stream_si128((__m128i *)(d + i + 48), e);
    }
    memcpy(d + body, s + body, n - body);
    _mm_sfence();
}
#endif

static void copy_one(const run_t *r, int stream) {
#if HAVE_STREAM
    if (stream && r->n >= STREAM_PIECE && (r->dst + r->n <= r->src || r->src + r->n <= r->dst)) {
        stream_copy((char *)r->dst, (const char *)r->src, r->n);
        return;
    }
#else
    (void)stream;
#endif
    memmove((void *)r->dst, (const void *)r->src, r->n);
}

static void copy_list(const run_t *r, Py_ssize_t n, int stream) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (r[i].n) {
            copy_one(&r[i], stream);
        }
    }
}

typedef struct {
    const run_t *r;
    Py_ssize_t n;
    int stream;
} job_t;

static void *copy_job(void *arg) {
    const job_t *j = (const job_t *)arg;
    copy_list(j->r, j->n, j->stream);
    return NULL;
}

static int threads_for(size_t total) {
    if (total < PAR_MIN) {
        return 1;
    }
    long t = copy_threads_setting;
    if (t <= 0) {
        t = sysconf(_SC_NPROCESSORS_ONLN);
        t = t > 4 ? 4 : t;
    }
    long by_size = (long)(total / PART_MIN);
    t = t > by_size ? by_size : t;
    t = t > MAX_THREADS ? MAX_THREADS : t;
    return t < 1 ? 1 : (int)t;
}

/* Copy the (merged) runs in t equal byte ranges, t - 1 of them on new threads. */
static void copy_parallel(const run_t *runs, Py_ssize_t m, size_t total, int t, int stream) {
    run_t *pieces = malloc((size_t)(m + t) * sizeof(run_t));
    if (pieces == NULL) {
        copy_list(runs, m, stream);
        return;
    }
    job_t jobs[MAX_THREADS];
    Py_ssize_t pi = 0, ri = 0;
    size_t off = 0, left = total, per = total / (size_t)t;
    for (int k = 0; k < t; k++) {
        size_t want = k == t - 1 ? left : per;
        left -= want;
        jobs[k].r = pieces + pi;
        Py_ssize_t start = pi;
        while (ri < m && (want > 0 || runs[ri].n == off)) {
            size_t avail = runs[ri].n - off;
            size_t take = avail < want ? avail : want;
            if (take) {
                pieces[pi].dst = runs[ri].dst + off;
                pieces[pi].src = runs[ri].src + off;
                pieces[pi].n = take;
                pi++;
                want -= take;
                off += take;
            }
            if (off == runs[ri].n) {
                ri++;
                off = 0;
            }
        }
        jobs[k].n = pi - start;
        jobs[k].stream = stream;
    }
    pthread_t tids[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int k = 1; k < t; k++) {
        started[k] = pthread_create(&tids[k], NULL, copy_job, &jobs[k]) == 0;
    }
    copy_job(&jobs[0]);
    for (int k = 1; k < t; k++) {
        if (started[k]) {
            pthread_join(tids[k], NULL);
        } else {
            copy_job(&jobs[k]); /* no thread: copy it here */
        }
    }
    free(pieces);
}

static Py_ssize_t run_all(run_t *runs, Py_ssize_t n) {
    /* Merge adjacent runs (dst and src both continuing the previous run) in place. */
    Py_ssize_t m = 0;
    size_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        total += runs[i].n;
        if (m > 0 && runs[i].dst == runs[m - 1].dst + runs[m - 1].n &&
            runs[i].src == runs[m - 1].src + runs[m - 1].n) {
            runs[m - 1].n += runs[i].n;
        } else {
            runs[m++] = runs[i];
        }
    }
    int t = threads_for(total);
    for (Py_ssize_t i = 0; i < m && t > 1; i++) {
        /* a run that overlaps itself is one memmove: split, its pieces would race */
        if (runs[i].dst != runs[i].src && runs[i].dst < runs[i].src + runs[i].n &&
            runs[i].src < runs[i].dst + runs[i].n) {
            t = 1;
        }
    }
    int stream = copy_stream_setting && total >= STREAM_MIN;
    Py_BEGIN_ALLOW_THREADS
    if (t <= 1) {
        copy_list(runs, m, stream);
    } else {
        copy_parallel(runs, m, total, t, stream);
    }
    Py_END_ALLOW_THREADS
    return (Py_ssize_t)total;
}

/* Parse `seq` of tuples with `width` ints; fill runs. mode 0: (dst, src, n); mode 1:
 * (addr, n) gathered into base; mode 2: (addr, n) scattered from base. */
static PyObject *do_copy(PyObject *seq_in, int mode, uintptr_t base) {
    PyObject *seq = PySequence_Fast(seq_in, "expected a sequence of tuples");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    run_t *runs = PyMem_Malloc((n > 0 ? (size_t)n : 1) * sizeof(run_t));
    if (runs == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    Py_ssize_t width = mode == 0 ? 3 : 2;
    uintptr_t off = base;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = items[i];
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != width) {
            PyErr_Format(PyExc_ValueError, "entry %zd must be a tuple of %zd ints", i, width);
            goto fail;
        }
        uintptr_t a, b, c;
        if (mode == 0) {
            if (parse_u(PyTuple_GET_ITEM(t, 0), &a, "dst", i) || parse_u(PyTuple_GET_ITEM(t, 1), &b, "src", i) ||
                parse_u(PyTuple_GET_ITEM(t, 2), &c, "nbytes", i)) {
                goto fail;
            }
        } else {
            uintptr_t addr;
            if (parse_u(PyTuple_GET_ITEM(t, 0), &addr, "address", i) ||
                parse_u(PyTuple_GET_ITEM(t, 1), &c, "nbytes", i)) {
                goto fail;
            }
            if (mode == 1) {
                a = off;
                b = addr;
            } else {
                a = addr;
                b = off;
            }
            off += c;
        }
        if (c && (a == 0 || b == 0)) {
            PyErr_Format(PyExc_ValueError, "entry %zd: null address with %zu bytes", i, (size_t)c);
            goto fail;
        }
        runs[i].dst = a;
        runs[i].src = b;
        runs[i].n = (size_t)c;
    }
    Py_ssize_t total = run_all(runs, n);
    PyMem_Free(runs);
    Py_DECREF(seq);
    return PyLong_FromSsize_t(total);
fail:
    PyMem_Free(runs);
    Py_DECREF(seq);
    return NULL;
}

static PyObject *copy_runs(PyObject *self, PyObject *args) {
    PyObject *runs;
    (void)self;
    if (!PyArg_ParseTuple(args, "O:copy_runs", &runs)) {
        return NULL;
    }
    return do_copy(runs, 0, 0);
}

static PyObject *gather(PyObject *self, PyObject *args) {
    unsigned long long dst;
    PyObject *segs;
    (void)self;
    if (!PyArg_ParseTuple(args, "KO:gather", &dst, &segs)) {
        return NULL;
    }
    return do_copy(segs, 1, (uintptr_t)dst);
}

static PyObject *scatter(PyObject *self, PyObject *args) {
    unsigned long long src;
    PyObject *segs;
    (void)self;
    if (!PyArg_ParseTuple(args, "KO:scatter", &src, &segs)) {
        return NULL;
    }
    return do_copy(segs, 2, (uintptr_t)src);
}

static PyObject *copy_threads(PyObject *self, PyObject *args) {
    int n = -1;
    (void)self;
    if (!PyArg_ParseTuple(args, "|i:copy_threads", &n)) {
        return NULL;
    }
    int before = copy_threads_setting;
    if (n >= 0) {
        copy_threads_setting = n > MAX_THREADS ? MAX_THREADS : n;
    }
    return PyLong_FromLong(before);
}

static PyObject *copy_stream(PyObject *self, PyObject *args) {
    int flag = -1;
    (void)self;
    if (!PyArg_ParseTuple(args, "|i:copy_stream", &flag)) {
        return NULL;
    }
    int before = copy_stream_setting;
    if (flag >= 0) {
        copy_stream_setting = flag ? 1 : 0;
    }
    return PyLong_FromLong(before);
}

static PyObject *current_cpu(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
#ifdef __linux__
    return PyLong_FromLong(sched_getcpu());
#else
    return PyLong_FromLong(-1);
#endif
}

#ifdef __linux__
/* -- Baton: a semaphore hand-off with the GIL released (module docs) ------------------- */

typedef struct {
    PyObject_HEAD
    sem_t sem;
    int ready;
} Baton;

static PyTypeObject BatonType;

static int baton_init(Baton *self, PyObject *args, PyObject *kw) {
    if (!PyArg_ParseTuple(args, ":Baton") || (kw != NULL && PyDict_GET_SIZE(kw) > 0)) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "Baton() takes no arguments");
        }
        return -1;
    }
    if (self->ready) {
        sem_destroy(&self->sem);
        self->ready = 0;
    }
    if (sem_init(&self->sem, 0, 0) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->ready = 1;
    return 0;
}

static void baton_dealloc(Baton *self) {
    if (self->ready) {
        sem_destroy(&self->sem);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* post (may be NULL) then wait on `wait`; the GIL is released for both. */
static PyObject *baton_run(Baton *post, Baton *wait, double t) {
    struct timespec ts = {0, 0};
    int forever = 0;
    if (baton_deadline(t, &ts, &forever) < 0) {
        return NULL;
    }
    int r;
    Py_BEGIN_ALLOW_THREADS
    if (post != NULL) {
        sem_post(&post->sem);
    }
    r = baton_sleep(&wait->sem, &ts, forever);
    Py_END_ALLOW_THREADS
    while (r < 0) {
        if (PyErr_CheckSignals() < 0) {
            return NULL;
        }
        Py_BEGIN_ALLOW_THREADS
        r = baton_sleep(&wait->sem, &ts, forever);
        Py_END_ALLOW_THREADS
    }
    return PyBool_FromLong(r);
}

static PyObject *baton_post(Baton *self, PyObject *noargs) {
    (void)noargs;
    if (sem_post(&self->sem) != 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

static int as_timeout(PyObject *o, double *t) {
    *t = PyFloat_AsDouble(o);
    if (*t == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "timeout must be a number of seconds, got %.80s", Py_TYPE(o)->tp_name);
        return -1;
    }
    return 0;
}

static PyObject *baton_wait(Baton *self, PyObject *arg) {
    double t;
    if (as_timeout(arg, &t) < 0) {
        return NULL;
    }
    return baton_run(NULL, self, t);
}

static PyObject *post_wait(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    double t;
    (void)self;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "post_wait(post, wait, timeout) takes 3 arguments, got %zd", nargs);
        return NULL;
    }
    for (int i = 0; i < 2; i++) {
        if (!PyObject_TypeCheck(args[i], &BatonType)) {
            PyErr_Format(PyExc_TypeError, "post_wait: argument %d must be a Baton, got %.80s", i + 1,
                         Py_TYPE(args[i])->tp_name);
            return NULL;
        }
    }
    if (as_timeout(args[2], &t) < 0) {
        return NULL;
    }
    return baton_run((Baton *)args[0], (Baton *)args[1], t);
}

static PyMethodDef baton_methods[] = {
    {"post", (PyCFunction)baton_post, METH_NOARGS, "post(): signal the baton"},
    {"wait", (PyCFunction)baton_wait, METH_O, "wait(timeout) -> bool (timeout < 0: no limit)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject BatonType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hicache_sdk._native.Baton",
    .tp_basicsize = sizeof(Baton),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A binary hand-off signal: post() and wait(timeout) with the GIL released.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)baton_init,
    .tp_dealloc = (destructor)baton_dealloc,
    .tp_methods = baton_methods,
};
#endif

static PyMethodDef methods[] = {
    {"copy_runs", copy_runs, METH_VARARGS, "copy_runs(runs) -> bytes copied; runs: (dst, src, n)"},
    {"gather", gather, METH_VARARGS, "gather(dst, segments) -> bytes copied"},
    {"scatter", scatter, METH_VARARGS, "scatter(src, segments) -> bytes copied"},
    {"copy_threads", copy_threads, METH_VARARGS, "copy_threads(n=-1) -> the setting before (0: default)"},
    {"copy_stream", copy_stream, METH_VARARGS, "copy_stream(flag=-1) -> the streaming setting before"},
    {"current_cpu", current_cpu, METH_NOARGS, "current_cpu() -> the calling thread's CPU, or -1"},
#ifdef __linux__
    {"post_wait", (PyCFunction)(void (*)(void))post_wait, METH_FASTCALL,
     "post_wait(a, b, timeout) -> bool: a.post() then b.wait(timeout), the GIL released"},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "hicache_sdk._native", "Bulk memory copies with the GIL released.", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) {
    const char *env = getenv("HICACHE_COPY_THREADS");
    if (env != NULL && *env) {
        int v = atoi(env);
        copy_threads_setting = v < 0 ? 0 : (v > MAX_THREADS ? MAX_THREADS : v);
    }
    const char *stream = getenv("HICACHE_COPY_STREAM");
    if (stream != NULL && *stream) {
        copy_stream_setting = atoi(stream) != 0;
    }
    PyObject *m = PyModule_Create(&module);
#ifdef __linux__
    if (m != NULL && (PyType_Ready(&BatonType) < 0 || PyModule_AddObjectRef(m, "Baton", (PyObject *)&BatonType) < 0 ||
                      native_runner_add_types(m) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
#endif
    return m;
}
