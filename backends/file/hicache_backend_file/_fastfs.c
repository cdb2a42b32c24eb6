/*
 * hicache_backend_file._fastfs: the one hot loop of `exists` in C.
 *
 * stat_sizes(dir_fd, names) -> (sizes, errors)
 *   For each name (str, encoded like os.fsencode), fstatat(dir_fd, name,
 *   AT_SYMLINK_NOFOLLOW). sizes[i] is the size (int >= 0) of a regular file, else None:
 *   absent (ENOENT, ENOTDIR), not a regular file (symlink, directory, FIFO, ...: never a
 *   page) or a failure; errors lists (i, errno) for every failure other than absence (the
 *   caller counts the reasons). The names are encoded first (with the GIL); the stat loop
 *   runs without the GIL.
 *
 * Python's own os.stat spends about half of each call building a stat_result; this
 * builds one small int per name. The transport falls back to os.stat when this module
 * could not be compiled.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#define ABSENT (-1LL - (1LL << 40)) /* below every -errno */

static PyObject *stat_sizes(PyObject *self, PyObject *args) {
    int dir_fd;
    PyObject *names;
    (void)self;
    if (!PyArg_ParseTuple(args, "iO:stat_sizes", &dir_fd, &names)) {
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
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        struct stat st;
        if (fstatat(dir_fd, PyBytes_AS_STRING(encoded[i]), &st, AT_SYMLINK_NOFOLLOW) == 0) {
            res[i] = S_ISREG(st.st_mode) ? (long long)st.st_size : ABSENT;
        } else if (errno == ENOENT || errno == ENOTDIR) {
            res[i] = ABSENT;
        } else {
            res[i] = -(long long)errno;
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
    Py_DECREF(seq);
    return out;
}

static PyMethodDef methods[] = {
    {"stat_sizes", stat_sizes, METH_VARARGS,
     "stat_sizes(dir_fd, names) -> (sizes, errors): see the module source"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastfs", "The hot loop of the file backend's exists, in C.", -1, methods,
};

PyMODINIT_FUNC PyInit__fastfs(void) { return PyModule_Create(&module); }
