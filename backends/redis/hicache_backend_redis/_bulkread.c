/*
 * hicache_backend_redis._bulkread: a part's streamed MGET replies received straight into
 * page memory, with the GIL released once for the whole run.
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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define RECV ((size_t)1 << 16)
#define HEADER_RECV ((size_t)64)
#define DIRECT_MIN ((size_t)16 << 10)
#define MAX_IOV 1024

enum { DONE = 0, STOP = 1, EOF_ = 2, TIMEOUT = 3, OSERROR = 4, PROTOCOL = 5, SIGNAL = 6 };
enum { HIT = 1, ABSENT = 2, MISMATCH = 3 };

typedef struct {
    uintptr_t addr;
    size_t n;
} seg_t;

typedef struct {
    int fd;
    char *buf;
    size_t start, end;
    PyThreadState *ts;
    int err;
    const char *msg;
} rd_t;

/* EINTR: run the signal handlers with the GIL; 0 to retry, SIGNAL if one raised. */
static int interrupted(rd_t *r) {
    PyEval_RestoreThread(r->ts);
    int bad = PyErr_CheckSignals();
    r->ts = PyEval_SaveThread();
    return bad ? SIGNAL : 0;
}

static int failed(rd_t *r, ssize_t k) {
    if (k == 0) {
        return EOF_;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return TIMEOUT;
    }
    r->err = errno;
    return OSERROR;
}

/* Receive at least one byte into the buffer, at most `limit`. */
static int fill(rd_t *r, size_t limit) {
    if (r->start == r->end) {
        r->start = r->end = 0;
    } else if (RECV - r->end < limit && r->start > 0) {
        memmove(r->buf, r->buf + r->start, r->end - r->start);
        r->end -= r->start;
        r->start = 0;
    }
    if (r->end == RECV) {
        r->msg = "redis: reply header longer than the receive buffer";
        return PROTOCOL;
    }
    size_t room = RECV - r->end;
    for (;;) {
        ssize_t k = recv(r->fd, r->buf + r->end, room < limit ? room : limit, 0);
        if (k > 0) {
            r->end += (size_t)k;
            return 0;
        }
        if (k < 0 && errno == EINTR) {
            int rc = interrupted(r);
            if (rc) {
                return rc;
            }
            continue;
        }
        return failed(r, k);
    }
}

/* Find one reply line at the buffer's start (receiving at most `limit` bytes at a time):
 * its kind (first byte; 0 for an empty line), its integer (LLONG_MIN when the rest is not
 * one) and its length with the CRLF, which the caller consumes (r->start += *adv). */
static int line(rd_t *r, size_t limit, char *kind, long long *value, size_t *adv) {
    size_t off = 0; /* bytes after r->start already searched */
    char *eol;
    for (;;) {
        size_t have = r->end - r->start;
        eol = have >= 2 ? memmem(r->buf + r->start + off, have - off, "\r\n", 2) : NULL;
        if (eol != NULL) {
            break;
        }
        off = have ? have - 1 : 0; /* a '\r' may end the buffer */
        int rc = fill(r, limit);
        if (rc) {
            return rc;
        }
    }
    const char *p = r->buf + r->start;
    size_t len = (size_t)(eol - p);
    *adv = len + 2;
    *kind = len ? p[0] : 0;
    *value = LLONG_MIN;
    size_t i = 1;
    int neg = 0;
    if (i < len && p[i] == '-') {
        neg = 1;
        i++;
    }
    if (i < len && len - i <= 18) {
        long long v = 0;
        for (; i < len && p[i] >= '0' && p[i] <= '9'; i++) {
            v = v * 10 + (p[i] - '0');
        }
        if (i == len) {
            *value = neg ? -v : v;
        }
    }
    return 0;
}

/* Drain n bytes (a value of the wrong size and its CRLF): nothing is written to the pages. */
static int drain(rd_t *r, size_t n) {
    size_t have = r->end - r->start;
    size_t k = have < n ? have : n;
    r->start += k;
    n -= k;
    while (n) {
        r->start = r->end = 0; /* the buffer is empty here; exact receives never over-read */
        int rc = fill(r, n < RECV ? n : RECV);
        if (rc) {
            return rc;
        }
        n -= r->end;
        r->end = 0;
    }
    return 0;
}

/* Receive a value of `n` bytes (the sum of its segments) and its CRLF into the segments. */
static int value(rd_t *r, const seg_t *segs, Py_ssize_t nseg, size_t n) {
    char crlf[2];
    if (n + 2 < DIRECT_MIN) { /* small: through the buffer (fewer receives for many) */
        while (r->end - r->start < n + 2) {
            int rc = fill(r, RECV);
            if (rc) {
                return rc;
            }
        }
    }
    struct iovec iov[MAX_IOV];
    Py_ssize_t s = 0;
    size_t off = 0; /* into segs[s]; s == nseg: the CRLF */
    size_t left = n + 2;
    while (left) {
        /* what is buffered first, then one MSG_WAITALL recvmsg over what is left */
        int niov = 0;
        Py_ssize_t t = s;
        size_t toff = off;
        while (niov < MAX_IOV && t <= nseg) {
            char *base = t < nseg ? (char *)segs[t].addr : crlf;
            size_t len = t < nseg ? segs[t].n : 2;
            if (len > toff) {
                iov[niov].iov_base = base + toff;
                iov[niov].iov_len = len - toff;
                niov++;
            }
            t++;
            toff = 0;
        }
        size_t got;
        size_t have = r->end - r->start;
        if (have) {
            got = 0;
            for (int i = 0; i < niov && got < have; i++) {
                size_t k = have - got < iov[i].iov_len ? have - got : iov[i].iov_len;
                memcpy(iov[i].iov_base, r->buf + r->start + got, k);
                got += k;
            }
            r->start += got;
        } else {
            struct msghdr m;
            memset(&m, 0, sizeof m);
            m.msg_iov = iov;
            m.msg_iovlen = (size_t)niov;
            ssize_t k = recvmsg(r->fd, &m, MSG_WAITALL);
            if (k <= 0) {
                if (k < 0 && errno == EINTR) {
                    int rc = interrupted(r);
                    if (rc) {
                        return rc;
                    }
                    continue;
                }
                return failed(r, k);
            }
            got = (size_t)k;
        }
        left -= got;
        while (got) { /* advance (s, off) by got bytes */
            size_t len = s < nseg ? segs[s].n : 2;
            if (got >= len - off) {
                got -= len - off;
                s++;
                off = 0;
            } else {
                off += got;
                got = 0;
            }
        }
    }
    if (crlf[0] != '\r' || crlf[1] != '\n') {
        r->msg = "redis: bulk reply not terminated by CRLF";
        return PROTOCOL;
    }
    return 0;
}

static int send_all(rd_t *r, struct iovec *iov, int niov) {
    int i = 0;
    while (i < niov) {
        struct msghdr m;
        memset(&m, 0, sizeof m);
        m.msg_iov = iov + i;
        m.msg_iovlen = (size_t)(niov - i < MAX_IOV ? niov - i : MAX_IOV);
        ssize_t k = sendmsg(r->fd, &m, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR) {
                int rc = interrupted(r);
                if (rc) {
                    return rc;
                }
                continue;
            }
            return failed(r, -1);
        }
        size_t got = (size_t)k;
        while (got && i < niov) {
            if (got >= iov[i].iov_len) {
                got -= iov[i].iov_len;
                i++;
            } else {
                iov[i].iov_base = (char *)iov[i].iov_base + got;
                iov[i].iov_len -= got;
                got = 0;
            }
        }
    }
    return 0;
}

typedef struct {
    Py_ssize_t nreplies;
    struct iovec *frames;
    const long long *weights;
    const Py_ssize_t *counts;
    const Py_ssize_t *first; /* per reply: its first value's index */
    const seg_t *segs;
    const Py_ssize_t *seg_at; /* per value: its first segment (seg_at[nvalues]: the end) */
    const size_t *sizes;      /* per value: the sum of its segments */
    unsigned char *results;
    Py_ssize_t reply, sent;
    long long ahead, ahead_max, low_water, min_in_flight;
} plan_t;

static int run(rd_t *r, plan_t *p) {
    for (; p->reply < p->nreplies; p->reply++) {
        Py_ssize_t n = p->reply;
        if (p->sent == n || p->ahead < p->low_water) {
            Py_ssize_t k = p->sent;
            while (k < p->nreplies && (k - n < p->min_in_flight || p->ahead < p->ahead_max)) {
                p->ahead += p->weights[k];
                k++;
            }
            if (k > p->sent) {
                int rc = send_all(r, p->frames + p->sent, (int)(k - p->sent));
                if (rc) {
                    return rc;
                }
                p->sent = k;
            }
        }
        p->ahead -= p->weights[n];
        Py_ssize_t v0 = p->first[n], cnt = p->counts[n];
        char kind;
        long long got;
        size_t adv;
        int rc = line(r, cnt && p->sizes[v0] >= DIRECT_MIN ? HEADER_RECV : RECV, &kind, &got, &adv);
        if (rc) {
            return rc;
        }
        if (kind != '*' || got != cnt) {
            return STOP; /* left unread: an error reply, or a shape the caller reports */
        }
        r->start += adv;
        for (Py_ssize_t v = v0; v < v0 + cnt; v++) {
            rc = line(r, p->sizes[v] >= DIRECT_MIN ? HEADER_RECV : RECV, &kind, &got, &adv);
            if (rc) {
                return rc;
            }
            r->start += adv;
            if (kind != '$' || got == LLONG_MIN) {
                r->msg = "redis: expected a bulk reply";
                return PROTOCOL;
            }
            if (got < 0) {
                p->results[v] = ABSENT;
            } else if ((unsigned long long)got != p->sizes[v]) {
                rc = drain(r, (size_t)got + 2);
                if (rc) {
                    return rc;
                }
                p->results[v] = MISMATCH;
            } else {
                rc = value(r, p->segs + p->seg_at[v], p->seg_at[v + 1] - p->seg_at[v], p->sizes[v]);
                if (rc) {
                    return rc;
                }
                p->results[v] = HIT;
            }
        }
    }
    return DONE;
}

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
    int code = run(&r, &p);
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

static PyMethodDef methods[] = {
    {"stream", stream, METH_VARARGS,
     "stream(fd, buffered, keys, counts, values, results, reply, sent, ahead, ahead_max, low_water, "
     "min_in_flight) -> (code, detail, reply, sent, ahead, leftover)"},
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
