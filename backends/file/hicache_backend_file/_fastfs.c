/*
 * hicache_backend_file._fastfs: the one hot loop of `exists` in C.
 *
 * stat_sizes(dir_fd, names, openat2=False) -> (sizes, errors)
 *   For each name (str, encoded like os.fsencode), fstatat(parent, base,
 *   AT_SYMLINK_NOFOLLOW), where parent is dir_fd for a flat name, else the name's
 *   directory resolved beneath dir_fd with no symlink followed on any component:
 *   openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) when openat2 is true, else one
 *   O_NOFOLLOW openat per component (the backend's beneath.py does the same in Python).
 *   Names in one directory share one descriptor per call. sizes[i] is the size (int >= 0) of a regular file, else None:
 *   absent (ENOENT, ENOTDIR), not a regular file (symlink, directory, FIFO, ...: never a
 *   page) or a failure; errors lists (i, errno) for every failure other than absence (the
 *   caller counts the reasons). The names are encoded first (with the GIL); the stat loop
 *   runs without the GIL.
 *
 * openat2(dir_fd, path, flags, mode) -> fd
 *   openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS (beneath.py's call, minus ctypes).
 *
 * Python's own os.stat spends about half of each call building a stat_result; this
 * builds one small int per name. The transport falls back to os.stat when this module
 * could not be compiled.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_openat2
#define SYS_openat2 437 /* the same number on every Linux architecture */
#endif
#define RESOLVE_NO_SYMLINKS_ 0x04
#define RESOLVE_BENEATH_ 0x08
#define DIR_FLAGS (O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

struct open_how_ {
    uint64_t flags, mode, resolve;
};

/* A descriptor of directory dir[0:len] beneath root (see the header), or -1 and errno. */
static int open_parent(int root, const char *dir, size_t len, int use_openat2) {
    char buf[PATH_MAX];
    if (len >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, dir, len);
    buf[len] = 0;
    if (use_openat2) {
        struct open_how_ how = {DIR_FLAGS, 0, RESOLVE_BENEATH_ | RESOLVE_NO_SYMLINKS_};
        long fd = -1;
        for (int tries = 0; tries < 8; tries++) {
            fd = syscall(SYS_openat2, root, buf, &how, sizeof how);
            if (fd >= 0 || (errno != EAGAIN && errno != EINTR)) {
                break;
            }
        }
        return (int)fd;
    }
    int cur = root;
    char *p = buf;
    for (;;) {
        char *slash = strchr(p, '/');
        if (slash != NULL) {
            *slash = 0;
        }
        int nxt = openat(cur, p, DIR_FLAGS);
        int saved = errno;
        if (cur != root) {
            close(cur);
        }
        if (nxt < 0) {
            errno = saved;
            return -1;
        }
        cur = nxt;
        if (slash == NULL) {
            return cur;
        }
        p = slash + 1;
    }
}

#define ABSENT (-1LL - (1LL << 40)) /* below every -errno */

/* Directory descriptors of one batch, by directory name (open addressing). A batch of the
 * default scheme spreads over at most a few hundred fan-out directories, so each is
 * resolved once per batch, not once per name. When the table fills up, the remaining
 * directories are resolved per name (still beneath the root, just slower). */
#define PARENTS 1024
struct parent_ {
    const char *dir; /* NULL: empty slot */
    size_t len;
    int fd; /* or -1 */
    int err; /* errno when fd is -1 */
};

/* One O_NOFOLLOW openat of the single component dir[0:len] relative to at. */
static int open_component(int at, const char *comp, size_t len) {
    char buf[NAME_MAX + 1];
    if (len > NAME_MAX) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, comp, len);
    buf[len] = 0;
    return openat(at, buf, DIR_FLAGS);
}

/* The table entry of directory dir[0:len]. A new directory is opened with one O_NOFOLLOW
 * openat of its last component relative to its parent's entry (found the same way, the
 * first component relative to root): the walk of the fallback, each directory opened
 * once per call. With the table full, the directory is resolved whole into *spare
 * (openat2 or the walk) and the caller closes it. */
static struct parent_ *lookup_parent(struct parent_ *tab, size_t *used, int root, const char *dir,
                                     size_t len, int use_openat2, struct parent_ *spare) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) {
        h = (h ^ (unsigned char)dir[i]) * 1099511628211ULL;
    }
    struct parent_ *slot = NULL;
    for (size_t probe = 0; probe < PARENTS; probe++) {
        struct parent_ *s = &tab[(h + probe) & (PARENTS - 1)];
        if (s->dir == NULL) {
            slot = *used < PARENTS * 3 / 4 ? s : NULL;
            break;
        }
        if (s->len == len && memcmp(s->dir, dir, len) == 0) {
            return s;
        }
    }
    if (slot == NULL) {
        spare->dir = dir;
        spare->len = len;
        spare->fd = open_parent(root, dir, len, use_openat2);
        spare->err = spare->fd < 0 ? errno : 0;
        return spare;
    }
    slot->dir = dir; /* claimed before the recursion, so a parent never takes this slot */
    slot->len = len;
    slot->fd = -1;
    (*used)++;
    const char *last = memrchr(dir, '/', len);
    int at = root;
    if (last != NULL) {
        struct parent_ up = {NULL, 0, -1, 0};
        struct parent_ *p = lookup_parent(tab, used, root, dir, (size_t)(last - dir), use_openat2, &up);
        if (p->fd < 0) {
            slot->err = p->err;
            return slot;
        }
        if (p == &up) { /* table full on the way up: resolve this one whole instead */
            close(up.fd);
            slot->fd = open_parent(root, dir, len, use_openat2);
            slot->err = slot->fd < 0 ? errno : 0;
            return slot;
        }
        at = p->fd;
        last++;
    } else {
        last = dir;
    }
    slot->fd = open_component(at, last, len - (size_t)(last - dir));
    slot->err = slot->fd < 0 ? errno : 0;
    return slot;
}

static PyObject *stat_sizes(PyObject *self, PyObject *args) {
    int dir_fd;
    PyObject *names;
    int use_openat2 = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "iO|p:stat_sizes", &dir_fd, &names, &use_openat2)) {
        return NULL;
    }
    PyObject *seq = PySequence_Fast(names, "names must be a sequence of str");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject **encoded = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(PyObject *));
    long long *res = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(long long));
    PyObject *out = NULL;
    struct parent_ *tab = NULL;
    if (encoded == NULL || res == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyUnicode_Check(items[i])) {
            PyErr_Format(PyExc_TypeError, "names[%zd] must be a str", i);
            goto done;
        }
        encoded[i] = PyUnicode_EncodeFSDefault(items[i]);
        if (encoded[i] == NULL) {
            goto done;
        }
        if ((size_t)PyBytes_GET_SIZE(encoded[i]) != strlen(PyBytes_AS_STRING(encoded[i]))) {
            PyErr_Format(PyExc_ValueError, "names[%zd] contains NUL", i);
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n && tab == NULL; i++) {
        if (strchr(PyBytes_AS_STRING(encoded[i]), '/') != NULL) {
            tab = PyMem_Calloc(PARENTS, sizeof(struct parent_));
            if (tab == NULL) {
                PyErr_NoMemory();
                goto done;
            }
        }
    }
    Py_BEGIN_ALLOW_THREADS
    size_t used = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        struct stat st;
        const char *name = PyBytes_AS_STRING(encoded[i]);
        const char *slash = strrchr(name, '/');
        int rc;
        if (slash == NULL) {
            rc = fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW);
        } else {
            struct parent_ spare = {NULL, 0, -1, 0};
            struct parent_ *p =
                lookup_parent(tab, &used, dir_fd, name, (size_t)(slash - name), use_openat2, &spare);
            if (p->fd >= 0) {
                rc = fstatat(p->fd, slash + 1, &st, AT_SYMLINK_NOFOLLOW);
            } else {
                rc = -1;
                errno = p->err;
            }
            if (p == &spare && spare.fd >= 0) {
                int saved = errno;
                close(spare.fd);
                errno = saved;
            }
        }
        if (rc == 0) {
            res[i] = S_ISREG(st.st_mode) ? (long long)st.st_size : ABSENT;
        } else if (errno == ENOENT || errno == ENOTDIR) {
            res[i] = ABSENT;
        } else {
            res[i] = -(long long)errno;
        }
    }
    if (tab != NULL) {
        for (size_t j = 0; j < PARENTS; j++) {
            if (tab[j].dir != NULL && tab[j].fd >= 0) {
                close(tab[j].fd);
            }
        }
    }
    Py_END_ALLOW_THREADS
    PyObject *sizes = PyList_New(n);
    PyObject *errors = PyList_New(0);
    if (sizes == NULL || errors == NULL) {
        Py_XDECREF(sizes);
        Py_XDECREF(errors);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v;
        if (res[i] >= 0) {
            v = PyLong_FromLongLong(res[i]);
        } else {
            v = Py_None;
            Py_INCREF(v);
            if (res[i] != ABSENT) {
                PyObject *err = Py_BuildValue("(nL)", i, -res[i]);
                if (err == NULL || PyList_Append(errors, err) < 0) {
                    Py_XDECREF(err);
                    Py_DECREF(v);
                    Py_DECREF(sizes);
                    Py_DECREF(errors);
                    goto done;
                }
                Py_DECREF(err);
            }
        }
        if (v == NULL) {
            Py_DECREF(sizes);
            Py_DECREF(errors);
            goto done;
        }
        PyList_SET_ITEM(sizes, i, v);
    }
    out = PyTuple_Pack(2, sizes, errors);
    Py_DECREF(sizes);
    Py_DECREF(errors);
done:
    if (encoded != NULL) {
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_XDECREF(encoded[i]);
        }
        PyMem_Free(encoded);
    }
    PyMem_Free(res);
    PyMem_Free(tab);
    Py_DECREF(seq);
    return out;
}

/* openat2(dir_fd, path, flags, mode) -> fd with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS:
 * beneath.py's call without the ctypes overhead (the read path opens one per page).
 * OSError (errno, path) on failure; EAGAIN (a concurrent rename) is retried. */
static PyObject *openat2_beneath(PyObject *self, PyObject *args) {
    int dir_fd, flags, mode;
    PyObject *path;
    (void)self;
    if (!PyArg_ParseTuple(args, "iO&ii:openat2", &dir_fd, PyUnicode_FSConverter, &path, &flags, &mode)) {
        return NULL;
    }
    const char *raw = PyBytes_AS_STRING(path);
    if ((size_t)PyBytes_GET_SIZE(path) != strlen(raw)) {
        Py_DECREF(path);
        PyErr_SetString(PyExc_ValueError, "path contains NUL");
        return NULL;
    }
    struct open_how_ how = {(uint64_t)(unsigned)flags, (flags & O_CREAT) ? (uint64_t)mode : 0,
                            RESOLVE_BENEATH_ | RESOLVE_NO_SYMLINKS_};
    long fd = -1;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int tries = 0; tries < 8; tries++) {
        fd = syscall(SYS_openat2, dir_fd, raw, &how, sizeof how);
        err = errno;
        if (fd >= 0 || (err != EAGAIN && err != EINTR)) {
            break;
        }
    }
    Py_END_ALLOW_THREADS
    if (fd < 0) {
        PyObject *name = PyUnicode_DecodeFSDefault(raw);
        errno = err;
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, name);
        Py_XDECREF(name);
        Py_DECREF(path);
        return NULL;
    }
    Py_DECREF(path);
    return PyLong_FromLong(fd);
}

static PyMethodDef methods[] = {
    {"openat2", openat2_beneath, METH_VARARGS,
     "openat2(dir_fd, path, flags, mode) -> fd, resolved beneath dir_fd with no symlink"},
    {"stat_sizes", stat_sizes, METH_VARARGS,
     "stat_sizes(dir_fd, names, openat2=False) -> (sizes, errors): see the module source"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastfs", "The hot loop of the file backend's exists, in C.", -1, methods,
};

PyMODINIT_FUNC PyInit__fastfs(void) { return PyModule_Create(&module); }
