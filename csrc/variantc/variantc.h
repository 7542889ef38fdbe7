/* The archive's VARIANT encoder in C: what its three files share. */
#ifndef TIDINGS_VARIANTC_H
#define TIDINGS_VARIANTC_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define OK 0
#define ERR (-1)     /* a Python exception is set */
#define FALLBACK 1   /* not handled here: the Python encoder decides */
#define MAX_DEPTH 200

typedef struct {
    unsigned char *p;
    Py_ssize_t len, cap;
} Buf;

static inline int reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return OK;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) cap *= 2;
    unsigned char *p = PyMem_Realloc(b->p, (size_t)cap);
    if (!p) {
        PyErr_NoMemory();
        return ERR;
    }
    b->p = p;
    b->cap = cap;
    return OK;
}

static inline int put(Buf *b, const void *src, Py_ssize_t n) {
    if (reserve(b, n) != OK) return ERR;
    if (n) memcpy(b->p + b->len, src, (size_t)n);
    b->len += n;
    return OK;
}

static inline int put_byte(Buf *b, unsigned char c) { return put(b, &c, 1); }

static inline void write_uint(unsigned char *dst, uint64_t v, int size) {
    for (int i = 0; i < size; i++) dst[i] = (unsigned char)(v >> (8 * i));
}

static inline int size_of(Py_ssize_t n) { return n <= 0xFF ? 1 : n <= 0xFFFF ? 2 : n <= 0xFFFFFF ? 3 : 4; }

/* ---- per-row state ---- */

typedef struct {
    Py_ssize_t key, key_len; /* the name in ``names`` */
    Py_ssize_t index, off, len; /* position in the object, and the value in the output */
    int scalar;                 /* what _variant._scalar encodes */
} Field;

typedef struct {
    const unsigned char *p, *end;
    Buf out;      /* the value being written */
    Buf names;    /* the bytes of every field name met in the row */
    Buf fields;   /* Field stack, one frame per open object */
    Buf offsets;  /* Py_ssize_t stack, one frame per open array */
    Buf scratch;  /* an object's values while they are put in name order; an escaped text */
    Buf ids;      /* an object's field ids */
    Buf dict;     /* Py_ssize_t[2] per key id: (offset in names, length) */
    int32_t *slots; /* hash table over dict, -1 = empty */
    Py_ssize_t nslots, nkeys;
    int depth;
    int scalar; /* whether the value just read is one _variant._scalar encodes */
} Row;

/* read.c: the row's state and the JSON text */
void row_free(Row *r);
void row_reset(Row *r, const unsigned char *p, Py_ssize_t n);
Py_ssize_t key_id(Row *r, Py_ssize_t key, Py_ssize_t len);
void skip_ws(Row *r);
int eat(Row *r, unsigned char c);
int read_string(Row *r, Buf *dst);
int read_number(Row *r, const unsigned char **start, Py_ssize_t *len, int *integer);
int literal(Row *r, const char *word);

/* encode.c: the VARIANT of one row */
int encode_row(Row *r, const unsigned char *text, Py_ssize_t n);
int enc_metadata(Row *r, Buf *b);

#endif
