/* Yield-spinning for readable sockets, with the GIL released.

A same-host link's reading thread calls spin_readable(fd, spin_ns) before it
blocks in recvmsg: for up to spin_ns it polls the socket without blocking and
yields the CPU between polls. A reply that comes within the window is read
without a sleep and wake-up (on a small VM, a sleeping CPU costs 50-150 us to
wake and comes back with cold caches). The loop runs in C with the GIL
released, so the process's other threads run while it spins, and it yields
on every turn, so any other runnable thread on its CPU gets the CPU first.

At most MAX_SPINNERS threads of a process spin at once; the others return at
once and block as usual. Measured on a 2-core VM, spinning after every frame
beat spinning only on links whose frames recently came within the window:
a spinning thread also keeps its CPU from halting, which helps the
process's other threads and its neighbours on that CPU. Optional: without this module (no C compiler at
install time) readers block at once, which is correct, only slower.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

#define MAX_SPINNERS 2

static int spinners = 0;

/* A child of fork() has only the forking thread: no one spins there. */
static void reset_in_child(void) { spinners = 0; }

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

PyDoc_STRVAR(spin_readable_doc,
"spin_readable(fd, spin_ns) -> int\n\n"
"Poll fd (without blocking, GIL released, yielding the CPU between polls)\n"
"until it is readable, has an error or hang-up, or spin_ns nanoseconds pass.\n"
"READY (1): fd is ready. EXPIRED (0): spin_ns passed first. BUSY (-1): did not\n"
"spin (MAX_SPINNERS threads of this process spin already, or spin_ns <= 0).");

static PyObject *spin_readable(PyObject *self, PyObject *args) {
    int fd, r = 0;
    long long spin_ns;
    if (!PyArg_ParseTuple(args, "iL", &fd, &spin_ns)) return NULL;
    if (spin_ns <= 0) return PyLong_FromLong(-1);
    if (__atomic_add_fetch(&spinners, 1, __ATOMIC_RELAXED) > MAX_SPINNERS) {
        __atomic_sub_fetch(&spinners, 1, __ATOMIC_RELAXED);
        return PyLong_FromLong(-1);
    }
    struct pollfd p = {fd, POLLIN, 0};
    Py_BEGIN_ALLOW_THREADS
    long long end = now_ns() + spin_ns;
    for (;;) {
        r = poll(&p, 1, 0);
        if (r != 0 || now_ns() >= end) break;
        sched_yield();
    }
    Py_END_ALLOW_THREADS
    __atomic_sub_fetch(&spinners, 1, __ATOMIC_RELAXED);
    /* r < 0 (EINTR, say): report "expired"; the caller's blocking read handles it. */
    return PyLong_FromLong(r > 0 ? 1 : 0);
}

static PyMethodDef methods[] = {
    {"spin_readable", spin_readable, METH_VARARGS, spin_readable_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_spin", "Yield-spinning for readable sockets (GIL released).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__spin(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && pthread_atfork(NULL, NULL, reset_in_child) != 0) {
        Py_DECREF(m);
        PyErr_SetString(PyExc_OSError, "pthread_atfork failed");
        return NULL;
    }
    if (m != NULL && (PyModule_AddIntConstant(m, "MAX_SPINNERS", MAX_SPINNERS) < 0 ||
                      PyModule_AddIntConstant(m, "READY", 1) < 0 ||
                      PyModule_AddIntConstant(m, "EXPIRED", 0) < 0 ||
                      PyModule_AddIntConstant(m, "BUSY", -1) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
