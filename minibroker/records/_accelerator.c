/* The optional C accelerator of the record layer: minibroker.records._accelerator.
 *
 * What it does: the per-record loops of an append, which in Python cost the interpreter's time per
 * record (docs/records.md, "The C accelerator"). Each function here decides only what it can decide
 * exactly as the Python code in v2.py does; for anything else (a record that does not parse, an
 * argument out of the ordinary) it returns None and the caller runs the Python code, which is the
 * reference and says what is wrong in Kafka's words. So the C code never makes an error message:
 * equal outcomes on every input follow from equal acceptance, which the differential test checks
 * (tests/records/test_accelerator.py).
 *
 * Safety, whatever the bytes: every read is checked against the end of the section, and the section
 * against the buffer; positions and lengths are 64-bit (Py_ssize_t) and a length is compared with
 * what is left before it is added, so no sum overflows; varints are read byte by byte, at most 5
 * (int32) or 10 (int64) bytes. Buffers come through the buffer protocol (bytes, bytearray,
 * memoryview of either: any C-contiguous buffer) and are held, not copied, for the call; a walk of
 * a large section releases the GIL meanwhile (the buffer export keeps a bytearray from resizing).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* a walk of at least this many bytes releases the GIL (see accelerator.py's RELEASE_GIL_BYTES) */
static Py_ssize_t release_gil_bytes = 64 * 1024;

enum { V_OK = 0, V_END = 1, V_BAD = 2 };

/* One zig-zag int32 varint at *pos, as v2._varint(..., 28, _M32): V_END if the section ends inside
 * it, V_BAD if it is longer than 5 bytes or its 5th byte sets bits beyond 32. */
static inline int
varint32(const unsigned char *b, Py_ssize_t *pos, Py_ssize_t end, int32_t *out)
{
    Py_ssize_t p = *pos;
    uint32_t raw = 0;
    int shift;
    for (shift = 0;; shift += 7) {
        unsigned int c;
        if (p >= end)
            return V_END;
        c = b[p++];
        if (shift == 28) {
            if (c >= 0x80 || c > 0x0F)
                return V_BAD;
            raw |= (uint32_t)c << 28;
            break;
        }
        raw |= (uint32_t)(c & 0x7F) << shift;
        if (c < 0x80)
            break;
    }
    *pos = p;
    *out = (int32_t)((raw >> 1) ^ (0u - (raw & 1u)));
    return V_OK;
}

/* One zig-zag int64 varint (a varlong) at *pos, as v2._varint(..., 63, _M64): at most 10 bytes, the
 * 10th holding only bit 63. */
static inline int
varint64(const unsigned char *b, Py_ssize_t *pos, Py_ssize_t end, int64_t *out)
{
    Py_ssize_t p = *pos;
    uint64_t raw = 0;
    int shift;
    for (shift = 0;; shift += 7) {
        unsigned int c;
        if (p >= end)
            return V_END;
        c = b[p++];
        if (shift == 63) {
            if (c > 1)
                return V_BAD;
            raw |= (uint64_t)c << 63;
            break;
        }
        raw |= (uint64_t)(c & 0x7F) << shift;
        if (c < 0x80)
            break;
    }
    *pos = p;
    *out = (int64_t)((raw >> 1) ^ (0ull - (raw & 1ull)));
    return V_OK;
}

/* v2.read_record's acceptance: 1 and the record's facts if the record at pos parses, else 0. Every
 * field is read against end (the section's end, as Kafka's reader does), then the record must end
 * exactly where its length said. */
static inline int
read_record(const unsigned char *b, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t *next, int64_t *ts,
            int32_t *off, int *key_null)
{
    Py_ssize_t p = pos, body_end;
    int32_t size, n, count, i;
    if (pos >= end || varint32(b, &p, end, &size) != V_OK)
        return 0;
    if (size < 0 || size > end - p)
        return 0;
    body_end = p + size;
    if (p >= end)
        return 0;
    p += 1; /* attributes: unused in v2 */
    if (varint64(b, &p, end, ts) != V_OK || varint32(b, &p, end, off) != V_OK)
        return 0;
    if (varint32(b, &p, end, &n) != V_OK) /* key: any negative length is a null */
        return 0;
    *key_null = n < 0;
    if (n > 0) {
        if (n > end - p)
            return 0;
        p += n;
    }
    if (varint32(b, &p, end, &n) != V_OK) /* value */
        return 0;
    if (n > 0) {
        if (n > end - p)
            return 0;
        p += n;
    }
    if (varint32(b, &p, end, &count) != V_OK || count < 0 || count > end - p)
        return 0;
    for (i = 0; i < count; i++) {
        if (varint32(b, &p, end, &n) != V_OK || n < 0 || n > end - p) /* key: never null */
            return 0;
        p += n;
        if (varint32(b, &p, end, &n) != V_OK)
            return 0;
        if (n > 0) {
            if (n > end - p)
                return 0;
            p += n;
        }
    }
    if (p != body_end)
        return 0;
    *next = body_end;
    return 1;
}

/* v2.whole_record_at: whether buf[pos:end] holds the whole record at pos as far as its length says
 * (a length no record has counts as whole: waiting for more bytes would not mend it). */
static inline int
whole_record_at(const unsigned char *b, Py_ssize_t pos, Py_ssize_t end)
{
    Py_ssize_t p = pos;
    int32_t size;
    int got = varint32(b, &p, end, &size);
    if (got == V_END)
        return 0;
    if (got == V_BAD)
        return 1;
    return size < 0 || size <= end - p;
}

/* Takes a C-contiguous buffer of bytes and checks 0 <= start <= end <= its length. Returns 0 (and
 * no buffer held) when the arguments are not the ordinary ones: the caller falls back to Python. */
static int
get_section(PyObject *obj, Py_buffer *view, Py_ssize_t start, Py_ssize_t end)
{
    /* PyBUF_ND without strides: C-contiguous only (a memoryview refuses PyBUF_FORMAT without ND) */
    if (PyObject_GetBuffer(obj, view, PyBUF_ND | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        return 0;
    }
    /* one dimension of unsigned bytes, as Python's buf[i] reads them: a memoryview cast to 'i' or
     * 'b' (or to two dimensions) indexes other values than its bytes, so its walk is Python's */
    if (view->ndim != 1 || view->itemsize != 1 || (view->format != NULL && strcmp(view->format, "B") != 0) ||
        start < 0 || start > end || end > view->len) {
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

typedef struct {
    int64_t tmin, tmax;
    Py_ssize_t nulls, walked, pos;
    int in_order;
    int outcome; /* 0: walked all; 1: stopped before a record not whole (partial); 2: not decided */
} walk_state;

static void
walk(const unsigned char *b, Py_ssize_t start, Py_ssize_t end, long long count, long long first,
     int partial, walk_state *w)
{
    Py_ssize_t pos = start, next = 0;
    long long i;
    w->tmin = w->tmax = 0;
    w->nulls = 0;
    w->in_order = 1;
    w->outcome = 0;
    for (i = 0; i < count; i++) {
        int64_t t;
        int32_t off;
        int null;
        if (!read_record(b, pos, end, &next, &t, &off, &null)) {
            w->outcome = (partial && !whole_record_at(b, pos, end)) ? 1 : 2;
            break;
        }
        if (i == 0) {
            w->tmin = w->tmax = t;
        } else if (t > w->tmax) {
            w->tmax = t;
        } else if (t < w->tmin) {
            w->tmin = t;
        }
        w->nulls += null;
        if ((long long)off != first + i)
            w->in_order = 0;
        pos = next;
    }
    w->walked = (Py_ssize_t)i;
    w->pos = pos;
}

PyDoc_STRVAR(walk_records_doc,
"walk_records(buf, start, end, count, first=0, partial=False) -> tuple | None\n\n"
"v2.walk_records for a section it can decide: the same tuple, or None when a record does not parse\n"
"(or the arguments are unusual), for the Python walk to raise Kafka's error.");

static PyObject *
walk_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t start, end;
    long long count, first = 0;
    int partial = 0;
    Py_buffer view;
    walk_state w;
    if (nargs < 4 || nargs > 6) {
        PyErr_SetString(PyExc_TypeError, "walk_records takes 4 to 6 arguments");
        return NULL;
    }
    /* not an int, or out of range: the Python walk's business (each conversion checked at once: no
     * C-API call with an exception pending) */
    if ((start = PyLong_AsSsize_t(args[1])) == -1 && PyErr_Occurred())
        goto not_ours;
    if ((end = PyLong_AsSsize_t(args[2])) == -1 && PyErr_Occurred())
        goto not_ours;
    if ((count = PyLong_AsLongLong(args[3])) == -1 && PyErr_Occurred())
        goto not_ours;
    if (nargs > 4 && (first = PyLong_AsLongLong(args[4])) == -1 && PyErr_Occurred())
        goto not_ours;
    if (nargs > 5 && (partial = PyObject_IsTrue(args[5])) < 0)
        goto not_ours;
    /* no records, a window numbered from below 0, or counts near the top of the range: Python's */
    if (count <= 0 || first < 0 || first > INT32_MAX || count > INT32_MAX)
        Py_RETURN_NONE;
    if (!get_section(args[0], &view, start, end))
        Py_RETURN_NONE;
    if (partial && end != view.len) { /* a window always ends with its buffer */
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    if (end - start >= release_gil_bytes) {
        Py_BEGIN_ALLOW_THREADS
        walk((const unsigned char *)view.buf, start, end, count, first, partial, &w);
        Py_END_ALLOW_THREADS
    } else {
        walk((const unsigned char *)view.buf, start, end, count, first, partial, &w);
    }
    PyBuffer_Release(&view);
    if (w.outcome == 2 || (!partial && w.pos != end))
        Py_RETURN_NONE; /* a record that does not parse, or bytes after the last: Python says which */
    if (partial) {
        if (w.walked == 0)
            return Py_BuildValue("(iiiOnn)", 0, 0, 0, Py_True, start, (Py_ssize_t)0);
        return Py_BuildValue("(LLnOnn)", (long long)w.tmin, (long long)w.tmax, w.nulls,
                             w.in_order ? Py_True : Py_False, w.pos, w.walked);
    }
    return Py_BuildValue("(LLnO)", (long long)w.tmin, (long long)w.tmax, w.nulls,
                         w.in_order ? Py_True : Py_False);
not_ours:
    PyErr_Clear();
    Py_RETURN_NONE;
}

PyDoc_STRVAR(whole_records_doc,
"whole_records(buf, pos, end, most, max_record_bytes) -> (n, pos, status) | None\n\n"
"v2._whole_records: how many whole records (at most most) start at pos, where they end, and the\n"
"status of the next one (bytes it takes, 0 unknown yet, -1 not a record's length, -2 too large).");

static PyObject *
whole_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t pos, end, n = 0, status = 0;
    long long most, limit;
    int overflow = 0;
    Py_buffer view;
    const unsigned char *b;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "whole_records takes 5 arguments");
        return NULL;
    }
    if (((pos = PyLong_AsSsize_t(args[1])) == -1 && PyErr_Occurred()) ||
        ((end = PyLong_AsSsize_t(args[2])) == -1 && PyErr_Occurred()) ||
        ((most = PyLong_AsLongLong(args[3])) == -1 && PyErr_Occurred()) ||
        ((limit = PyLong_AsLongLongAndOverflow(args[4], &overflow)) == -1 && PyErr_Occurred())) {
        PyErr_Clear(); /* not an int, or out of range: Python's */
        Py_RETURN_NONE;
    }
    if (overflow > 0)
        limit = LLONG_MAX; /* larger than any length: no record is too large */
    else if (overflow < 0)
        Py_RETURN_NONE;
    if (!get_section(args[0], &view, pos, end))
        Py_RETURN_NONE;
    b = (const unsigned char *)view.buf;
    while (n < most && pos < end) {
        Py_ssize_t body = pos, stop;
        int32_t size;
        int got = varint32(b, &body, end, &size);
        if (got == V_END) {
            status = 0;
            break;
        }
        if (got == V_BAD || size < 0) {
            status = -1;
            break;
        }
        if ((long long)size > limit) {
            status = -2;
            break;
        }
        if (size > end - body) {
            status = body + size - pos; /* the bytes the record takes from pos: no overflow, size < 2^31 */
            break;
        }
        stop = body + size;
        pos = stop;
        n++;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(nnn)", n, pos, status);
}

PyDoc_STRVAR(set_release_gil_bytes_doc,
"set_release_gil_bytes(n) -> previous\n\nWalks of sections of at least n bytes release the GIL.");

static PyObject *
set_release_gil_bytes(PyObject *self, PyObject *arg)
{
    Py_ssize_t n = PyLong_AsSsize_t(arg), previous = release_gil_bytes;
    if (n == -1 && PyErr_Occurred())
        return NULL;
    release_gil_bytes = n < 0 ? 0 : n;
    return PyLong_FromSsize_t(previous);
}

static PyMethodDef methods[] = {
    {"walk_records", (PyCFunction)(void (*)(void))walk_records, METH_FASTCALL, walk_records_doc},
    {"whole_records", (PyCFunction)(void (*)(void))whole_records, METH_FASTCALL, whole_records_doc},
    {"set_release_gil_bytes", set_release_gil_bytes, METH_O, set_release_gil_bytes_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "minibroker.records._accelerator",
    "The record layer's C accelerator (see accelerator.py); the Python code in v2.py is the reference.",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__accelerator(void)
{
    return PyModule_Create(&module);
}
