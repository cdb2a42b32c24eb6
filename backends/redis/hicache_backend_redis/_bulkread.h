/*
 * The shared types of hicache_backend_redis._bulkread: the reader's state (rd_t), one value's
 * segments (seg_t) and a part's plan (plan_t); bulkread_run is the wire loop
 * (_bulkread_wire.c), called without the GIL by stream() (_bulkread.c).
 */
#ifndef HICACHE_BULKREAD_H
#define HICACHE_BULKREAD_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
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

/* A part's create-if-absent writes: value v is heads[v], its segments, then tail. */
typedef struct {
    Py_ssize_t nvalues;
    const char *const *heads;
    const size_t *head_lens;
    const char *tail;
    size_t tail_len;
    const seg_t *segs;
    const Py_ssize_t *seg_at; /* per value: its first segment (seg_at[nvalues]: the end) */
    struct iovec *iov;        /* room for the most segments of a value, plus 2 */
    unsigned char *results;
    Py_ssize_t reply, sent, window;
} wplan_t;

/* Run the plan from p->reply on (see _bulkread.c); DONE, STOP or an error code. */
int bulkread_run(rd_t *r, plan_t *p);
/* Run the writes from p->reply on (see _bulkread.c, write); DONE, STOP or an error code. */
int bulkwrite_run(rd_t *r, wplan_t *p);

#endif
