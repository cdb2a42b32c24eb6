/*
 * hicache_sdk._copy: copy_runs(runs) -> int, the bulk copy of hicache_sdk.kit.segments.
 *
 * runs: a sequence of (dst, src, nbytes) sequences of ints (addresses). Every run is checked
 * first, with the GIL held: a negative size, or a null address with a non-zero size, raises
 * ValueError and nothing is copied. Then the copies run with the GIL released, in order.
 *
 * Why C: a call that copies 4 MiB or more (a staged batch) writes its runs of 64 KiB or more
 * with non-temporal (streaming) stores on x86-64. Those bytes go on to a GPU or a socket, not
 * back to this CPU soon; streaming them past the caches spares the read-for-ownership of the
 * destination and leaves the caches to the code that runs next. glibc streams only single
 * copies above 3/4 of the shared cache, never a batch of 256 KiB pages. A run that overlaps
 * itself is a plain memmove. Elsewhere (no SSE2), every run is a memmove.
 *
 * Without a compiler hicache_sdk.kit.segments copies with ctypes.memmove: the same results.
 * Only CPython's public API is used.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#define HAVE_STREAM 1
#else
#define HAVE_STREAM 0
#endif

#define STREAM_TOTAL (4u << 20) /* a call this large streams ... */
#define STREAM_RUN (64u << 10)  /* ... its runs this large */

typedef struct {
    char *dst;
    const char *src;
    size_t n;
} run_t;

#if HAVE_STREAM
static void stream_copy(char *d, const char *s, size_t n)
{
    size_t head = (16 - ((uintptr_t)d & 15)) & 15; /* align the destination to 16 bytes */
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    for (size_t i = n / 64; i > 0; i--, d += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_stream_si128((__m128i *)d, a);
        _mm_stream_si128((__m128i *)(d + 16), b);
        _mm_stream_si128((__m128i *)(d + 32), c);
        _mm_stream_si128((__m128i *)(d + 48), e);
    }
    memcpy(d, s, n % 64);
}
#endif

static int parse_addr(PyObject *o, uintptr_t *out)
{
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *out = (uintptr_t)v;
    return 0;
}

static PyObject *copy_runs(PyObject *self, PyObject *arg)
{
    PyObject *seq = PySequence_Fast(arg, "copy_runs: runs must be a sequence of (dst, src, nbytes)");
    if (seq == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    run_t *runs = PyMem_Malloc(sizeof(run_t) * (count ? (size_t)count : 1));
    if (runs == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    size_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PySequence_Fast(PySequence_Fast_GET_ITEM(seq, i), "copy_runs: a run must be a sequence");
        if (item == NULL)
            goto fail;
        uintptr_t d = 0, s = 0;
        long long n = -1;
        if (PySequence_Fast_GET_SIZE(item) == 3 && parse_addr(PySequence_Fast_GET_ITEM(item, 0), &d) == 0 &&
            parse_addr(PySequence_Fast_GET_ITEM(item, 1), &s) == 0)
            n = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(item, 2));
        Py_DECREF(item);
        if (PyErr_Occurred())
            goto fail;
        if (n < 0 || (n > 0 && (d == 0 || s == 0))) {
            PyErr_Format(PyExc_ValueError, "bad copy run (%zu, %zu, %lld) at entry %zd", (size_t)d, (size_t)s, n, i);
            goto fail;
        }
        runs[i] = (run_t){(char *)d, (const char *)s, (size_t)n};
        total += (size_t)n;
    }
    Py_BEGIN_ALLOW_THREADS
    int stream = HAVE_STREAM && total >= STREAM_TOTAL;
    for (Py_ssize_t i = 0; i < count; i++) {
        run_t r = runs[i];
        int apart = r.dst + r.n <= r.src || r.src + r.n <= r.dst;
#if HAVE_STREAM
        if (stream && apart && r.n >= STREAM_RUN) {
            stream_copy(r.dst, r.src, r.n);
            continue;
        }
#endif
        (void)apart;
        if (r.n)
            memmove(r.dst, r.src, r.n);
    }
#if HAVE_STREAM
    if (stream)
        _mm_sfence(); /* the streamed bytes are visible before the call returns */
#endif
    (void)stream;
    Py_END_ALLOW_THREADS
    PyMem_Free(runs);
    Py_DECREF(seq);
    return PyLong_FromSize_t(total);
fail:
    PyMem_Free(runs);
    Py_DECREF(seq);
    return NULL;
}

static PyMethodDef methods[] = {
    {"copy_runs", copy_runs, METH_O, "copy_runs(runs) -> int: copy every (dst, src, nbytes) run; the GIL released."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_copy", "Bulk copies (hicache_sdk.kit.segments).", -1, methods};

PyMODINIT_FUNC PyInit__copy(void) { return PyModule_Create(&module); }
