/* kb's compiled crc32 (formats/checksum.py): zlib's values, folded with carry-less multiplies
   where the CPU has PCLMULQDQ (formats/crc32.h); zlib is the reference and the fallback. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "crc32.h"

/* crc32(data, value=0), called as zlib.crc32 is: METH_FASTCALL, since a walk of a 1M graph sums
   thousands of single pages where the call is a third of the cost. */
static PyObject *crc32(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "crc32() takes 1 or 2 arguments (%zd given)", nargs);
        return NULL;
    }
    unsigned long value = 0;
    if (nargs == 2) {
        value = PyLong_AsUnsignedLongMask(args[1]); /* as zlib's "I": the value modulo 2**32 */
        if (value == (unsigned long)-1 && PyErr_Occurred()) return NULL;
        value &= 0xFFFFFFFFul;
    }
    Py_buffer b;
    if (PyObject_GetBuffer(args[0], &b, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t c;
    if (b.len >= (1 << 16)) {
        Py_BEGIN_ALLOW_THREADS
        c = crc32_of((uint32_t)value, b.buf, (size_t)b.len);
        Py_END_ALLOW_THREADS
    } else {
        c = crc32_of((uint32_t)value, b.buf, (size_t)b.len);
    }
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(c);
}

/* crc32_many(data, starts, stops, out, n): out[i] = crc32(data[starts[i]:stops[i]]), starts and
   stops int64, out uint32; every range is checked against data's length before any is read. */
static PyObject *crc32_many(PyObject *self, PyObject *args) {
    Py_buffer b, lo, hi, out;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "y*y*y*w*n", &b, &lo, &hi, &out, &n)) return NULL;
    PyObject *result = NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "n is negative");
        goto done;
    }
    if (!check(&lo, n, 8, "starts", 1) || !check(&hi, n, 8, "stops", 1) || !check(&out, n, 4, "out", 1)) goto done;
    const int64_t *a = lo.buf, *z = hi.buf;
    for (Py_ssize_t i = 0; i < n; i++)
        if (a[i] < 0 || a[i] > z[i] || z[i] > b.len) {
            PyErr_Format(PyExc_ValueError, "range %zd (%lld:%lld) is outside the data's %zd bytes", i, (long long)a[i], (long long)z[i], b.len);
            goto done;
        }
    uint32_t *sums = out.buf;
    const unsigned char *p = b.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) sums[i] = crc32_of(0, p + a[i], (size_t)(z[i] - a[i]));
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyBuffer_Release(&b);
    PyBuffer_Release(&lo);
    PyBuffer_Release(&hi);
    PyBuffer_Release(&out);
    return result;
}

KERNEL_NAME(crc_kernel, have_pclmul, "pclmul", "table")


static PyMethodDef methods[] = {
    {"crc32", (PyCFunction)(void (*)(void))crc32, METH_FASTCALL, "crc32(data, value=0): zlib.crc32(data, value)."},
    {"crc32_many", crc32_many, METH_VARARGS, "crc32_many(data, starts, stops, out, n): out[i] = crc32(data[starts[i]:stops[i]])."},
    {"crc_kernel", crc_kernel, METH_NOARGS, "How crc32 sums on this CPU: 'pclmul' or 'table'."},
    {NULL, NULL, 0, NULL},
};

KB_MODULE(_crc32, "kb's compiled crc32.", crc_table_init())
