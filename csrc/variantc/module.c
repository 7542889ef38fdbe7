/* The archive's VARIANT encoder in C: from the ICRC-16 wire JSON text straight to the
 * bytes tidings/pipeline/_variant.py makes from the decoded value.
 *
 * Why it exists: decoding the text into Python objects and encoding them in Python costs
 * about 5 us an event, which bounded the archive's staging (BENCHMARKS.md). This file
 * reads the text once and writes the VARIANT, without Python objects. _variant.py stays
 * the definition: tests compare the two byte for byte on random ICRC-16 values. Whatever
 * these files do not handle the way Python would (a number written in an unusual form,
 * an unknown variant, a lone surrogate, deep nesting) it hands back to a Python fallback,
 * so errors and rare cases are Python's. The build treats the module as optional.
 *
 * encode_json(text) -> (metadata, value) | None (None: use the Python encoder)
 * encode_column(data, offsets, wide, start, count, fallback)
 *     -> (metadata offsets, metadata, value offsets, values)
 *     ``data`` and ``offsets`` are an Arrow string array's buffers (UTF-8, as Arrow strings
 *     are; int32 offsets, or int64 when ``wide``); the result is four Arrow
 *     binary buffers (int32 offsets). ``fallback(text)`` gives (metadata, value) for a
 *     row the C encoder hands back.
 *
 * read.c reads the JSON text; encode.c writes the VARIANT; this file is the module.
 */
#include "variantc.h"

static PyObject *py_encode_json(PyObject *self, PyObject *arg) {
    Py_buffer view;
    const char *text;
    Py_ssize_t n;
    int from_buffer = 0;
    if (PyUnicode_Check(arg)) {
        text = PyUnicode_AsUTF8AndSize(arg, &n);
        if (!text) return NULL;
    } else {
        if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
        text = view.buf;
        n = view.len;
        from_buffer = 1;
    }
    Row r = {0};
    Buf meta = {0};
    PyObject *out = NULL;
    int rc = encode_row(&r, (const unsigned char *)text, n);
    if (rc == OK) rc = enc_metadata(&r, &meta);
    if (rc == OK)
        out = Py_BuildValue("(y#y#)", (char *)meta.p, meta.len, (char *)r.out.p, r.out.len);
    else if (rc == FALLBACK)
        out = Py_NewRef(Py_None);
    if (from_buffer) PyBuffer_Release(&view);
    row_free(&r);
    PyMem_Free(meta.p);
    return out;
}

static int put_offset(Buf *offsets, Py_ssize_t at) {
    if (at > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "the VARIANT column passes 2 GiB: encode it in slices");
        return ERR;
    }
    unsigned char raw[4];
    write_uint(raw, (uint64_t)at, 4);
    return put(offsets, raw, 4);
}

/* The fallback's (metadata, value) for one row, appended to the column. */
static int put_fallback(PyObject *fallback, const unsigned char *text, Py_ssize_t n, Buf *md, Buf *vd) {
    PyObject *s = PyUnicode_DecodeUTF8((const char *)text, n, "strict");
    PyObject *pair = s ? PyObject_CallOneArg(fallback, s) : NULL;
    Py_XDECREF(s);
    if (!pair) return ERR;
    char *m, *v;
    Py_ssize_t mn, vn;
    int rc = ERR;
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2)
        PyErr_SetString(PyExc_TypeError, "the fallback must return (metadata, value)");
    else if (PyBytes_AsStringAndSize(PyTuple_GET_ITEM(pair, 0), &m, &mn) == 0 &&
             PyBytes_AsStringAndSize(PyTuple_GET_ITEM(pair, 1), &v, &vn) == 0)
        rc = put(md, m, mn) == OK && put(vd, v, vn) == OK ? OK : ERR;
    Py_DECREF(pair);
    return rc;
}

static PyObject *py_encode_column(PyObject *self, PyObject *args) {
    Py_buffer data, offs;
    int wide;
    Py_ssize_t start, count;
    PyObject *fallback;
    if (!PyArg_ParseTuple(args, "y*y*pnnO:encode_column", &data, &offs, &wide, &start, &count, &fallback))
        return NULL;
    Py_ssize_t width = wide ? 8 : 4;
    PyObject *out = NULL;
    Row r = {0};
    Buf mo = {0}, md = {0}, vo = {0}, vd = {0};
    if (start < 0 || count < 0 || (start + count + 1) * width > offs.len) {
        PyErr_SetString(PyExc_ValueError, "the offsets buffer is shorter than start + count + 1 offsets");
        goto done;
    }
    /* room for the usual case up front: a VARIANT is shorter than its JSON text */
    if (reserve(&vd, data.len / 2 + 64) != OK || reserve(&md, 48 * count + 64) != OK ||
        reserve(&mo, 4 * count + 4) != OK || reserve(&vo, 4 * count + 4) != OK)
        goto done;
    if (put_offset(&mo, 0) != OK || put_offset(&vo, 0) != OK) goto done;
    for (Py_ssize_t i = start; i < start + count; i++) {
        int64_t a, z;
        if (wide) {
            memcpy(&a, (char *)offs.buf + 8 * i, 8);
            memcpy(&z, (char *)offs.buf + 8 * (i + 1), 8);
        } else {
            int32_t a4, z4;
            memcpy(&a4, (char *)offs.buf + 4 * i, 4);
            memcpy(&z4, (char *)offs.buf + 4 * (i + 1), 4);
            a = a4;
            z = z4;
        }
        if (a < 0 || z < a || z > data.len) {
            PyErr_SetString(PyExc_ValueError, "an offset points outside the data buffer");
            goto done;
        }
        const unsigned char *text = (const unsigned char *)data.buf + a;
        int rc = encode_row(&r, text, (Py_ssize_t)(z - a));
        if (rc == OK) rc = put(&vd, r.out.p, r.out.len) == OK && enc_metadata(&r, &md) == OK ? OK : ERR;
        else if (rc == FALLBACK) rc = put_fallback(fallback, text, (Py_ssize_t)(z - a), &md, &vd);
        if (rc != OK || put_offset(&mo, md.len) != OK || put_offset(&vo, vd.len) != OK) goto done;
    }
    out = Py_BuildValue("(y#y#y#y#)", (char *)mo.p, mo.len, md.p ? (char *)md.p : "", md.len, (char *)vo.p, vo.len,
                        vd.p ? (char *)vd.p : "", vd.len);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&offs);
    row_free(&r);
    PyMem_Free(mo.p);
    PyMem_Free(md.p);
    PyMem_Free(vo.p);
    PyMem_Free(vd.p);
    return out;
}

static PyMethodDef methods[] = {
    {"encode_json", py_encode_json, METH_O,
     "(metadata, value) of one ICRC-16 wire JSON text, or None where the Python encoder must decide."},
    {"encode_column", py_encode_column, METH_VARARGS,
     "encode_column(data, offsets, wide, start, count, fallback): Arrow binary buffers of a column."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_variantc", NULL, -1, methods};

PyMODINIT_FUNC PyInit__variantc(void) { return PyModule_Create(&module); }
