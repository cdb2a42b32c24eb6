/* Per-batch work of the adapter's hot path, one call per batch instead of Python per page.
 *
 * sha256_each(items) -> bytes: the 32-byte SHA-256 digest of each item (a str, hashed as its
 *   UTF-8 bytes, or a bytes object), concatenated in order. hashlib costs about a microsecond
 *   per page hash here (two Python calls and an object per digest); this is one call per batch
 *   and, on CPUs with the SHA extensions, about a tenth of that per page. The portable
 *   compression function is used where the SHA extensions are missing (checked once, cpuid).
 * rows(starts, page_size, runs, trailer_at, trailer_size) -> list[list[tuple[int, int]]]: the segments of
 *   each page of a linear pool (see the function), built without a Python loop.
 * records(hashes, templates, digest_at) -> bytearray: every page's integrity record, built
 *   from a per-column template with the page digest written in (SHA-256 as above).
 * names(hashes, prefix, suffix, fanout) -> list[str] | None: object names of a batch.
 * plan_names(prefix, suffixes, fanout, hex_only, keys) -> list[str] | None: the key check and
 *   every column's names of a batch in one call (a key scheme's NamePlan; see the function).
 * Namer(prefix, suffixes, fanout, hex_only, capacity): plan_names bound to one plan, which
 *   rewrites in place the names the caller let go of instead of allocating new ones.
 * all_hex64(items) -> bool: every item is a str of exactly 64 lowercase hex characters.
 * count_is(items, obj) -> int: how many items are obj (by identity).
 * swap_if_all(items, old, new) -> bool: every item of a list is old (identity)? then each is new.
 * OpStats(bounds): one operation's metrics totals, record(...) in one C call (see the type).
 * page_starts(address, count, itemsize, page_size, pool_size) -> list[int] | None: the start
 *   slot of each page of a host-indices array (int64 or int32 at address), or None when any
 *   page is not page_size consecutive slots from an aligned, non-negative start within the
 *   pool (the caller's numpy path then names what is wrong).
 *
 * Optional like _native: without a compiler the SDK uses hashlib and numpy (same results).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_SHANI_BUILD 1
#include <cpuid.h>
#include <immintrin.h>
#endif

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static const uint32_t H0[8] = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

typedef void (*compress_fn)(uint32_t st[8], const uint8_t *data, size_t nblocks);

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void compress_portable(uint32_t st[8], const uint8_t *p, size_t nblocks) {
    for (; nblocks; nblocks--, p += 64) {
        uint32_t w[64];
        for (int i = 0; i < 16; i++)
            w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
                   (uint32_t)p[4 * i + 3];
        for (int i = 16; i < 64; i++) {
            uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
            uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        uint32_t a = st[0], b = st[1], c = st[2], d = st[3], e = st[4], f = st[5], g = st[6], h = st[7];
        for (int i = 0; i < 64; i++) {
            uint32_t t1 = h + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i];
            uint32_t t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            h = g;
            g = f;
            f = e;
            e = d + t1;
            d = c;
            c = b;
            b = a;
            a = t1 + t2;
        }
        st[0] += a;
        st[1] += b;
        st[2] += c;
        st[3] += d;
        st[4] += e;
        st[5] += f;
        st[6] += g;
        st[7] += h;
    }
}

#ifdef HAVE_SHANI_BUILD
/* The SHA extensions: two rounds per sha256rnds2 on the state split as ABEF / CDGH; the
 * message schedule four words at a time (msg1: W[t-16] + s0(W[t-15]); + W[t-7]; msg2: + s1). */
__attribute__((target("sha,sse4.1,ssse3"))) static void compress_shani(uint32_t st[8], const uint8_t *p,
                                                                        size_t nblocks) {
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i tmp = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&st[0]), 0xB1); /* CDAB */
    __m128i s1 = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&st[4]), 0x1B);  /* EFGH */
    __m128i s0 = _mm_alignr_epi8(tmp, s1, 8);                                         /* ABEF */
    s1 = _mm_blend_epi16(s1, tmp, 0xF0);                                              /* CDGH */
    for (; nblocks; nblocks--, p += 64) {
        __m128i abef = s0, cdgh = s1, w[4];
        for (int i = 0; i < 16; i++) {
            __m128i m;
            if (i < 4) {
                m = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * i)), bswap);
            } else { /* w[i&3] is W(i-4), then W(i-3), W(i-2), W(i-1) */
                __m128i x = _mm_sha256msg1_epu32(w[i & 3], w[(i + 1) & 3]);
                x = _mm_add_epi32(x, _mm_alignr_epi8(w[(i + 3) & 3], w[(i + 2) & 3], 4));
                m = _mm_sha256msg2_epu32(x, w[(i + 3) & 3]);
            }
            w[i & 3] = m;
            m = _mm_add_epi32(m, _mm_loadu_si128((const __m128i *)&K256[4 * i]));
            s1 = _mm_sha256rnds2_epu32(s1, s0, m);
            s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(m, 0x0E));
        }
        s0 = _mm_add_epi32(s0, abef);
        s1 = _mm_add_epi32(s1, cdgh);
    }
    tmp = _mm_shuffle_epi32(s0, 0x1B);     /* FEBA */
    s1 = _mm_shuffle_epi32(s1, 0xB1);      /* DCHG */
    s0 = _mm_blend_epi16(tmp, s1, 0xF0);   /* DCBA */
    s1 = _mm_alignr_epi8(s1, tmp, 8);      /* HGFE */
    _mm_storeu_si128((__m128i *)&st[0], s0);
    _mm_storeu_si128((__m128i *)&st[4], s1);
}

static int cpu_has_shani(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 19)) || !(c & (1u << 9)))
        return 0; /* SSE4.1, SSSE3 */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    return (b >> 29) & 1; /* SHA */
}
#endif

static compress_fn compress = compress_portable;

static void sha256(const uint8_t *data, size_t len, uint8_t out[32]) {
    uint32_t st[8];
    uint8_t tail[128];
    memcpy(st, H0, sizeof st);
    size_t full = len / 64;
    if (full)
        compress(st, data, full);
    size_t rest = len - full * 64;
    memcpy(tail, data + full * 64, rest);
    tail[rest] = 0x80;
    size_t tail_len = rest + 9 <= 64 ? 64 : 128;
    memset(tail + rest + 1, 0, tail_len - rest - 1);
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++)
        tail[tail_len - 1 - i] = (uint8_t)(bits >> (8 * i));
    compress(st, tail, tail_len / 64);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(st[i] >> 24);
        out[4 * i + 1] = (uint8_t)(st[i] >> 16);
        out[4 * i + 2] = (uint8_t)(st[i] >> 8);
        out[4 * i + 3] = (uint8_t)st[i];
    }
}

static PyObject *sha256_each(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "sha256_each() expects a sequence of str or bytes");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * 32);
    if (out == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    uint8_t *dst = (uint8_t *)PyBytes_AS_STRING(out);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *data;
        Py_ssize_t len;
        if (PyUnicode_Check(items[i])) {
            data = PyUnicode_AsUTF8AndSize(items[i], &len);
            if (data == NULL)
                goto fail;
        } else if (PyBytes_Check(items[i])) {
            data = PyBytes_AS_STRING(items[i]);
            len = PyBytes_GET_SIZE(items[i]);
        } else {
            PyErr_Format(PyExc_TypeError, "sha256_each() item %zd is %.100s, not str or bytes", i,
                         Py_TYPE(items[i])->tp_name);
            goto fail;
        }
        sha256((const uint8_t *)data, (size_t)len, dst + 32 * i);
    }
    Py_DECREF(seq);
    return out;
fail:
    Py_DECREF(seq);
    Py_DECREF(out);
    return NULL;
}

/* records(hashes, templates, digest_at) -> bytearray: for each template (one per column, all
 * of one length L) and each hash, the template with the hash's SHA-256 at digest_at; column
 * by column (row c * n + i is column c of hash i), n * len(templates) rows of L bytes. */
static PyObject *records(PyObject *self, PyObject *args) {
    PyObject *hashes_in, *templates_in;
    Py_ssize_t digest_at;
    if (!PyArg_ParseTuple(args, "OOn:records", &hashes_in, &templates_in, &digest_at))
        return NULL;
    PyObject *hashes = PySequence_Fast(hashes_in, "records(): hashes must be a sequence");
    if (hashes == NULL)
        return NULL;
    PyObject *templates = PySequence_Fast(templates_in, "records(): templates must be a sequence");
    if (templates == NULL) {
        Py_DECREF(hashes);
        return NULL;
    }
    PyObject *out = NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(hashes), m = PySequence_Fast_GET_SIZE(templates), len = -1;
    for (Py_ssize_t c = 0; c < m; c++) {
        PyObject *t = PySequence_Fast_GET_ITEM(templates, c);
        if (!PyBytes_Check(t) || (len >= 0 && PyBytes_GET_SIZE(t) != len)) {
            PyErr_SetString(PyExc_ValueError, "records(): templates must be bytes of one length");
            goto done;
        }
        len = PyBytes_GET_SIZE(t);
    }
    if (m && (digest_at < 0 || digest_at + 32 > len)) {
        PyErr_SetString(PyExc_ValueError, "records(): the digest does not fit the template");
        goto done;
    }
    if ((out = PyByteArray_FromStringAndSize(NULL, m ? n * m * len : 0)) == NULL)
        goto done;
    uint8_t *dst = (uint8_t *)PyByteArray_AS_STRING(out), digest[32];
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *h = PySequence_Fast_GET_ITEM(hashes, i);
        Py_ssize_t hl;
        const char *hd = PyUnicode_Check(h) ? PyUnicode_AsUTF8AndSize(h, &hl) : NULL;
        if (hd == NULL) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "records(): hash %zd is %.100s, not str", i, Py_TYPE(h)->tp_name);
            Py_CLEAR(out);
            goto done;
        }
        sha256((const uint8_t *)hd, (size_t)hl, digest);
        for (Py_ssize_t c = 0; c < m; c++) {
            uint8_t *row = dst + (c * n + i) * len;
            memcpy(row, PyBytes_AS_STRING(PySequence_Fast_GET_ITEM(templates, c)), (size_t)len);
            memcpy(row + digest_at, digest, 32);
        }
    }
done:
    Py_DECREF(hashes);
    Py_DECREF(templates);
    return out;
}

static PyObject *all_hex64(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "all_hex64() expects a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    int ok = 1;
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        PyObject *o = items[i];
        if (!PyUnicode_Check(o) || !PyUnicode_IS_COMPACT_ASCII(o) || PyUnicode_GET_LENGTH(o) != 64) {
            ok = 0;
            break;
        }
        const unsigned char *c = (const unsigned char *)PyUnicode_DATA(o);
        unsigned char bad = 0; /* range checks without a branch: a loop the compiler vectorises */
        for (int k = 0; k < 64; k++)
            bad |= (unsigned char)((unsigned char)(c[k] - '0') > 9) & (unsigned char)((unsigned char)(c[k] - 'a') > 5);
        ok = !bad;
    }
    Py_DECREF(seq);
    return PyBool_FromLong(ok);
}

static PyObject *page_starts(PyObject *self, PyObject *args) {
    unsigned long long address;
    Py_ssize_t count, itemsize, page_size, pool_size;
    if (!PyArg_ParseTuple(args, "Knnnn:page_starts", &address, &count, &itemsize, &page_size, &pool_size))
        return NULL;
    if ((itemsize != 8 && itemsize != 4) || page_size <= 0 || count < 0 || count % page_size ||
        (count && address == 0)) {
        PyErr_SetString(PyExc_ValueError, "page_starts: bad arguments");
        return NULL;
    }
    Py_ssize_t pages = count / page_size;
    PyObject *out = PyList_New(pages);
    if (out == NULL)
        return NULL;
    const int64_t *a64 = (const int64_t *)(uintptr_t)address;
    const int32_t *a32 = (const int32_t *)(uintptr_t)address;
    for (Py_ssize_t p = 0; p < pages; p++) {
        Py_ssize_t at = p * page_size;
        int64_t start = itemsize == 8 ? a64[at] : (int64_t)a32[at];
        int good = start >= 0 && start % page_size == 0 && (pool_size < 0 || start + page_size <= pool_size);
        if (good) { /* differences OR-ed together: a loop the compiler vectorises */
            uint64_t diff = 0;
            if (itemsize == 8) {
                const int64_t *row = a64 + at;
                for (Py_ssize_t k = 1; k < page_size; k++)
                    diff |= (uint64_t)(row[k] - row[0] - k);
            } else {
                const int32_t *row = a32 + at;
                for (Py_ssize_t k = 1; k < page_size; k++)
                    diff |= (uint64_t)((int64_t)row[k] - row[0] - k);
            }
            good = diff == 0;
        }
        PyObject *v = good ? PyLong_FromLongLong(start) : NULL;
        if (v == NULL) {
            Py_DECREF(out);
            if (PyErr_Occurred())
                return NULL;
            Py_RETURN_NONE;
        }
        PyList_SET_ITEM(out, p, v);
    }
    return out;
}

/* rows(starts, page_size, runs, trailer_at, trailer_size): for each page (index p = start /
 * page_size), the list of segments
 * [(base + p * stride, nbytes) for (base, stride, nbytes) in runs] followed, when
 * trailer_at >= 0, by (trailer_at + i * trailer_size, trailer_size) for the i-th page. */
static PyObject *rows(PyObject *self, PyObject *args) {
    PyObject *pages_in, *runs_in;
    long long trailer_at, page_size;
    Py_ssize_t trailer_size;
    if (!PyArg_ParseTuple(args, "OLOLn:rows", &pages_in, &page_size, &runs_in, &trailer_at, &trailer_size))
        return NULL;
    if (page_size <= 0) {
        PyErr_SetString(PyExc_ValueError, "rows(): page_size must be positive");
        return NULL;
    }
    PyObject *pages = PySequence_Fast(pages_in, "rows(): pages must be a sequence");
    if (pages == NULL)
        return NULL;
    PyObject *runs = PySequence_Fast(runs_in, "rows(): runs must be a sequence");
    if (runs == NULL) {
        Py_DECREF(pages);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(pages), k = PySequence_Fast_GET_SIZE(runs);
    Py_ssize_t width = k + (trailer_at >= 0);
    long long base[64], stride[64];
    PyObject *size[65] = {NULL}, *out = NULL;
    if (k > 64) {
        PyErr_SetString(PyExc_ValueError, "rows(): at most 64 runs");
        goto done;
    }
    for (Py_ssize_t j = 0; j < k; j++) {
        PyObject *r = PySequence_Fast_GET_ITEM(runs, j);
        if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 3) {
            PyErr_Format(PyExc_ValueError, "rows(): run %zd must be (base, stride, nbytes)", j);
            goto done;
        }
        base[j] = PyLong_AsLongLong(PyTuple_GET_ITEM(r, 0));
        stride[j] = PyLong_AsLongLong(PyTuple_GET_ITEM(r, 1));
        size[j] = PyTuple_GET_ITEM(r, 2);
        Py_INCREF(size[j]);
        if (PyErr_Occurred())
            goto done;
    }
    if (trailer_at >= 0 && (size[k] = PyLong_FromSsize_t(trailer_size)) == NULL)
        goto done;
    if ((out = PyList_New(n)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long p = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(pages, i));
        if (p == -1 && PyErr_Occurred())
            goto fail;
        p /= page_size;
        PyObject *row = PyList_New(width);
        if (row == NULL)
            goto fail;
        PyList_SET_ITEM(out, i, row);
        for (Py_ssize_t j = 0; j < width; j++) {
            long long addr = j < k ? base[j] + p * stride[j] : trailer_at + (long long)i * trailer_size;
            PyObject *a = PyLong_FromLongLong(addr), *t = a ? PyTuple_New(2) : NULL;
            if (t == NULL) {
                Py_XDECREF(a);
                goto fail;
            }
            Py_INCREF(size[j]);
            PyTuple_SET_ITEM(t, 0, a);
            PyTuple_SET_ITEM(t, 1, size[j]);
            PyList_SET_ITEM(row, j, t);
        }
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    for (Py_ssize_t j = 0; j <= k && j < 65; j++)
        Py_XDECREF(size[j]);
    Py_DECREF(pages);
    Py_DECREF(runs);
    return out;
}

/* d = prefix + (h[:fanout] + "/" if fanout) + h + suffix (d holds exactly that many chars). */
static inline void compose_name(char *d, const char *p, Py_ssize_t lp, const char *hd, Py_ssize_t lh,
                                Py_ssize_t fanout, const char *q, Py_ssize_t ls) {
    Py_ssize_t f = fanout ? fanout + 1 : 0;
    memcpy(d, p, (size_t)lp);
    if (fanout) {
        memcpy(d + lp, hd, (size_t)fanout);
        d[lp + fanout] = '/';
    }
    memcpy(d + lp + f, hd, (size_t)lh);
    memcpy(d + lp + f + lh, q, (size_t)ls);
}

/* names(hashes, prefix, suffix, fanout) -> [prefix + (h[:fanout] + "/" if fanout) + h + suffix]:
 * the object names of a batch, for ASCII strings (None when any piece is not ASCII: the
 * caller builds those names in Python). */
static PyObject *names(PyObject *self, PyObject *args) {
    PyObject *hashes_in, *prefix, *suffix;
    Py_ssize_t fanout;
    if (!PyArg_ParseTuple(args, "OUUn:names", &hashes_in, &prefix, &suffix, &fanout))
        return NULL;
    if (!PyUnicode_IS_COMPACT_ASCII(prefix) || !PyUnicode_IS_COMPACT_ASCII(suffix) || fanout < 0)
        Py_RETURN_NONE;
    PyObject *hashes = PySequence_Fast(hashes_in, "names(): hashes must be a sequence");
    if (hashes == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(hashes);
    Py_ssize_t lp = PyUnicode_GET_LENGTH(prefix), ls = PyUnicode_GET_LENGTH(suffix);
    const char *p = (const char *)PyUnicode_DATA(prefix), *q = (const char *)PyUnicode_DATA(suffix);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *h = PySequence_Fast_GET_ITEM(hashes, i);
        if (!PyUnicode_Check(h) || !PyUnicode_IS_COMPACT_ASCII(h) || PyUnicode_GET_LENGTH(h) < fanout) {
            Py_CLEAR(out);
            Py_INCREF(Py_None);
            out = Py_None;
            goto done;
        }
        Py_ssize_t lh = PyUnicode_GET_LENGTH(h), f = fanout ? fanout + 1 : 0;
        PyObject *name = PyUnicode_New(lp + f + lh + ls, 127);
        if (name == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        compose_name((char *)PyUnicode_DATA(name), p, lp, (const char *)PyUnicode_DATA(h), lh, fanout, q, ls);
        PyList_SET_ITEM(out, i, name);
    }
done:
    Py_DECREF(hashes);
    return out;
}

/* Whether the compact-ASCII text d[0:n] is a page hash the checked path accepts: hex_only,
 * exactly 64 lowercase hex chars (check_hex_page_hash); else a non-empty plain fragment of
 * printable ASCII without '/', '\\' or ".." (a subset of check_plain_fragment's rule: any
 * other text goes to the checked path, which decides). */
static int plan_hash_ok(const unsigned char *d, Py_ssize_t n, int hex_only) {
    if (hex_only) {
        if (n != 64)
            return 0;
        unsigned char bad = 0;
        for (int k = 0; k < 64; k++)
            bad |= (unsigned char)((unsigned char)(d[k] - '0') > 9) & (unsigned char)((unsigned char)(d[k] - 'a') > 5);
        return !bad;
    }
    if (n == 0)
        return 0;
    /* no early exit, no branch: a loop the compiler vectorises (SGLang's hashes are 64 chars) */
    unsigned char bad = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        unsigned char c = d[k];
        bad |= (unsigned char)((unsigned char)(c - 0x20) > 0x5e) | (unsigned char)(c == '/') |
               (unsigned char)(c == '\\');
    }
    for (Py_ssize_t k = 0; k + 1 < n; k++)
        bad |= (unsigned char)(d[k] == '.') & (unsigned char)(d[k + 1] == '.');
    return !bad;
}

/* Whether a name this module made and still holds (slot) may be rewritten in place for the
 * next batch: nothing else refers to it (the caller dropped the list it was handed, and no
 * dict, set or interning holds it), and it has the wanted length. Rewriting a str that
 * nobody else can see is indistinguishable from making a new one, without the allocation
 * and the free (the cost of naming a batch; docs/backends/mooncake.md). Its cached hash is
 * reset by the caller. Never where the GIL is not the only lock (free-threaded builds). */
static inline int name_reusable(PyObject *s, Py_ssize_t len) {
#ifdef Py_GIL_DISABLED
    (void)s;
    (void)len;
    return 0;
#else
    if (Py_REFCNT(s) != 1 || !PyUnicode_CheckExact(s) || !PyUnicode_IS_COMPACT_ASCII(s) ||
        PyUnicode_GET_LENGTH(s) != len || PyUnicode_CHECK_INTERNED(s))
        return 0;
#if PY_VERSION_HEX < 0x030C0000
    if (((PyASCIIObject *)s)->wstr != NULL) /* a cached wchar_t copy would go stale */
        return 0;
#endif
    return 1;
#endif
}

/* The text of a str known to be compact ASCII (PyUnicode_DATA without its checks, which gcc
 * does not always inline). */
#define ASCII_DATA(op) ((char *)(((PyASCIIObject *)(op)) + 1))

/* The page-hash part of a name made by compose_name with the same prefix and fanout, of the
 * same length and ending in the wanted suffix: only that part differs (SGLang's 64-char
 * hashes in one fixed-size copy). */
static inline void rewrite_hash(char *d, Py_ssize_t lp, const char *hd, Py_ssize_t lh, Py_ssize_t fanout) {
    if (fanout) {
        memcpy(d + lp, hd, (size_t)fanout);
        d += fanout + 1;
    }
    if (lh == 64) { /* four 16-byte moves (gcc makes one fixed 64-byte memcpy a slow rep movs) */
        for (int k = 0; k < 64; k += 16)
            memcpy(d + lp + k, hd + k, 16);
    } else
        memcpy(d + lp, hd, (size_t)lh);
}

/* The names of a batch by a name plan, column-major (see plan_names). With slots (a Namer's
 * recycled names, cap of them), name j reuses slots[j] when name_reusable (only its hash
 * part rewritten when it already ends in the wanted suffix: every name of one Namer starts
 * with the same prefix and fanout part), else is made and kept there; *reused counts the
 * reuses. None when the check cannot vouch for keys. */
static PyObject *plan_names_core(PyObject *prefix, PyObject *suffixes, Py_ssize_t fanout, int hex_only,
                                 PyObject *keys, PyObject **slots, Py_ssize_t cap, long long *reused) {
    if (!(PyList_CheckExact(keys) || PyTuple_CheckExact(keys)) || !PyUnicode_IS_COMPACT_ASCII(prefix) || fanout < 0)
        Py_RETURN_NONE;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(keys), n_cols = PyTuple_GET_SIZE(suffixes);
    PyObject **items = PySequence_Fast_ITEMS(keys);
    for (Py_ssize_t c = 0; c < n_cols; c++) {
        PyObject *q = PyTuple_GET_ITEM(suffixes, c);
        if (!PyUnicode_Check(q) || !PyUnicode_IS_COMPACT_ASCII(q))
            Py_RETURN_NONE;
    }
#if defined(__GNUC__) || defined(__clang__)
    /* The kept names are usually out of the caches (a lookup follows a remote call): ask for
     * all of their lines now, so that they arrive while the keys are checked. */
    for (Py_ssize_t j = 0, m = n * n_cols < cap ? n * n_cols : cap; j < m; j++) {
        if (slots[j] != NULL) {
            __builtin_prefetch(slots[j], 1);
            __builtin_prefetch((char *)slots[j] + 64, 1);
        }
    }
#endif
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *h = items[i];
        if (!PyUnicode_CheckExact(h) || !PyUnicode_IS_COMPACT_ASCII(h) || PyUnicode_GET_LENGTH(h) < fanout ||
            !plan_hash_ok((const unsigned char *)PyUnicode_DATA(h), PyUnicode_GET_LENGTH(h), hex_only))
            Py_RETURN_NONE;
    }
    Py_ssize_t lp = PyUnicode_GET_LENGTH(prefix), f = fanout ? fanout + 1 : 0;
    const char *p = (const char *)PyUnicode_DATA(prefix);
    /* the one allocation that may run the collector (and so Python code) comes first: from
     * here on nothing runs Python code, so no other call sees the slots half rewritten */
    PyObject *out = PyList_New(n * n_cols);
    if (out == NULL)
        return NULL;
    long long again = 0;
    for (Py_ssize_t c = 0; c < n_cols; c++) {
        PyObject *qs = PyTuple_GET_ITEM(suffixes, c);
        Py_ssize_t ls = PyUnicode_GET_LENGTH(qs);
        const char *q = (const char *)PyUnicode_DATA(qs);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *h = items[i];
            Py_ssize_t lh = PyUnicode_GET_LENGTH(h), len = lp + f + lh + ls, j = c * n + i;
            PyObject *name;
            if (j < cap && slots[j] != NULL && name_reusable(slots[j], len)) {
                name = slots[j];
                Py_INCREF(name);
                ((PyASCIIObject *)name)->hash = -1;
                again++;
                if (memcmp(ASCII_DATA(name) + len - ls, q, (size_t)ls) == 0) { /* its suffix already */
                    rewrite_hash(ASCII_DATA(name), lp, ASCII_DATA(h), lh, fanout);
                    PyList_SET_ITEM(out, j, name);
                    continue;
                }
            } else {
                name = PyUnicode_New(len, 127);
                if (name == NULL) {
                    Py_DECREF(out);
                    return NULL;
                }
                if (j < cap) { /* the old one (if any) is another's now, or freed: a str runs no code */
                    Py_INCREF(name);
                    Py_XSETREF(slots[j], name);
                }
            }
            compose_name(ASCII_DATA(name), p, lp, ASCII_DATA(h), lh, fanout, q, ls);
            PyList_SET_ITEM(out, j, name);
        }
    }
    if (reused != NULL)
        *reused += again;
    return out;
}

/* plan_names(prefix, suffixes, fanout, hex_only, keys) -> list[str] | None: the names of a
 * batch by a key scheme's name plan (keys/scheme_base.py NamePlan), column-major: for each
 * suffix, prefix + (h[:fanout] + "/" if fanout) + h + suffix for every h of keys. Also the
 * key check: keys must be a list or tuple of compact-ASCII str that pass plan_hash_ok; None
 * for anything else (the checked path then raises the precise error, or accepts). Every
 * name is a new str (Namer below recycles them). */
static PyObject *plan_names(PyObject *self, PyObject *args) {
    PyObject *keys, *prefix, *suffixes;
    Py_ssize_t fanout;
    int hex_only;
    if (!PyArg_ParseTuple(args, "UO!npO:plan_names", &prefix, &PyTuple_Type, &suffixes, &fanout, &hex_only, &keys))
        return NULL;
    return plan_names_core(prefix, suffixes, fanout, hex_only, keys, NULL, 0, NULL);
}

/* -- Namer: plan_names bound to one plan, recycling the names it handed out ---------------
 *
 * Namer(prefix, suffixes, fanout, hex_only, capacity); namer(keys) is plan_names(prefix,
 * suffixes, fanout, hex_only, keys), equal lists, except that the first `capacity` names
 * are kept and, once the caller has let go of one (see name_reusable), rewritten in place
 * for the next batch instead of allocating a new str and freeing the old. A name the caller
 * keeps (in the list, a dict, a set, interned) is never touched. `reused` counts rewrites. */

typedef struct {
    PyObject_HEAD
    PyObject *prefix, *suffixes;
    Py_ssize_t fanout, cap;
    int hex_only;
    long long reused;
    PyObject **slots;
    vectorcallfunc vectorcall;
} Namer;

static int namer_init(Namer *self, PyObject *args, PyObject *kw) {
    PyObject *prefix, *suffixes;
    Py_ssize_t fanout, cap;
    int hex_only;
    if (kw != NULL && PyDict_GET_SIZE(kw) > 0) {
        PyErr_SetString(PyExc_TypeError, "Namer() takes no keyword arguments");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "UO!npn:Namer", &prefix, &PyTuple_Type, &suffixes, &fanout, &hex_only, &cap))
        return -1;
    if (self->prefix != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Namer.__init__ called twice");
        return -1;
    }
    if (fanout < 0 || cap < 0) {
        PyErr_Format(PyExc_ValueError, "Namer: fanout and capacity must be >= 0, got %zd and %zd", fanout, cap);
        return -1;
    }
    for (Py_ssize_t c = 0; c < PyTuple_GET_SIZE(suffixes); c++) {
        if (!PyUnicode_Check(PyTuple_GET_ITEM(suffixes, c))) {
            PyErr_SetString(PyExc_TypeError, "Namer: suffixes must be a tuple of str");
            return -1;
        }
    }
#ifdef Py_GIL_DISABLED
    cap = 0;
#endif
    if (cap > 0 && (self->slots = PyMem_Calloc((size_t)cap, sizeof(PyObject *))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_INCREF(prefix);
    Py_INCREF(suffixes);
    self->prefix = prefix;
    self->suffixes = suffixes;
    self->fanout = fanout;
    self->hex_only = hex_only;
    self->cap = cap;
    return 0;
}

static PyObject *namer_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Namer *self = (Namer *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0)) {
        PyErr_SetString(PyExc_TypeError, "Namer(keys) takes exactly one positional argument");
        return NULL;
    }
    if (self->prefix == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Namer not initialised");
        return NULL;
    }
    return plan_names_core(self->prefix, self->suffixes, self->fanout, self->hex_only, args[0], self->slots,
                           self->cap, &self->reused);
}

static void namer_dealloc(Namer *self) {
    for (Py_ssize_t j = 0; j < self->cap && self->slots != NULL; j++)
        Py_XDECREF(self->slots[j]);
    PyMem_Free(self->slots);
    Py_XDECREF(self->prefix);
    Py_XDECREF(self->suffixes);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *namer_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    Namer *self = (Namer *)PyType_GenericNew(type, args, kw);
    if (self != NULL)
        self->vectorcall = namer_vectorcall;
    return (PyObject *)self;
}

static PyMemberDef namer_members[] = {
    {"reused", T_LONGLONG, offsetof(Namer, reused), READONLY, "names rewritten in place so far"},
    {"capacity", T_PYSSIZET, offsetof(Namer, cap), READONLY, "how many names are kept for reuse"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject NamerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hicache_sdk._hotpath.Namer",
    .tp_basicsize = sizeof(Namer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Namer(prefix, suffixes, fanout, hex_only, capacity): plan_names bound to one plan, "
              "recycling the names the caller let go of.",
    .tp_new = namer_new,
    .tp_init = (initproc)namer_init,
    .tp_dealloc = (destructor)namer_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Namer, vectorcall),
    .tp_members = namer_members,
};

/* count_is(items, obj) -> int: how many items are obj (identity, no comparison: list.count
 * compares, and an int against None costs two NotImplemented round trips per item). */
static PyObject *count_is(PyObject *self, PyObject *args) {
    PyObject *seq_in, *obj;
    if (!PyArg_ParseTuple(args, "OO:count_is", &seq_in, &obj))
        return NULL;
    PyObject *seq = PySequence_Fast(seq_in, "count_is() expects a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), k = 0;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++)
        k += items[i] == obj;
    Py_DECREF(seq);
    return PyLong_FromSsize_t(k);
}

/* swap_if_all(items, old, new) -> bool: when every item of the list items *is* old (identity),
 * replace each by new in place and answer True; else leave items as they are, False. A
 * transport's all-present answer made from the list its client just returned (warm) instead
 * of a new one (a fresh 2 KiB list, cold after a remote call, cost 2.7 us per lookup). */
static PyObject *swap_if_all(PyObject *self, PyObject *args) {
    PyObject *items, *old, *new_;
    if (!PyArg_ParseTuple(args, "O!OO:swap_if_all", &PyList_Type, &items, &old, &new_))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items);
    PyObject **it = ((PyListObject *)items)->ob_item;
    for (Py_ssize_t i = 0; i < n; i++)
        if (it[i] != old)
            Py_RETURN_FALSE;
    if (old != new_) { /* no Python code runs: old stays referenced by the caller's argument */
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_INCREF(new_);
            it[i] = new_;
        }
        for (Py_ssize_t i = 0; i < n; i++)
            Py_DECREF(old);
    }
    Py_RETURN_TRUE;
}

static PyObject *set_accelerated(PyObject *self, PyObject *args) {
    int on = -1;
    if (!PyArg_ParseTuple(args, "|i", &on))
        return NULL;
    int before = compress != compress_portable;
#ifdef HAVE_SHANI_BUILD
    if (on == 1 && cpu_has_shani())
        compress = compress_shani;
#endif
    if (on == 0)
        compress = compress_portable;
    return PyBool_FromLong(before);
}

/* -- OpStats: one operation's metrics, recorded in one C call ------------------------------
 *
 * OpStats(bounds) with bounds the latency buckets' upper bounds (a tuple of floats, ascending;
 * the last bucket is +inf). record(pages, nbytes, seconds, ok) adds one call; it runs without
 * releasing the GIL and calls no Python code, so it is atomic with respect to every other
 * Python thread (no lock). totals() -> (calls, failures, pages, bytes, seconds, [counts]) in
 * one atomic read. Metrics (resilience/metrics.py) keeps one per op; a Python class with the
 * same methods (under the Metrics lock) stands in where this module did not build. */

typedef struct {
    PyObject_HEAD
    long long calls, failures, pages, bytes;
    double seconds;
    Py_ssize_t nb;
    double *bounds;
    long long *hist;
} OpStats;

static int opstats_init(OpStats *self, PyObject *args, PyObject *kw) {
    PyObject *bounds;
    if (kw != NULL && PyDict_GET_SIZE(kw) > 0) {
        PyErr_SetString(PyExc_TypeError, "OpStats(bounds) takes no keyword arguments");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "O!:OpStats", &PyTuple_Type, &bounds))
        return -1;
    if (self->bounds != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "OpStats.__init__ called twice");
        return -1;
    }
    Py_ssize_t nb = PyTuple_GET_SIZE(bounds);
    self->bounds = PyMem_Calloc((size_t)(nb ? nb : 1), sizeof(double));
    self->hist = PyMem_Calloc((size_t)nb + 1, sizeof(long long));
    if (self->bounds == NULL || self->hist == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < nb; i++) {
        double b = PyFloat_AsDouble(PyTuple_GET_ITEM(bounds, i));
        if (b == -1.0 && PyErr_Occurred())
            return -1;
        if (i > 0 && !(b > self->bounds[i - 1])) {
            PyErr_SetString(PyExc_ValueError, "OpStats: bounds must be ascending");
            return -1;
        }
        self->bounds[i] = b;
    }
    self->nb = nb;
    return 0;
}

static void opstats_dealloc(OpStats *self) {
    PyMem_Free(self->bounds);
    PyMem_Free(self->hist);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *opstats_record(OpStats *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "record(pages, nbytes, seconds, ok) takes 4 arguments, got %zd", nargs);
        return NULL;
    }
    if (self->hist == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "OpStats not initialised");
        return NULL;
    }
    long long pages = PyLong_AsLongLong(args[0]);
    if (pages == -1 && PyErr_Occurred())
        return NULL;
    long long nbytes = PyLong_AsLongLong(args[1]);
    if (nbytes == -1 && PyErr_Occurred())
        return NULL;
    double seconds = PyFloat_AsDouble(args[2]);
    if (seconds == -1.0 && PyErr_Occurred())
        return NULL;
    int ok = PyObject_IsTrue(args[3]);
    if (ok < 0)
        return NULL;
    Py_ssize_t lo = 0, hi = self->nb; /* bisect_left: the first bound >= seconds */
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (self->bounds[mid] < seconds)
            lo = mid + 1;
        else
            hi = mid;
    }
    self->calls += 1;
    self->failures += !ok;
    self->pages += pages;
    self->bytes += nbytes;
    self->seconds += seconds;
    self->hist[lo] += 1;
    Py_RETURN_NONE;
}

static PyObject *opstats_totals(OpStats *self, PyObject *noargs) {
    (void)noargs;
    PyObject *counts = PyList_New(self->nb + 1);
    if (counts == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i <= self->nb; i++) {
        PyObject *v = PyLong_FromLongLong(self->hist ? self->hist[i] : 0);
        if (v == NULL) {
            Py_DECREF(counts);
            return NULL;
        }
        PyList_SET_ITEM(counts, i, v);
    }
    return Py_BuildValue("(LLLLdN)", self->calls, self->failures, self->pages, self->bytes, self->seconds, counts);
}

static PyMethodDef opstats_methods[] = {
    {"record", (PyCFunction)(void (*)(void))opstats_record, METH_FASTCALL,
     "record(pages, nbytes, seconds, ok): one call of the operation"},
    {"totals", (PyCFunction)opstats_totals, METH_NOARGS,
     "totals() -> (calls, failures, pages, bytes, seconds, latency counts)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject OpStatsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hicache_sdk._hotpath.OpStats",
    .tp_basicsize = sizeof(OpStats),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One operation's call, failure, page, byte, time and latency-bucket totals.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)opstats_init,
    .tp_dealloc = (destructor)opstats_dealloc,
    .tp_methods = opstats_methods,
};

static PyMethodDef methods[] = {
    {"sha256_each", sha256_each, METH_O, "sha256_each(items) -> bytes: 32-byte digests, concatenated"},
    {"records", records, METH_VARARGS, "records(hashes, templates, digest_at) -> bytearray of rows"},
    {"names", names, METH_VARARGS, "names(hashes, prefix, suffix, fanout) -> list[str] | None (not ASCII)"},
    {"count_is", count_is, METH_VARARGS, "count_is(items, obj) -> how many items are obj"},
    {"swap_if_all", swap_if_all, METH_VARARGS,
     "swap_if_all(items, old, new) -> whether every item of the list was old (then each is new now)"},
    {"plan_names", plan_names, METH_VARARGS,
     "plan_names(prefix, suffixes, fanout, hex_only, keys) -> list[str] | None (checked path needed)"},
    {"rows", rows, METH_VARARGS, "rows(starts, page_size, runs, trailer_at, trailer_size) -> list of segment lists"},
    {"all_hex64", all_hex64, METH_O, "all_hex64(items) -> whether every item is 64 lowercase hex chars"},
    {"page_starts", page_starts, METH_VARARGS,
     "page_starts(address, count, itemsize, page_size, pool_size) -> list[int] | None (pool_size -1: none)"},
    {"set_accelerated", set_accelerated, METH_VARARGS,
     "set_accelerated(on=-1) -> whether the SHA extensions were in use before (tests: 0 forces the portable code)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "hicache_sdk._hotpath", "Per-batch work of the adapter's hot path.", -1, methods,
};

PyMODINIT_FUNC PyInit__hotpath(void) {
#ifdef HAVE_SHANI_BUILD
    if (cpu_has_shani())
        compress = compress_shani;
#endif
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && (PyType_Ready(&OpStatsType) < 0 || PyModule_AddObjectRef(m, "OpStats", (PyObject *)&OpStatsType) < 0 ||
                      PyType_Ready(&NamerType) < 0 || PyModule_AddObjectRef(m, "Namer", (PyObject *)&NamerType) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
