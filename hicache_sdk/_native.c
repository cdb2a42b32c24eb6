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
 * The Python fallback (hicache_sdk.kit.segments) loops over ctypes.memmove when this module
 * could not be compiled: same results, more per-segment overhead.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

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

static Py_ssize_t run_all(run_t *runs, Py_ssize_t n) {
    Py_ssize_t total = 0;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t i = 0;
    while (i < n) {
        uintptr_t d = runs[i].dst, s = runs[i].src;
        size_t len = runs[i].n;
        Py_ssize_t j = i + 1;
        while (j < n && runs[j].dst == d + len && runs[j].src == s + len) {
            len += runs[j].n;
            j++;
        }
        if (len) {
            memmove((void *)d, (const void *)s, len);
        }
        total += (Py_ssize_t)len;
        i = j;
    }
    Py_END_ALLOW_THREADS
    return total;
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

static PyMethodDef methods[] = {
    {"copy_runs", copy_runs, METH_VARARGS, "copy_runs(runs) -> bytes copied; runs: (dst, src, n)"},
    {"gather", gather, METH_VARARGS, "gather(dst, segments) -> bytes copied"},
    {"scatter", scatter, METH_VARARGS, "scatter(src, segments) -> bytes copied"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "hicache_sdk._native", "Bulk memory copies with the GIL released.", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
