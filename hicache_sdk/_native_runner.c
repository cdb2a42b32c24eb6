/*
 * hicache_sdk._native.Runner / Call: the deadline runner's core in C (Linux).
 *
 * The same behaviour as the pure-Python runner (resilience/deadline.py, PyDeadlineRunner,
 * whose docs are the reference), without the Python steps per call: a call through the
 * Python runner cost 27-32 us with a 0.3 ms gap between calls on the project's 2-vCPU VM (a
 * no-op; about 40 us around a 256-key Mooncake batch_is_exist), this one 9-14 us.
 *
 * Runner(max_workers, name, on_abandon_change, follow)
 *   .run(fn, timeout, on_late=None) -> (in_time, call)   submit and wait in one
 *   .submit(fn, on_late=None) -> call
 *   .wait(call, timeout) -> bool     True: ended in time; False: now abandoned
 *   .drain(timeout) -> bool          every submitted call ended
 *   .shutdown()                      refuse new calls; idle workers exit, busy ones after the backlog
 *   .abandoned / .pending / .follows_caller_cpu / ._started
 *
 * One mutex (mu) guards the runner's state and every call's started / finished / abandoned
 * flags, so that "the caller uses the result" and "on_late runs" exclude each other. A call
 * goes to the worker that went idle last (a stack); with `follow` the caller pins that worker
 * to its own CPU just before waking it and the worker takes its own mask back before it runs
 * the call (the pin lasts only the hand-off). The caller releases the GIL, posts the worker's
 * semaphore and sleeps on the call's in one step; the worker does the same when it hands the
 * result back. A signal during a caller's wait runs Python's handlers; if one raises, the call
 * is abandoned (its on_late still runs when it ends) and the exception propagates.
 *
 * Worker threads are Python daemon threads (threading.Thread, started lazily, at most
 * max_workers) running Runner._serve(first_call); each holds a reference to the runner.
 */
#ifdef __linux__
#define PY_SSIZE_T_CLEAN
#include <Python.h> /* defines _GNU_SOURCE (sched_getcpu, CPU_SET) */

#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "_native_sync.h"

/* -- Call ------------------------------------------------------------------------------ */

typedef struct CallObject {
    PyObject_HEAD
    PyObject *fn;      /* cleared once run (or skipped) */
    PyObject *on_late; /* settable */
    PyObject *result;
    PyObject *error;
    struct CallObject *next; /* backlog link (the backlog owns a reference) */
    sem_t done;              /* posted once when the call ends; a waiter that got it re-posts */
    char started, finished, abandoned;
} CallObject;

static PyTypeObject CallType;

static CallObject *call_new(PyObject *fn, PyObject *on_late) {
    CallObject *c = PyObject_GC_New(CallObject, &CallType);
    if (c == NULL) {
        return NULL;
    }
    if (sem_init(&c->done, 0, 0) != 0) {
        PyObject_GC_Del(c);
        PyErr_SetFromErrno(PyExc_OSError);
        return NULL;
    }
    Py_INCREF(fn);
    c->fn = fn;
    c->on_late = on_late == Py_None ? NULL : Py_XNewRef(on_late);
    c->result = NULL;
    c->error = NULL;
    c->next = NULL;
    c->started = c->finished = c->abandoned = 0;
    PyObject_GC_Track(c);
    return c;
}

static int call_traverse(CallObject *c, visitproc visit, void *arg) {
    Py_VISIT(c->fn);
    Py_VISIT(c->on_late);
    Py_VISIT(c->result);
    Py_VISIT(c->error);
    return 0;
}

static int call_clear(CallObject *c) {
    Py_CLEAR(c->fn);
    Py_CLEAR(c->on_late);
    Py_CLEAR(c->result);
    Py_CLEAR(c->error);
    return 0;
}

static void call_dealloc(CallObject *c) {
    PyObject_GC_UnTrack(c);
    call_clear(c);
    sem_destroy(&c->done);
    PyObject_GC_Del(c);
}

/* Wait for `c` to end, posting `wake` first (may be NULL), both with the GIL released.
 * t < 0: no limit. 1: ended (and re-posted for other waiters); 0: timed out; -1: a signal
 * handler raised (exception set). */
static int call_wait(CallObject *c, double t, sem_t *wake) {
    struct timespec ts = {0, 0};
    int forever = 0;
    if (baton_deadline(t, &ts, &forever) < 0) {
        return -1;
    }
    int r;
    Py_BEGIN_ALLOW_THREADS
    if (wake != NULL) {
        sem_post(wake);
    }
    r = baton_sleep(&c->done, &ts, forever);
    Py_END_ALLOW_THREADS
    while (r < 0) {
        if (PyErr_CheckSignals() < 0) {
            return -1;
        }
        Py_BEGIN_ALLOW_THREADS
        r = baton_sleep(&c->done, &ts, forever);
        Py_END_ALLOW_THREADS
    }
    if (r == 1) {
        sem_post(&c->done);
    }
    return r;
}

static int as_wait_time(PyObject *o, double *t) {
    if (o == NULL || o == Py_None) {
        *t = -1.0;
        return 0;
    }
    double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "timeout must be a number of seconds, got %.80s", Py_TYPE(o)->tp_name);
        return -1;
    }
    if (isnan(v)) { /* refused before anything is submitted */
        PyErr_SetString(PyExc_ValueError, "timeout must be a number, got nan");
        return -1;
    }
    *t = v < 0 ? 0.0 : v; /* a negative timeout does not wait (the Python runner's rule) */
    return 0;
}

static PyObject *call_wait_done(CallObject *c, PyObject *const *args, Py_ssize_t nargs) {
    double t;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "wait_done(timeout=None) takes at most 1 argument");
        return NULL;
    }
    if (as_wait_time(nargs ? args[0] : NULL, &t) < 0) {
        return NULL;
    }
    int r = call_wait(c, t, NULL);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

static PyObject *call_flag(CallObject *c, void *which) {
    char v = which == (void *)0 ? c->started : which == (void *)1 ? c->finished : c->abandoned;
    return PyBool_FromLong(v);
}

static PyObject *call_get(CallObject *c, void *which) {
    PyObject *v = which == (void *)0 ? c->result : which == (void *)1 ? c->error : c->on_late;
    return Py_NewRef(v != NULL ? v : Py_None);
}

static int call_set_on_late(CallObject *c, PyObject *v, void *closure) {
    (void)closure;
    Py_XSETREF(c->on_late, v == NULL || v == Py_None ? NULL : Py_NewRef(v));
    return 0;
}

static PyGetSetDef call_getset[] = {
    {"started", (getter)call_flag, NULL, "whether a worker ran it (False: abandoned before it started)", (void *)0},
    {"finished", (getter)call_flag, NULL, "whether it has ended", (void *)1},
    {"abandoned", (getter)call_flag, NULL, "whether its waiter gave up on it", (void *)2},
    {"result", (getter)call_get, NULL, "the function's return value (None until it ended)", (void *)0},
    {"error", (getter)call_get, NULL, "the exception the function raised, or None", (void *)1},
    {"on_late", (getter)call_get, (setter)call_set_on_late, "hook run in the worker when an abandoned call ends",
     (void *)2},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef call_methods[] = {
    {"wait_done", (PyCFunction)(void (*)(void))call_wait_done, METH_FASTCALL,
     "wait_done(timeout=None) -> bool: wait for the call to end (abandoned or not)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hicache_sdk._native.Call",
    .tp_basicsize = sizeof(CallObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "One call handed to a Runner, and its outcome.",
    .tp_traverse = (traverseproc)call_traverse,
    .tp_clear = (inquiry)call_clear,
    .tp_dealloc = (destructor)call_dealloc,
    .tp_getset = call_getset,
    .tp_methods = call_methods,
};

/* -- Runner ---------------------------------------------------------------------------- */

typedef struct Worker {
    sem_t wake;          /* posted by the caller that assigned `call`, or by shutdown */
    CallObject *call;    /* the next call (owned); NULL when woken by shutdown */
    struct Worker *next; /* idle stack link */
    pid_t tid;
    int pinned; /* pinned to a caller's CPU; the worker unpins itself before it runs the call */
    cpu_set_t mask;
} Worker;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t mu;
    pthread_cond_t drained; /* signalled when pending reaches 0 while drain() waits */
    Worker *idle;           /* stack: the last worker to go idle is reused first */
    CallObject *bl_head, *bl_tail;
    Py_ssize_t max_workers, started, pending, abandoned, pins;
    int shutdown, follow, drain_waiters, force_cpu;
    PyObject *name;
    PyObject *on_abandon_change;
} RunnerObject;

static PyObject *thread_cls;  /* threading.Thread */
static PyObject *late_logger; /* logging.getLogger("hicache_sdk.resilience.deadline") */

static int runner_init(RunnerObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"max_workers", "name", "on_abandon_change", "follow", NULL};
    Py_ssize_t max_workers;
    PyObject *name, *cb;
    int follow;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "nUOp:Runner", kwlist, &max_workers, &name, &cb, &follow)) {
        return -1;
    }
    if (max_workers < 1) {
        PyErr_Format(PyExc_ValueError, "max_workers must be >= 1, got %zd", max_workers);
        return -1;
    }
    if (self->name != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Runner.__init__ called twice");
        return -1;
    }
    if (thread_cls == NULL) {
        PyObject *mod = PyImport_ImportModule("threading");
        thread_cls = mod != NULL ? PyObject_GetAttrString(mod, "Thread") : NULL;
        Py_XDECREF(mod);
        if (thread_cls == NULL) {
            return -1;
        }
    }
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&self->mu, NULL);
    pthread_cond_init(&self->drained, &attr);
    pthread_condattr_destroy(&attr);
    self->max_workers = max_workers;
    self->follow = follow && sched_getcpu() >= 0;
    self->force_cpu = -1;
    self->name = Py_NewRef(name);
    self->on_abandon_change = cb == Py_None ? NULL : Py_NewRef(cb);
    return 0;
}

static int runner_traverse(RunnerObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->on_abandon_change);
    for (CallObject *c = self->bl_head; c != NULL; c = c->next) {
        Py_VISIT(c);
    }
    return 0;
}

static int runner_clear(RunnerObject *self) {
    Py_CLEAR(self->on_abandon_change);
    return 0;
}

static void runner_dealloc(RunnerObject *self) {
    /* No worker runs: each holds a reference. Backlog entries can remain only when every
     * worker died with the interpreter; drop them. */
    PyObject_GC_UnTrack(self);
    runner_clear(self);
    while (self->bl_head != NULL) {
        CallObject *c = self->bl_head;
        self->bl_head = c->next;
        Py_DECREF(c);
    }
    if (self->name != NULL) {
        pthread_cond_destroy(&self->drained);
        pthread_mutex_destroy(&self->mu);
    }
    Py_CLEAR(self->name);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Report an exception nobody can receive (a hook that raised in a worker). */
static void report_hook_error(const char *what) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL) {
        PyException_SetTraceback(value, tb);
    }
    if (late_logger == NULL) {
        PyObject *logging = PyImport_ImportModule("logging");
        late_logger = logging != NULL ? PyObject_CallMethod(logging, "getLogger", "s",
                                                            "hicache_sdk.resilience.deadline")
                                      : NULL;
        Py_XDECREF(logging);
    }
    PyObject *r = NULL;
    if (late_logger != NULL) {
        PyObject *meth = PyObject_GetAttrString(late_logger, "error");
        PyObject *msg = PyUnicode_FromFormat("deadline runner: %s failed", what);
        PyObject *pargs = meth != NULL && msg != NULL ? PyTuple_Pack(1, msg) : NULL;
        PyObject *kw = pargs != NULL ? Py_BuildValue("{s:O}", "exc_info", value ? value : Py_None) : NULL;
        r = kw != NULL ? PyObject_Call(meth, pargs, kw) : NULL;
        Py_XDECREF(kw);
        Py_XDECREF(pargs);
        Py_XDECREF(msg);
        Py_XDECREF(meth);
    }
    if (r == NULL) {
        PyErr_Clear();
    }
    Py_XDECREF(r);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

static void notify_abandoned(RunnerObject *self, Py_ssize_t n) {
    if (self->on_abandon_change == NULL) {
        return;
    }
    PyObject *v = PyLong_FromSsize_t(n);
    PyObject *r = v != NULL ? PyObject_CallOneArg(self->on_abandon_change, v) : NULL;
    Py_XDECREF(v);
    if (r == NULL) {
        report_hook_error("on_abandon_change hook");
    }
    Py_XDECREF(r);
}

/* The wait timed out: mark `c` abandoned unless it finished meanwhile (then 1: in time). */
static int runner_abandon(RunnerObject *self, CallObject *c) {
    Py_ssize_t n;
    pthread_mutex_lock(&self->mu);
    if (c->finished) {
        pthread_mutex_unlock(&self->mu);
        return 1;
    }
    c->abandoned = 1;
    n = ++self->abandoned;
    pthread_mutex_unlock(&self->mu);
    notify_abandoned(self, n);
    return 0;
}

static PyObject *runner_spawn(RunnerObject *self, CallObject *first, Py_ssize_t k) {
    PyObject *target = PyObject_GetAttrString((PyObject *)self, "_serve");
    PyObject *targs = target != NULL ? PyTuple_Pack(1, (PyObject *)first) : NULL;
    PyObject *tname = targs != NULL ? PyUnicode_FromFormat("%U-%zd", self->name, k) : NULL;
    PyObject *kw = tname != NULL
                       ? Py_BuildValue("{s:O,s:O,s:O,s:O}", "target", target, "args", targs, "name", tname,
                                       "daemon", Py_True)
                       : NULL;
    PyObject *empty = kw != NULL ? PyTuple_New(0) : NULL;
    PyObject *t = empty != NULL ? PyObject_Call(thread_cls, empty, kw) : NULL;
    PyObject *r = t != NULL ? PyObject_CallMethod(t, "start", NULL) : NULL;
    Py_XDECREF(t);
    Py_XDECREF(empty);
    Py_XDECREF(kw);
    Py_XDECREF(tname);
    Py_XDECREF(targs);
    Py_XDECREF(target);
    return r;
}

/* Pin the idle worker `w` (this caller's until it runs) to the caller's CPU. */
static void runner_place(RunnerObject *self, Worker *w) {
    int cpu = self->force_cpu >= 0 ? self->force_cpu : sched_getcpu();
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
        self->follow = 0;
        return;
    }
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(w->tid, sizeof one, &one) == 0) {
        w->pinned = 1;
        self->pins++; /* under the GIL */
    } else {
        self->follow = 0; /* e.g. a cpuset that changed under us: stop following */
    }
}

/* Make a call and give it to the worker returned in *w (the caller wakes it), to a new
 * worker thread, or to the backlog. NULL with RuntimeError after shutdown. */
static CallObject *runner_assign(RunnerObject *self, PyObject *fn, PyObject *on_late, Worker **w) {
    if (self->name == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Runner not initialised");
        return NULL;
    }
    CallObject *c = call_new(fn, on_late);
    if (c == NULL) {
        return NULL;
    }
    Py_ssize_t spawn = -1;
    *w = NULL;
    pthread_mutex_lock(&self->mu);
    if (self->shutdown) {
        pthread_mutex_unlock(&self->mu);
        Py_DECREF(c);
        PyErr_SetString(PyExc_RuntimeError, "runner is shut down");
        return NULL;
    }
    self->pending++;
    if (self->idle != NULL) {
        *w = self->idle;
        self->idle = (*w)->next;
        Py_INCREF(c);
        (*w)->call = c;
    } else if (self->started < self->max_workers) {
        spawn = self->started++;
    } else {
        Py_INCREF(c);
        if (self->bl_tail != NULL) {
            self->bl_tail->next = c;
        } else {
            self->bl_head = c;
        }
        self->bl_tail = c;
    }
    pthread_mutex_unlock(&self->mu);
    if (*w != NULL && self->follow) {
        runner_place(self, *w);
    }
    if (spawn >= 0) {
        PyObject *r = runner_spawn(self, c, spawn);
        if (r == NULL) {
            pthread_mutex_lock(&self->mu);
            self->started--;
            self->pending--;
            pthread_mutex_unlock(&self->mu);
            Py_DECREF(c);
            return NULL;
        }
        Py_DECREF(r);
    }
    return c;
}

/* (fn, [timeout,] on_late=None) from positional and keyword arguments: out[0] fn, out[1]
 * timeout (run only) or on_late, out[2] on_late (run). */
static int parse_call_args(const char *what, const char *const *names, Py_ssize_t n_names, Py_ssize_t required,
                           PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **out) {
    for (Py_ssize_t i = 0; i < n_names; i++) {
        out[i] = NULL;
    }
    if (nargs > n_names) {
        PyErr_Format(PyExc_TypeError, "%s takes at most %zd arguments, got %zd", what, n_names, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        out[i] = args[i];
    }
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        Py_ssize_t i = 0;
        while (i < n_names && PyUnicode_CompareWithASCIIString(key, names[i]) != 0) {
            i++;
        }
        if (i == n_names || out[i] != NULL) {
            PyErr_Format(PyExc_TypeError, "%s: %s keyword argument %R", what,
                         i == n_names ? "unexpected" : "repeated", key);
            return -1;
        }
        out[i] = args[nargs + k];
    }
    for (Py_ssize_t i = 0; i < required; i++) {
        if (out[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s: missing argument %s", what, names[i]);
            return -1;
        }
    }
    if (!PyCallable_Check(out[0])) {
        PyErr_Format(PyExc_TypeError, "%s: fn must be callable, got %.80s", what, Py_TYPE(out[0])->tp_name);
        return -1;
    }
    return 0;
}

static PyObject *runner_submit(RunnerObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"fn", "on_late"};
    PyObject *a[2];
    Worker *w;
    if (parse_call_args("submit(fn, on_late=None)", names, 2, 1, args, nargs, kwnames, a) < 0) {
        return NULL;
    }
    CallObject *c = runner_assign(self, a[0], a[1] != NULL ? a[1] : Py_None, &w);
    if (c != NULL && w != NULL) {
        sem_post(&w->wake);
    }
    return (PyObject *)c;
}

/* After a wait: 1 in time, 0 abandoned; on -1 (a signal handler raised) the call is
 * abandoned too, so that its on_late hook still runs when it ends. */
static int runner_settle(RunnerObject *self, CallObject *c, int r) {
    if (r == 1) {
        return 1;
    }
    if (r == 0) {
        return runner_abandon(self, c);
    }
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    runner_abandon(self, c);
    PyErr_Restore(type, value, tb);
    return -1;
}

static PyObject *runner_run(RunnerObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"fn", "timeout", "on_late"};
    PyObject *a[3];
    Worker *w;
    double t;
    if (parse_call_args("run(fn, timeout, on_late=None)", names, 3, 2, args, nargs, kwnames, a) < 0 ||
        as_wait_time(a[1], &t) < 0) {
        return NULL;
    }
    CallObject *c = runner_assign(self, a[0], a[2] != NULL ? a[2] : Py_None, &w);
    if (c == NULL) {
        return NULL;
    }
    int r = runner_settle(self, c, call_wait(c, t, w != NULL ? &w->wake : NULL));
    if (r < 0) {
        Py_DECREF(c);
        return NULL;
    }
    PyObject *out = PyTuple_Pack(2, r ? Py_True : Py_False, (PyObject *)c);
    Py_DECREF(c);
    return out;
}

static PyObject *runner_wait(RunnerObject *self, PyObject *const *args, Py_ssize_t nargs) {
    double t;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "wait(call, timeout) takes 2 arguments, got %zd", nargs);
        return NULL;
    }
    if (!PyObject_TypeCheck(args[0], &CallType)) {
        PyErr_Format(PyExc_TypeError, "wait: call must be a Call of this runner, got %.80s", Py_TYPE(args[0])->tp_name);
        return NULL;
    }
    if (as_wait_time(args[1], &t) < 0) {
        return NULL;
    }
    CallObject *c = (CallObject *)args[0];
    int r = runner_settle(self, c, call_wait(c, t, NULL));
    return r < 0 ? NULL : PyBool_FromLong(r);
}

/* Run `c` in this worker (GIL held) unless abandoned first; 1 when it ended abandoned (its
 * waiter is gone: `done` is posted here and on_late has run). */
static int worker_run_one(RunnerObject *self, CallObject *c) {
    pthread_mutex_lock(&self->mu);
    int skip = c->abandoned;
    c->started = !skip;
    pthread_mutex_unlock(&self->mu);
    if (!skip && c->fn == NULL) { /* cleared by the collector: never run twice, never NULL */
        c->error = PyObject_CallFunction(PyExc_RuntimeError, "s", "deadline runner: call has no function");
    } else if (!skip) {
        PyObject *r = PyObject_CallNoArgs(c->fn);
        if (r != NULL) {
            c->result = r;
        } else { /* captured for the waiter (BaseException too); never kills the worker */
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            PyErr_NormalizeException(&type, &value, &tb);
            if (tb != NULL && value != NULL) {
                PyException_SetTraceback(value, tb);
            }
            c->error = value;
            Py_XDECREF(type);
            Py_XDECREF(tb);
        }
    }
    Py_CLEAR(c->fn); /* its closure (buffers, keys) is not kept alive by the call */
    pthread_mutex_lock(&self->mu);
    c->finished = 1;
    int late = c->abandoned;
    pthread_mutex_unlock(&self->mu);
    if (!late) {
        return 0;
    }
    sem_post(&c->done);
    if (c->on_late != NULL) {
        PyObject *hook = Py_NewRef(c->on_late);
        PyObject *r = PyObject_CallOneArg(hook, (PyObject *)c);
        Py_DECREF(hook);
        if (r == NULL) {
            report_hook_error("on_late hook");
        }
        Py_XDECREF(r);
    }
    pthread_mutex_lock(&self->mu);
    Py_ssize_t n = --self->abandoned;
    pthread_mutex_unlock(&self->mu);
    notify_abandoned(self, n);
    return 1;
}

static PyObject *runner_serve(RunnerObject *self, PyObject *first) {
    if (!PyObject_TypeCheck(first, &CallType)) {
        PyErr_SetString(PyExc_TypeError, "_serve(call): the runner starts its own workers");
        return NULL;
    }
    Worker *w = PyMem_RawCalloc(1, sizeof(Worker));
    if (w == NULL || sem_init(&w->wake, 0, 0) != 0) { /* no worker after all: run the call
                                                        here, once, and leave the slot free */
        PyMem_RawFree(w);
        int late = worker_run_one(self, (CallObject *)first);
        pthread_mutex_lock(&self->mu);
        self->started--;
        self->pending--;
        if (self->pending == 0 && self->drain_waiters) {
            pthread_cond_broadcast(&self->drained);
        }
        pthread_mutex_unlock(&self->mu);
        if (!late) {
            sem_post(&((CallObject *)first)->done);
        }
        return PyErr_NoMemory();
    }
    w->tid = (pid_t)syscall(SYS_gettid);
    if (sched_getaffinity(0, sizeof w->mask, &w->mask) != 0) {
        CPU_ZERO(&w->mask);
    }
    CallObject *item = (CallObject *)Py_NewRef(first);
    for (;;) {
        if (w->pinned) { /* woken on the caller's CPU; what it runs is not pinned */
            w->pinned = 0;
            sched_setaffinity(0, sizeof w->mask, &w->mask);
        }
        int late = worker_run_one(self, item);
        pthread_mutex_lock(&self->mu);
        self->pending--;
        if (self->pending == 0 && self->drain_waiters) {
            pthread_cond_broadcast(&self->drained);
        }
        CallObject *nxt = self->bl_head;
        if (nxt != NULL) {
            self->bl_head = nxt->next;
            if (self->bl_head == NULL) {
                self->bl_tail = NULL;
            }
            nxt->next = NULL;
        }
        int stop = nxt == NULL && self->shutdown;
        if (nxt == NULL && !stop) { /* back on the idle stack before the waiter wakes: its
                                       next call comes straight back to this warm thread */
            w->next = self->idle;
            self->idle = w;
        }
        pthread_mutex_unlock(&self->mu);
        if (nxt != NULL || stop) {
            if (!late) {
                sem_post(&item->done);
            }
            Py_DECREF(item);
            if (stop) {
                break;
            }
            item = nxt;
            continue;
        }
        Py_BEGIN_ALLOW_THREADS
        if (!late) {
            sem_post(&item->done); /* the GIL given up before the waiter wakes */
        }
        while (sem_wait(&w->wake) != 0 && errno == EINTR) {
        }
        Py_END_ALLOW_THREADS
        Py_DECREF(item);
        item = w->call;
        w->call = NULL;
        if (item == NULL) { /* shutdown */
            break;
        }
    }
    sem_destroy(&w->wake);
    PyMem_RawFree(w);
    Py_RETURN_NONE;
}

static PyObject *runner_drain(RunnerObject *self, PyObject *arg) {
    double t;
    if (as_wait_time(arg, &t) < 0) {
        return NULL;
    }
    struct timespec ts = {0, 0};
    int forever = 0;
    if (baton_deadline(t, &ts, &forever) < 0) {
        return NULL;
    }
    int done;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->mu);
    self->drain_waiters++;
    int rc = 0;
    while (self->pending > 0 && rc == 0) {
        rc = forever ? pthread_cond_wait(&self->drained, &self->mu)
                     : pthread_cond_timedwait(&self->drained, &self->mu, &ts);
    }
    done = self->pending == 0;
    self->drain_waiters--;
    pthread_mutex_unlock(&self->mu);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(done);
}

static PyObject *runner_shutdown(RunnerObject *self, PyObject *noargs) {
    (void)noargs;
    if (self->name == NULL) {
        Py_RETURN_NONE;
    }
    pthread_mutex_lock(&self->mu);
    Worker *idle = self->shutdown ? NULL : self->idle;
    self->shutdown = 1;
    self->idle = NULL;
    pthread_mutex_unlock(&self->mu);
    while (idle != NULL) {
        Worker *w = idle;
        idle = w->next;
        w->call = NULL;
        sem_post(&w->wake);
    }
    Py_RETURN_NONE;
}

static PyObject *runner_force_cpu(RunnerObject *self, PyObject *arg) {
    long cpu = PyLong_AsLong(arg);
    if (cpu == -1 && PyErr_Occurred()) {
        return NULL;
    }
    self->force_cpu = (int)cpu;
    Py_RETURN_NONE;
}

static PyObject *runner_counter(RunnerObject *self, void *which) {
    pthread_mutex_lock(&self->mu);
    Py_ssize_t v = which == (void *)0   ? self->abandoned
                   : which == (void *)1 ? self->pending
                   : which == (void *)2 ? self->started
                                        : self->pins;
    pthread_mutex_unlock(&self->mu);
    return PyLong_FromSsize_t(v);
}

static PyObject *runner_follows(RunnerObject *self, void *closure) {
    (void)closure;
    return PyBool_FromLong(self->follow);
}

static PyGetSetDef runner_getset[] = {
    {"abandoned", (getter)runner_counter, NULL, "abandoned calls that have not ended yet", (void *)0},
    {"pending", (getter)runner_counter, NULL, "submitted calls that have not ended yet", (void *)1},
    {"_started", (getter)runner_counter, NULL, "worker threads started", (void *)2},
    {"_pins", (getter)runner_counter, NULL, "workers placed on a caller's CPU so far (tests)", (void *)3},
    {"follows_caller_cpu", (getter)runner_follows, NULL, "whether a call's worker is placed on the caller's CPU",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef runner_methods[] = {
    {"run", (PyCFunction)(void (*)(void))runner_run, METH_FASTCALL | METH_KEYWORDS,
     "run(fn, timeout, on_late=None) -> (in_time, call): submit and wait in one"},
    {"submit", (PyCFunction)(void (*)(void))runner_submit, METH_FASTCALL | METH_KEYWORDS,
     "submit(fn, on_late=None) -> call: hand fn to a worker"},
    {"wait", (PyCFunction)(void (*)(void))runner_wait, METH_FASTCALL,
     "wait(call, timeout) -> bool: True when it ended in time, False when now abandoned"},
    {"drain", (PyCFunction)runner_drain, METH_O, "drain(timeout) -> bool: every submitted call ended"},
    {"shutdown", (PyCFunction)runner_shutdown, METH_NOARGS, "shutdown(): refuse new calls; workers exit"},
    {"_serve", (PyCFunction)runner_serve, METH_O, "a worker thread's loop (started by the runner)"},
    {"_force_cpu", (PyCFunction)runner_force_cpu, METH_O, "tests: pin workers to this CPU (-1: the caller's)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RunnerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hicache_sdk._native.Runner",
    .tp_basicsize = sizeof(RunnerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The deadline runner's core (see resilience/deadline.py).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)runner_init,
    .tp_traverse = (traverseproc)runner_traverse,
    .tp_clear = (inquiry)runner_clear,
    .tp_dealloc = (destructor)runner_dealloc,
    .tp_getset = runner_getset,
    .tp_methods = runner_methods,
};

int native_runner_add_types(PyObject *m) {
    if (PyType_Ready(&CallType) < 0 || PyType_Ready(&RunnerType) < 0) {
        return -1;
    }
    if (PyModule_AddObjectRef(m, "Call", (PyObject *)&CallType) < 0 ||
        PyModule_AddObjectRef(m, "Runner", (PyObject *)&RunnerType) < 0) {
        return -1;
    }
    return 0;
}
#endif /* __linux__ */
