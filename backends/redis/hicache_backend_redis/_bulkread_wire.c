/*
 * The wire loop of hicache_backend_redis._bulkread (see _bulkread.c for the contract): it
 * sends a part's MGET commands with the refill policy and receives every reply, headers
 * through the reader's small buffer, values straight into their segments. Runs without the
 * GIL, except to run Python's signal handlers on EINTR.
 */
#include "_bulkread.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/socket.h>

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

/* After a receive that returned k <= 0 or a send that returned k < 0: 0 when a signal
 * interrupted it and its handler did not raise (retry the call), else the code to return. */
static int retry_or_fail(rd_t *r, ssize_t k) {
    if (k < 0 && errno == EINTR) {
        return interrupted(r);
    }
    return failed(r, k);
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
        int rc = retry_or_fail(r, k);
        if (rc) {
            return rc;
        }
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
                int rc = retry_or_fail(r, k);
                if (rc) {
                    return rc;
                }
                continue;
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
            int rc = retry_or_fail(r, k);
            if (rc) {
                return rc;
            }
            continue;
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


int bulkread_run(rd_t *r, plan_t *p) {
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

int bulkwrite_run(rd_t *r, wplan_t *p) {
    for (; p->reply < p->nvalues; p->reply++) {
        while (p->sent < p->nvalues && p->sent - p->reply < p->window) {
            Py_ssize_t v = p->sent;
            int niov = 0;
            p->iov[niov].iov_base = (void *)p->heads[v];
            p->iov[niov++].iov_len = p->head_lens[v];
            for (Py_ssize_t s = p->seg_at[v]; s < p->seg_at[v + 1]; s++) {
                if (p->segs[s].n) {
                    p->iov[niov].iov_base = (void *)p->segs[s].addr;
                    p->iov[niov++].iov_len = p->segs[s].n;
                }
            }
            p->iov[niov].iov_base = (void *)p->tail;
            p->iov[niov++].iov_len = p->tail_len;
            int rc = send_all(r, p->iov, niov);
            if (rc) {
                return rc;
            }
            p->sent++;
        }
        char kind;
        long long got;
        size_t adv;
        int rc = line(r, RECV, &kind, &got, &adv);
        if (rc) {
            return rc;
        }
        /* :1 / +OK written; :0 / $-1 the key existed (NX): the first writer's page stays */
        if (kind == ':' || kind == '+' || (kind == '$' && got == -1)) {
            r->start += adv;
            p->results[p->reply] = HIT;
        } else if (kind == '-') {
            return STOP; /* left unread: an error reply (OOM, NOPERM, READONLY) */
        } else {
            r->msg = "redis: unexpected reply to a write";
            return PROTOCOL;
        }
    }
    return DONE;
}
