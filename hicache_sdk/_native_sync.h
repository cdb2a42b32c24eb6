/*
 * Shared by the hand-off primitives of hicache_sdk._native (_native.c: Baton, post_wait;
 * _native_runner.c: the deadline runner): waits on a POSIX semaphore up to a CLOCK_MONOTONIC
 * deadline, with the GIL released by the caller. Linux only.
 */
#ifndef HICACHE_NATIVE_SYNC_H
#define HICACHE_NATIVE_SYNC_H

#ifdef __linux__
#include <Python.h>

#include <errno.h>
#include <math.h>
#include <semaphore.h>
#include <time.h>

/* Timeout in seconds -> absolute CLOCK_MONOTONIC deadline; *forever = 1 for t < 0 or t too
 * large to matter (over 10 years). -1 with ValueError for NaN. */
static inline int baton_deadline(double t, struct timespec *ts, int *forever) {
    if (isnan(t)) {
        PyErr_SetString(PyExc_ValueError, "timeout must be a number, got nan");
        return -1;
    }
    *forever = t < 0 || t > 3.2e8;
    if (!*forever) {
        clock_gettime(CLOCK_MONOTONIC, ts);
        double whole = (double)(long long)t;
        ts->tv_sec += (time_t)whole;
        ts->tv_nsec += (long)((t - whole) * 1e9);
        if (ts->tv_nsec >= 1000000000L) {
            ts->tv_sec += 1;
            ts->tv_nsec -= 1000000000L;
        }
    }
    return 0;
}

/* sem_wait until a CLOCK_MONOTONIC deadline. sem_clockwait is glibc 2.30+; elsewhere (older
 * glibc, musl) the remaining time is turned into a CLOCK_REALTIME deadline per attempt. */
static inline int sem_wait_until(sem_t *sem, const struct timespec *ts) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 30))
    return sem_clockwait(sem, CLOCK_MONOTONIC, ts);
#else
    struct timespec now, real;
    clock_gettime(CLOCK_MONOTONIC, &now);
    clock_gettime(CLOCK_REALTIME, &real);
    long long left = (long long)(ts->tv_sec - now.tv_sec) * 1000000000LL + (ts->tv_nsec - now.tv_nsec);
    if (left < 0) {
        left = 0;
    }
    real.tv_sec += (time_t)(left / 1000000000LL);
    real.tv_nsec += (long)(left % 1000000000LL);
    if (real.tv_nsec >= 1000000000L) {
        real.tv_sec += 1;
        real.tv_nsec -= 1000000000L;
    }
    return sem_timedwait(sem, &real);
#endif
}

/* Called with the GIL released. 1: posted to us; 0: timed out; -1: interrupted (EINTR). */
static inline int baton_sleep(sem_t *sem, const struct timespec *ts, int forever) {
    int rc = forever ? sem_wait(sem) : sem_wait_until(sem, ts);
    if (rc == 0) {
        return 1;
    }
    return errno == EINTR ? -1 : 0;
}

#endif /* __linux__ */
#endif /* HICACHE_NATIVE_SYNC_H */
