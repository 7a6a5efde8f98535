/* The compiled build's record walk (pybroker.records._walk): validation._walk's checks in C, for the batches it
 * proves valid. setup.py builds it beside the mypyc modules; the pure build and a build without it walk in
 * Python (validation.py).
 *
 * Like record_scan, it only ever proves a batch valid: on anything else (a malformed record of any kind, or a
 * timestamp delta of ten varint bytes, which does not fit in 64 bits) it answers None and the caller walks the
 * records in Python, which raises Kafka's exact error. tests/unit/records check that both walks agree.
 *
 * Why C: mypyc's walk checks a record in about 17 ns (each varint a call, each byte read range-checked through
 * the object), this one in about 6; on W1's lz4 batches (100-byte messages) that is about a tenth of the
 * broker's CPU per message (docs/scaling.md). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* The zig-zag varint at *pos, of at most max_bytes bytes, all before limit: 0 and *value, *pos past it; -1 if
 * it runs past limit or is longer (five bytes for sizes and counts, nine here for timestamp deltas: a tenth
 * byte is left to the Python walk, whose integers hold its 70 bits). */
static inline int varint(const uint8_t *data, Py_ssize_t limit, Py_ssize_t *pos, int max_bytes, int64_t *value) {
    Py_ssize_t p = *pos;
    uint64_t raw = 0;
    for (int shift = 0; shift < 7 * max_bytes; shift += 7) {
        if (p >= limit) {
            return -1;
        }
        uint8_t byte = data[p++];
        raw |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *pos = p;
            *value = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 0;
        }
    }
    return -1;
}

/* A key or value size (nullable) or a header value size: skip it, or -1 if negative below -1 or past end. */
static inline int skip_nullable(const uint8_t *data, Py_ssize_t end, Py_ssize_t *pos, int64_t *size) {
    if (varint(data, end, pos, 5, size) || *size < -1 || (*size > 0 && *size > end - *pos)) {
        return -1;
    }
    if (*size > 0) {
        *pos += *size;
    }
    return 0;
}

/* Walk count records filling data[0:n]: 0 and the summary, -1 when they are not shown valid here, -2 when
 * pause raised. pause (or NULL) is called every `every` records, as the Python walk does. */
static int walk(const uint8_t *data, Py_ssize_t n, int64_t count, PyObject *pause, int64_t every,
                int64_t *min_delta, int64_t *max_delta, int *keyless) {
    Py_ssize_t pos = 0;
    int64_t low = INT64_MAX, high = -INT64_MAX, value;
    int any_keyless = 0;
    for (int64_t index = 0; index < count; index++) {
        int64_t length;
        if (varint(data, n, &pos, 5, &length) || length <= 0 || length > n - pos) {
            return -1;
        }
        Py_ssize_t end = pos + (Py_ssize_t)length;
        pos++; /* the attributes byte */
        if (varint(data, end, &pos, 9, &value)) {
            return -1;
        }
        low = value < low ? value : low;
        high = value > high ? value : high;
        if (varint(data, end, &pos, 5, &value) || value != index) { /* the offset delta */
            return -1;
        }
        if (skip_nullable(data, end, &pos, &value)) { /* the key */
            return -1;
        }
        any_keyless |= value == -1;
        int64_t headers;
        if (skip_nullable(data, end, &pos, &value) || varint(data, end, &pos, 5, &headers) || headers < 0
            || headers > end - pos) {
            return -1;
        }
        for (int64_t header = 0; header < headers; header++) {
            if (varint(data, end, &pos, 5, &value) || value < 0 || value > end - pos) { /* the key */
                return -1;
            }
            pos += (Py_ssize_t)value;
            if (skip_nullable(data, end, &pos, &value)) {
                return -1;
            }
        }
        if (pos != end) {
            return -1;
        }
        if (pause != NULL && (index + 1) % every == 0) {
            PyObject *result = PyObject_CallNoArgs(pause);
            if (result == NULL) {
                return -2;
            }
            Py_DECREF(result);
        }
    }
    if (pos != n) {
        return -1;
    }
    *min_delta = low;
    *max_delta = high;
    *keyless = any_keyless;
    return 0;
}

static PyObject *scan(PyObject *module, PyObject *args) {
    Py_buffer view;
    long long count, every;
    PyObject *pause;
    if (!PyArg_ParseTuple(args, "y*LOL:scan", &view, &count, &pause, &every)) {
        return NULL;
    }
    int64_t low = 0, high = 0;
    int keyless = 0;
    int found = -1;
    if (count >= 0 && every > 0) {
        found = walk((const uint8_t *)view.buf, view.len, count, pause == Py_None ? NULL : pause, every, &low,
                     &high, &keyless);
    }
    PyBuffer_Release(&view);
    if (found == -2) {
        return NULL;
    }
    if (found != 0) {
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(LLO)", (long long)low, (long long)high, keyless ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     PyDoc_STR("scan(data, count, pause, every) -> (min timestamp delta, max timestamp delta, any keyless) of the "
               "count records filling data, or None when they are not shown valid here (the Python walk then "
               "decides); pause (or None) is called every `every` records.")},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pybroker.records._walk",
    PyDoc_STR("The compiled build's record walk (validation.py): it proves a batch valid or leaves it to the "
              "Python walk."),
    0, methods,
};

PyMODINIT_FUNC PyInit__walk(void) {
    return PyModule_Create(&module);
}
