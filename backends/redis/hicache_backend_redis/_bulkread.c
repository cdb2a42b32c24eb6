/*
 * hicache_backend_redis._bulkread: a part's streamed MGET replies received straight into
 * page memory, and a part's writes sent straight from it, with the GIL released once for
 * the whole run.
 *
 * stream(fd, buffered, keys, counts, values, results,
 *        reply, sent, ahead, ahead_max, low_water, min_in_flight)
 *     -> (code, detail, reply, sent, ahead, leftover)
 *
 *   fd        a connected, *blocking* socket bounded by SO_RCVTIMEO / SO_SNDTIMEO.
 *   buffered  bytes the Python connection already received (consumed first).
 *   keys      the key (bytes) of every value, reply after reply; counts: the values in each
 *             reply (one MGET command of counts[r] keys each, encoded here).
 *   values    the segments ((address, nbytes) pairs) of every value, in the same order; a
 *             command's weight is the sum of its values' sizes.
 *   results   a writable buffer of len(values) bytes: HIT, ABSENT or MISMATCH per value read.
 *   reply, sent, ahead: where the run resumes (replies read, commands sent, value bytes
 *             requested and not yet read), as mget.stream_mget keeps them; ahead_max,
 *             low_water, min_in_flight: its refill policy (a refill is sent as a reply
 *             starts when every command sent was read, or fewer than low_water bytes are
 *             requested: then up to ahead_max bytes, at least min_in_flight commands).
 *
 *   Every address is parsed first, with the GIL (a bad entry raises ValueError before any
 *   I/O); the sends and receives then run without it. A reply header goes through a receive
 *   of at most HEADER_RECV bytes when a value of at least DIRECT_MIN follows, so nearly all of
 *   a large value is received by the kernel straight into its segments: the rest of the value
 *   and its CRLF are one blocking MSG_WAITALL recvmsg over every segment at once. A small
 *   value goes through the private buffer. A null bulk is ABSENT; a bulk of another size than
 *   the value's segments is drained (nothing written to them) and reported as MISMATCH.
 *
 *   code DONE: every reply was read. STOP: the header of reply `reply` is not an array of
 *   counts[reply] values (an error reply such as -MOVED or -NOPERM): it is left unread at the
 *   start of `leftover` for the caller (its command was sent and `ahead` counts it read).
 *   EOF (the peer closed, or the socket was shut down), TIMEOUT (SO_RCVTIMEO / SO_SNDTIMEO
 *   passed with no progress), OSERROR (detail: errno), PROTOCOL (detail: a message): the
 *   stream is cut somewhere inside a reply, the connection must be discarded. `leftover`:
 *   bytes received past what was parsed (at most RECV), to put back into the connection's
 *   buffer. No byte of any value is touched once the call has returned.
 *
 *   A signal (EINTR) runs Python's handlers (with the GIL, in the main thread) and resumes;
 *   an exception from a handler propagates (the connection must then be discarded).
 *
 * write(fd, buffered, heads, tail, values, results, reply, sent, window)
 *     -> (code, detail, reply, sent, leftover)
 *
 *   A part's create-if-absent writes: value v is sent as heads[v] (bytes: "SETNX key" or
 *   "SET key" and the value's length), its segments (sent from that memory) and tail
 *   (the bytes after every value), with at most `window` values whose reply is not read
 *   yet; then its reply is read: ":n", "+OK" or "$-1" (written, or the key was there) is
 *   HIT. reply, sent: where the run resumes. Codes as for stream(): STOP leaves an error
 *   reply ("-OOM ...", "-READONLY ...") unread at the start of `leftover`, for the caller to
 *   read and resume after; any other reply is PROTOCOL. No byte of any value is read once
 *   the call has returned.
 */
#include "_bulkread.h"

#include <string.h>

static int as_ssize(PyObject *o, Py_ssize_t *out, const char *what, Py_ssize_t i) {
    Py_ssize_t v = PyLong_AsSsize_t(o);
    if (v < 0) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError) ||
            PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s %zd must be a non-negative int", what, i);
        }
        return -1;
    }
    *out = v;
    return 0;
}

/* Parse `values` (a sequence of sequences of (address, nbytes)) into segs / seg_at / sizes. */
static int parse_values(PyObject *values, Py_ssize_t nvalues, seg_t **segs, Py_ssize_t *seg_at,
                        size_t *sizes) {
    PyObject **items = PySequence_Fast_ITEMS(values);
    Py_ssize_t cap = nvalues * 2 + 1, used = 0;
    seg_t *out = PyMem_Malloc((size_t)cap * sizeof(seg_t));
    if (out == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t v = 0; v < nvalues; v++) {
        seg_at[v] = used;
        sizes[v] = 0;
        PyObject *seq = PySequence_Fast(items[v], "values: each must be a sequence of (address, nbytes)");
        if (seq == NULL) {
            goto fail;
        }
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        PyObject **pairs = PySequence_Fast_ITEMS(seq);
        if (used + n > cap) {
            cap = (used + n) * 2;
            seg_t *grown = PyMem_Realloc(out, (size_t)cap * sizeof(seg_t));
            if (grown == NULL) {
                Py_DECREF(seq);
                PyErr_NoMemory();
                goto fail;
            }
            out = grown;
        }
        for (Py_ssize_t j = 0; j < n; j++) {
            PyObject *pair = pairs[j];
            Py_ssize_t len = 0;
            if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
                PyErr_Format(PyExc_ValueError, "value %zd: segments must be (address, nbytes) tuples", v);
                Py_DECREF(seq);
                goto fail;
            }
            unsigned long long addr = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(pair, 0));
            if (addr == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear();
                PyErr_Format(PyExc_ValueError, "value %zd: an address must be a non-negative int", v);
                Py_DECREF(seq);
                goto fail;
            }
            if (as_ssize(PyTuple_GET_ITEM(pair, 1), &len, "value", v) < 0) {
                Py_DECREF(seq);
                goto fail;
            }
            out[used].addr = (uintptr_t)addr;
            out[used].n = (size_t)len;
            used++;
            sizes[v] += (size_t)len;
        }
        Py_DECREF(seq);
    }
    seg_at[nvalues] = used;
    *segs = out;
    return 0;
fail:
    PyMem_Free(out);
    return -1;
}

/* Decimal digits of v (v >= 0) written at p; returns their count. */
static size_t put_int(char *p, size_t v) {
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++) {
        p[i] = tmp[n - 1 - i];
    }
    return n;
}

/* Encode one MGET command per reply (counts[r] keys each) into one buffer; iov[r] its frame. */
static char *encode_frames(PyObject **keys, const Py_ssize_t *cnt, Py_ssize_t nr, struct iovec *iov) {
    size_t total = 0;
    Py_ssize_t k = 0;
    for (Py_ssize_t r = 0; r < nr; r++) {
        total += 24 + 14;
        for (Py_ssize_t j = 0; j < cnt[r]; j++, k++) {
            total += (size_t)PyBytes_GET_SIZE(keys[k]) + 24 + 5;
        }
    }
    char *out = PyMem_Malloc(total ? total : 1);
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    char *p = out;
    k = 0;
    for (Py_ssize_t r = 0; r < nr; r++) {
        iov[r].iov_base = p;
        *p++ = '*';
        p += put_int(p, (size_t)cnt[r] + 1);
        memcpy(p, "\r\n$4\r\nMGET\r\n", 12);
        p += 12;
        for (Py_ssize_t j = 0; j < cnt[r]; j++, k++) {
            size_t n = (size_t)PyBytes_GET_SIZE(keys[k]);
            *p++ = '$';
            p += put_int(p, n);
            *p++ = '\r';
            *p++ = '\n';
            memcpy(p, PyBytes_AS_STRING(keys[k]), n);
            p += n;
            *p++ = '\r';
            *p++ = '\n';
        }
        iov[r].iov_len = (size_t)(p - (char *)iov[r].iov_base);
    }
    return out;
}

static PyObject *stream(PyObject *self, PyObject *args) {
    (void)self;
    int fd;
    Py_buffer buffered, results;
    PyObject *keys_in, *counts_in, *values_in;
    Py_ssize_t reply, sent;
    long long ahead, ahead_max, low_water, min_in_flight;
    if (!PyArg_ParseTuple(args, "iy*OOOw*nnLLLL", &fd, &buffered, &keys_in, &counts_in, &values_in,
                          &results, &reply, &sent, &ahead, &ahead_max, &low_water, &min_in_flight)) {
        return NULL;
    }
    PyObject *ret = NULL;
    PyObject *keys = NULL, *counts = NULL, *values = NULL;
    struct iovec *iov = NULL;
    long long *w = NULL;
    Py_ssize_t *cnt = NULL, *first = NULL, *seg_at = NULL;
    size_t *sizes = NULL;
    seg_t *segs = NULL;
    char *buf = NULL, *wire = NULL;

    keys = PySequence_Fast(keys_in, "keys must be a sequence of bytes");
    counts = keys ? PySequence_Fast(counts_in, "counts must be a sequence of ints") : NULL;
    values = counts ? PySequence_Fast(values_in, "values must be a sequence of segments") : NULL;
    if (values == NULL) {
        goto out;
    }
    Py_ssize_t nr = PySequence_Fast_GET_SIZE(counts), nv = PySequence_Fast_GET_SIZE(values);
    if (PySequence_Fast_GET_SIZE(keys) != nv) {
        PyErr_SetString(PyExc_ValueError, "keys and values differ in length");
        goto out;
    }
    if (results.len != nv || reply < 0 || reply > nr || sent < reply || sent > nr ||
        buffered.len > (Py_ssize_t)RECV) {
        PyErr_SetString(PyExc_ValueError, "results, reply, sent or buffered out of range");
        goto out;
    }
    iov = PyMem_Malloc((size_t)(nr + 1) * sizeof(struct iovec));
    w = PyMem_Malloc((size_t)(nr + 1) * sizeof(long long));
    cnt = PyMem_Malloc((size_t)(nr + 1) * sizeof(Py_ssize_t));
    first = PyMem_Malloc((size_t)(nr + 1) * sizeof(Py_ssize_t));
    seg_at = PyMem_Malloc((size_t)(nv + 1) * sizeof(Py_ssize_t));
    sizes = PyMem_Malloc((size_t)(nv + 1) * sizeof(size_t));
    buf = PyMem_Malloc(RECV);
    if (!iov || !w || !cnt || !first || !seg_at || !sizes || !buf) {
        PyErr_NoMemory();
        goto out;
    }
    PyObject **key_items = PySequence_Fast_ITEMS(keys);
    for (Py_ssize_t i = 0; i < nv; i++) {
        if (!PyBytes_Check(key_items[i])) {
            PyErr_Format(PyExc_ValueError, "key %zd must be bytes", i);
            goto out;
        }
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < nr; i++) {
        if (as_ssize(PySequence_Fast_GET_ITEM(counts, i), &cnt[i], "count", i) < 0) {
            goto out;
        }
        first[i] = total;
        total += cnt[i];
        if (total > nv) {
            break;
        }
    }
    if (total != nv) {
        PyErr_SetString(PyExc_ValueError, "counts do not add up to len(values)");
        goto out;
    }
    if (parse_values(values, nv, &segs, seg_at, sizes) < 0) {
        goto out;
    }
    for (Py_ssize_t i = 0; i < nr; i++) { /* a command's weight: the value bytes it asks for */
        w[i] = 0;
        for (Py_ssize_t v = first[i]; v < first[i] + cnt[i]; v++) {
            w[i] += (long long)sizes[v];
        }
    }
    wire = encode_frames(key_items, cnt, nr, iov);
    if (wire == NULL) {
        goto out;
    }
    memcpy(buf, buffered.buf, (size_t)buffered.len);
    rd_t r = {fd, buf, 0, (size_t)buffered.len, NULL, 0, NULL};
    plan_t p = {nr,   iov,   w,     cnt,       first,     segs,          seg_at,
                sizes, (unsigned char *)results.buf, reply, sent, ahead, ahead_max, low_water,
                min_in_flight};
    r.ts = PyEval_SaveThread();
    int code = bulkread_run(&r, &p);
    PyEval_RestoreThread(r.ts);
    if (code == SIGNAL) {
        goto out; /* a signal handler raised */
    }
    PyObject *detail;
    if (code == OSERROR) {
        detail = PyLong_FromLong(r.err);
    } else if (code == PROTOCOL) {
        detail = PyUnicode_FromString(r.msg);
    } else {
        detail = Py_NewRef(Py_None);
    }
    if (detail == NULL) {
        goto out;
    }
    ret = Py_BuildValue("(iNnnLy#)", code, detail, p.reply, p.sent, p.ahead, buf + r.start,
                        (Py_ssize_t)(r.end - r.start));
out:
    PyBuffer_Release(&buffered);
    PyBuffer_Release(&results);
    Py_XDECREF(keys);
    Py_XDECREF(counts);
    Py_XDECREF(values);
    PyMem_Free(iov);
    PyMem_Free(w);
    PyMem_Free(cnt);
    PyMem_Free(first);
    PyMem_Free(seg_at);
    PyMem_Free(sizes);
    PyMem_Free(segs);
    PyMem_Free(buf);
    PyMem_Free(wire);
    return ret;
}

/* write(): see the module docs above. */
static PyObject *write_values(PyObject *self, PyObject *args) {
    (void)self;
    int fd;
    Py_buffer buffered, tail, results;
    PyObject *heads_in, *values_in;
    Py_ssize_t reply, sent, window;
    if (!PyArg_ParseTuple(args, "iy*Oy*Ow*nnn", &fd, &buffered, &heads_in, &tail, &values_in, &results, &reply,
                          &sent, &window)) {
        return NULL;
    }
    PyObject *ret = NULL, *heads = NULL, *values = NULL;
    const char **hp = NULL;
    size_t *hl = NULL, *sizes = NULL;
    Py_ssize_t *seg_at = NULL;
    seg_t *segs = NULL;
    struct iovec *iov = NULL;
    char *buf = NULL;
    heads = PySequence_Fast(heads_in, "heads must be a sequence of bytes");
    values = heads ? PySequence_Fast(values_in, "values must be a sequence of segments") : NULL;
    if (values == NULL) {
        goto out;
    }
    Py_ssize_t nv = PySequence_Fast_GET_SIZE(values);
    if (PySequence_Fast_GET_SIZE(heads) != nv || results.len != nv || reply < 0 || sent < reply || sent > nv ||
        window < 1 || buffered.len > (Py_ssize_t)RECV) {
        PyErr_SetString(PyExc_ValueError, "heads, results, reply, sent, window or buffered out of range");
        goto out;
    }
    hp = PyMem_Malloc((size_t)(nv + 1) * sizeof(char *));
    hl = PyMem_Malloc((size_t)(nv + 1) * sizeof(size_t));
    seg_at = PyMem_Malloc((size_t)(nv + 1) * sizeof(Py_ssize_t));
    sizes = PyMem_Malloc((size_t)(nv + 1) * sizeof(size_t));
    buf = PyMem_Malloc(RECV);
    if (!hp || !hl || !seg_at || !sizes || !buf) {
        PyErr_NoMemory();
        goto out;
    }
    PyObject **head_items = PySequence_Fast_ITEMS(heads);
    for (Py_ssize_t i = 0; i < nv; i++) {
        if (!PyBytes_Check(head_items[i])) {
            PyErr_Format(PyExc_ValueError, "head %zd must be bytes", i);
            goto out;
        }
        hp[i] = PyBytes_AS_STRING(head_items[i]);
        hl[i] = (size_t)PyBytes_GET_SIZE(head_items[i]);
    }
    if (parse_values(values, nv, &segs, seg_at, sizes) < 0) {
        goto out;
    }
    Py_ssize_t most = 0;
    for (Py_ssize_t i = 0; i < nv; i++) {
        most = seg_at[i + 1] - seg_at[i] > most ? seg_at[i + 1] - seg_at[i] : most;
    }
    iov = PyMem_Malloc((size_t)(most + 2) * sizeof(struct iovec));
    if (iov == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    memcpy(buf, buffered.buf, (size_t)buffered.len);
    rd_t r = {fd, buf, 0, (size_t)buffered.len, NULL, 0, NULL};
    wplan_t p = {nv,   hp, hl, tail.buf, (size_t)tail.len, segs, seg_at, iov, (unsigned char *)results.buf,
                 reply, sent, window};
    r.ts = PyEval_SaveThread();
    int code = bulkwrite_run(&r, &p);
    PyEval_RestoreThread(r.ts);
    if (code == SIGNAL) {
        goto out;
    }
    PyObject *detail;
    if (code == OSERROR) {
        detail = PyLong_FromLong(r.err);
    } else if (code == PROTOCOL) {
        detail = PyUnicode_FromString(r.msg);
    } else {
        detail = Py_NewRef(Py_None);
    }
    if (detail == NULL) {
        goto out;
    }
    ret = Py_BuildValue("(iNnny#)", code, detail, p.reply, p.sent, buf + r.start, (Py_ssize_t)(r.end - r.start));
out:
    PyBuffer_Release(&buffered);
    PyBuffer_Release(&tail);
    PyBuffer_Release(&results);
    Py_XDECREF(heads);
    Py_XDECREF(values);
    PyMem_Free(hp);
    PyMem_Free(hl);
    PyMem_Free(seg_at);
    PyMem_Free(sizes);
    PyMem_Free(segs);
    PyMem_Free(iov);
    PyMem_Free(buf);
    return ret;
}

static PyMethodDef methods[] = {
    {"stream", stream, METH_VARARGS,
     "stream(fd, buffered, keys, counts, values, results, reply, sent, ahead, ahead_max, low_water, "
     "min_in_flight) -> (code, detail, reply, sent, ahead, leftover)"},
    {"write", write_values, METH_VARARGS,
     "write(fd, buffered, heads, tail, values, results, reply, sent, window) -> (code, detail, reply, sent, "
     "leftover)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "hicache_backend_redis._bulkread",
    "Streamed MGET replies received straight into page memory, the GIL released once per run.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__bulkread(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    static const struct {
        const char *name;
        int value;
    } consts[] = {{"DONE", DONE},       {"STOP", STOP},         {"EOF", EOF_},
                  {"TIMEOUT", TIMEOUT}, {"OSERROR", OSERROR},   {"PROTOCOL", PROTOCOL},
                  {"HIT", HIT},         {"ABSENT", ABSENT},     {"MISMATCH", MISMATCH},
                  {"RECV", (int)RECV},  {"HEADER_RECV", (int)HEADER_RECV}, {"DIRECT_MIN", (int)DIRECT_MIN}};
    for (size_t i = 0; i < sizeof consts / sizeof consts[0]; i++) {
        if (PyModule_AddIntConstant(m, consts[i].name, consts[i].value) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}

