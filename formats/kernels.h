/* What kb's compiled extensions share (models/_encoder.c, runtime/_kernels.c, formats/_crc32.c):
   the x86 check, CPU feature checks asked once, and the check of a buffer against its shape.
   Include after Python.h. */

#ifndef KB_KERNELS_H
#define KB_KERNELS_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KB_X86_AVX2 1

/* static int NAME(void): whether the CPU has what TEST asks of __builtin_cpu_supports, asked once. */
#define CPU_HAS(NAME, TEST)             \
    static int NAME(void) {             \
        static int known = -1;          \
        if (known < 0) {                \
            __builtin_cpu_init();       \
            known = (TEST) ? 1 : 0;     \
        }                               \
        return known;                   \
    }
#endif

/* A buffer of ``items`` items of ``itemsize`` bytes; ``aligned``: read through typed pointers
   (the activations, which numpy allocates aligned), so its address must be a multiple of it. */
static inline int check(Py_buffer *b, Py_ssize_t items, Py_ssize_t itemsize, const char *what, int aligned) {
    if (b->len != items * itemsize) {
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, its shape needs %zd", what, b->len, items * itemsize);
        return 0;
    }
    if (aligned && (uintptr_t)b->buf % itemsize) {
        PyErr_Format(PyExc_ValueError, "%s is not aligned to %zd bytes", what, itemsize);
        return 0;
    }
    return 1;
}

/* static PyObject *FN(self, unused): which kernel runs here, FAST where HAVE() (a CPU_HAS check)
   says the CPU can, else SLOW. */
#ifdef KB_X86_AVX2
#define KERNEL_NAME(FN, HAVE, FAST, SLOW) \
    static PyObject *FN(PyObject *self, PyObject *unused) { return PyUnicode_FromString(HAVE() ? FAST : SLOW); }
#else
#define KERNEL_NAME(FN, HAVE, FAST, SLOW) \
    static PyObject *FN(PyObject *self, PyObject *unused) { return PyUnicode_FromString(SLOW); }
#endif

/* The extension module NAME over the static ``methods`` table: INIT (a statement) runs first. */
#define KB_MODULE(NAME, DOC, INIT)                                                                    \
    static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, #NAME, DOC, -1, methods, NULL, NULL, NULL, NULL}; \
    PyMODINIT_FUNC PyInit_##NAME(void) {                                                             \
        INIT;                                                                                       \
        return PyModule_Create(&module_def);                                                         \
    }

#endif
