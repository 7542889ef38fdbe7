/* The VARIANT bytes of one row, rule for rule as tidings/pipeline/_variant.py. */
#include "variantc.h"

/* ---- scalars ---- */

static int enc_double(Buf *b, double x) {
    if (!isfinite(x)) return put_byte(b, 0x00);
    unsigned char out[9];
    out[0] = 7 << 2;
    if (PyFloat_Pack8(x, (char *)out + 1, 1) < 0) return ERR;
    return put(b, out, 9);
}

static int enc_int(Row *r) {
    const unsigned char *s;
    Py_ssize_t n;
    int integer, rc = read_number(r, &s, &n, &integer);
    if (rc != OK) return rc;
    if (!integer) return FALLBACK; /* 5.0 or 1e3 where an integer belongs: Python's call */
    int neg = *s == '-';
    const unsigned char *d = s + neg;
    Py_ssize_t nd = n - neg;
    unsigned char out[18];
    if (nd <= 38) {
        unsigned __int128 u = 0;
        for (Py_ssize_t i = 0; i < nd; i++) u = u * 10 + (unsigned)(d[i] - '0');
        __int128 v = neg ? -(__int128)u : (__int128)u;
        if (v >= -0x80 && v <= 0x7F) {
            out[0] = 0x0c;
            write_uint(out + 1, (uint64_t)v, 1);
            return put(&r->out, out, 2);
        }
        if (v >= -0x8000 && v <= 0x7FFF) {
            out[0] = 0x10;
            write_uint(out + 1, (uint64_t)v, 2);
            return put(&r->out, out, 3);
        }
        if (v >= -0x80000000LL && v <= 0x7FFFFFFFLL) {
            out[0] = 0x14;
            write_uint(out + 1, (uint64_t)v, 4);
            return put(&r->out, out, 5);
        }
        if (v >= INT64_MIN && v <= INT64_MAX) {
            out[0] = 0x18;
            write_uint(out + 1, (uint64_t)v, 8);
            return put(&r->out, out, 9);
        }
        out[0] = 10 << 2; /* decimal(38, 0) */
        out[1] = 0;
        write_uint(out + 2, (uint64_t)v, 8);
        write_uint(out + 10, (uint64_t)(v >> 64), 8);
        return put(&r->out, out, 18);
    }
    if (n > 300) return FALLBACK; /* past a double's range: Python raises */
    char text[320];
    memcpy(text, s, (size_t)n);
    text[n] = 0;
    double x = strtod(text, NULL); /* correctly rounded, as Python's float(int) */
    if (!isfinite(x)) return FALLBACK;
    return enc_double(&r->out, x);
}

static int enc_float(Row *r) {
    const unsigned char *s;
    Py_ssize_t n;
    int integer, rc = read_number(r, &s, &n, &integer);
    if (rc != OK) return rc;
    if (n > 300) return FALLBACK;
    char text[320];
    memcpy(text, s, (size_t)n);
    text[n] = 0;
    char *stop;
    double x = strtod(text, &stop);
    if (stop != text + n || !isfinite(x)) return FALLBACK;
    return enc_double(&r->out, x);
}

static int enc_string(Row *r) {
    r->scratch.len = 0;
    int rc = read_string(r, &r->scratch);
    if (rc != OK) return rc;
    Py_ssize_t n = r->scratch.len;
    if (n < 64) {
        if (put_byte(&r->out, (unsigned char)((n << 2) | 1)) != OK) return ERR;
    } else {
        if (n > 0xFFFFFFFFLL) return FALLBACK;
        unsigned char head[5] = {16 << 2};
        write_uint(head + 1, (uint64_t)n, 4);
        if (put(&r->out, head, 5) != OK) return ERR;
    }
    return put(&r->out, r->scratch.p, n);
}

/* ---- containers ---- */

/* Puts the header (head byte, element count, ``ids``, ``offsets``) in front of the
 * ``offsets[n]`` bytes of values written since ``start``, as _variant._container does. */
static int finish_container(Buf *b, Py_ssize_t start, unsigned flags, int basic, Py_ssize_t n,
                            const Py_ssize_t *offsets, const unsigned char *ids, Py_ssize_t ids_len) {
    Py_ssize_t total = offsets[n];
    int off_size = size_of(total), large = n > 0xFF;
    Py_ssize_t hdr = 1 + (large ? 4 : 1) + ids_len + (n + 1) * off_size;
    if (reserve(b, hdr) != OK) return ERR;
    unsigned char *at = b->p + start;
    memmove(at + hdr, at, (size_t)total);
    *at++ = (unsigned char)(((flags | (unsigned)(off_size - 1)) << 2) | (unsigned)basic);
    write_uint(at, (uint64_t)n, large ? 4 : 1);
    at += large ? 4 : 1;
    if (ids_len) memcpy(at, ids, (size_t)ids_len);
    at += ids_len;
    for (Py_ssize_t i = 0; i <= n; i++, at += off_size) write_uint(at, (uint64_t)offsets[i], off_size);
    b->len = start + hdr + total;
    return OK;
}

enum Item { ITEM_VALUE, ITEM_FLOAT, ITEM_INT, ITEM_PAIR };

static int enc_value(Row *r);

static int enc_array(Row *r, enum Item kind) {
    if (!eat(r, '[')) return FALLBACK;
    Py_ssize_t start = r->out.len, frame = r->offsets.len, n = 0;
    int rc = OK;
    if (!eat(r, ']')) {
        do {
            Py_ssize_t at = r->out.len - start;
            if (put(&r->offsets, &at, sizeof at) != OK) return ERR;
            n++;
            switch (kind) {
            case ITEM_FLOAT: rc = enc_float(r); break;
            case ITEM_INT: rc = enc_int(r); break;
            case ITEM_PAIR: {
                rc = enc_array(r, ITEM_VALUE);
                /* a ValueMap entry is a two-item array */
                if (rc == OK) {
                    const unsigned char *entry = r->out.p + start + at;
                    if ((entry[0] & 3) != 3 || entry[1] != 2 || (entry[0] >> 4) & 1) rc = FALLBACK;
                }
                break;
            }
            default: rc = enc_value(r);
            }
            if (rc != OK) return rc;
        } while (eat(r, ','));
        if (!eat(r, ']')) return FALLBACK;
    }
    Py_ssize_t end = r->out.len - start;
    if (put(&r->offsets, &end, sizeof end) != OK) return ERR;
    const Py_ssize_t *offsets = (const Py_ssize_t *)(r->offsets.p + frame);
    rc = finish_container(&r->out, start, (unsigned)((n > 0xFF) << 2), 3, n, offsets, NULL, 0);
    r->offsets.len = frame;
    return rc;
}

static int field_order(const void *a, const void *b, void *names) {
    const Field *x = a, *y = b;
    Py_ssize_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp((unsigned char *)names + x->key, (unsigned char *)names + y->key, (size_t)n);
    if (c) return c; /* UTF-8 byte order is code point order, as Python's sorted() */
    if (x->key_len != y->key_len) return x->key_len < y->key_len ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

static int same_name(const Row *r, const Field *x, const Field *y) {
    return x->key_len == y->key_len && memcmp(r->names.p + x->key, r->names.p + y->key, (size_t)x->key_len) == 0;
}

/* Reads one Class field ``{"name": ..., "value": ..., "immutable": ...}``, in any order. */
static int class_field(Row *r, Field *f, Py_ssize_t start) {
    if (!eat(r, '{')) return FALLBACK;
    int have_name = 0, have_value = 0;
    do {
        Py_ssize_t mark = r->scratch.len;
        int rc = read_string(r, &r->scratch);
        if (rc != OK) return rc;
        Py_ssize_t klen = r->scratch.len - mark;
        const unsigned char *k = r->scratch.p + mark;
        int is_name = klen == 4 && memcmp(k, "name", 4) == 0, is_value = klen == 5 && memcmp(k, "value", 5) == 0;
        r->scratch.len = mark;
        if (!eat(r, ':')) return FALLBACK;
        if (is_name && !have_name) {
            f->key = r->names.len;
            if ((rc = read_string(r, &r->names)) != OK) return rc;
            f->key_len = r->names.len - f->key;
            have_name = 1;
        } else if (is_value && !have_value) {
            f->off = r->out.len - start;
            if ((rc = enc_value(r)) != OK) return rc;
            f->len = r->out.len - start - f->off;
            have_value = 1;
        } else if (klen == 9 && memcmp(k, "immutable", 9) == 0) {
            if (!literal(r, "true") && !literal(r, "false")) return FALLBACK;
        } else {
            return FALLBACK; /* another key, or a repeated one */
        }
    } while (eat(r, ','));
    return eat(r, '}') && have_name && have_value ? OK : FALLBACK;
}

/* A Map (``[[name, value], ...]``) or a Class: every value is encoded in the given order,
 * so that nested names get their ids as in Python; a repeated name keeps its last value. */
static int enc_object(Row *r, int is_class) {
    if (!eat(r, '[')) return FALLBACK;
    Py_ssize_t start = r->out.len, frame = r->fields.len, n = 0;
    int rc;
    if (!eat(r, ']')) {
        do {
            Field f = {0};
            f.index = n++;
            if (is_class) {
                if ((rc = class_field(r, &f, start)) != OK) return rc;
            } else {
                if (!eat(r, '[')) return FALLBACK;
                f.key = r->names.len;
                if ((rc = read_string(r, &r->names)) != OK) return rc;
                f.key_len = r->names.len - f.key;
                if (!eat(r, ',')) return FALLBACK;
                f.off = r->out.len - start;
                if ((rc = enc_value(r)) != OK) return rc;
                f.len = r->out.len - start - f.off;
                f.scalar = r->scalar;
                if (!eat(r, ']')) return FALLBACK;
            }
            if (put(&r->fields, &f, sizeof f) != OK) return ERR;
        } while (eat(r, ','));
        if (!eat(r, ']')) return FALLBACK;
    }
    Field *fields = (Field *)(r->fields.p + frame);
    qsort_r(fields, (size_t)n, sizeof(Field), field_order, r->names.p);
    Py_ssize_t m = 0; /* the last of each run of equal names */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + 1 < n && same_name(r, &fields[i], &fields[i + 1])) continue;
        fields[m++] = fields[i];
    }
    int flat = !is_class && r->depth == 1 && n <= 0xFF;
    for (Py_ssize_t i = 0; i < m && flat; i++) flat = fields[i].scalar;
    if (flat) { /* _variant._flat_map: the names of values left out by a repeated name do not count */
        r->dict.len = 0;
        r->nkeys = 0;
        if (r->slots) memset(r->slots, 0xFF, sizeof(int32_t) * (size_t)r->nslots);
    }
    r->ids.len = 0;
    if (reserve(&r->ids, (Py_ssize_t)sizeof(Py_ssize_t) * (m ? m : 1)) != OK) return ERR;
    Py_ssize_t *id_of = (Py_ssize_t *)r->ids.p;
    for (Py_ssize_t i = 0; i < m; i++) {
        id_of[i] = key_id(r, fields[i].key, fields[i].key_len);
        if (id_of[i] < 0) return ERR;
        fields = (Field *)(r->fields.p + frame);
    }
    int id_size = size_of(r->nkeys - 1);
    unsigned char *ids = r->ids.p; /* packed in place: id_size <= sizeof(Py_ssize_t) */
    for (Py_ssize_t i = 0; i < m; i++) write_uint(ids + i * id_size, (uint64_t)id_of[i], id_size);
    /* the values, in name order, through the scratch buffer */
    Py_ssize_t region = r->out.len - start;
    r->scratch.len = 0;
    if (put(&r->scratch, r->out.p + start, region) != OK) return ERR;
    r->out.len = start;
    Py_ssize_t *offsets = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(m + 1));
    if (!offsets) {
        PyErr_NoMemory();
        return ERR;
    }
    offsets[0] = 0;
    rc = OK;
    for (Py_ssize_t i = 0; i < m && rc == OK; i++) {
        rc = put(&r->out, r->scratch.p + fields[i].off, fields[i].len);
        offsets[i + 1] = r->out.len - start;
    }
    if (rc == OK) {
        unsigned flags = (unsigned)(((m > 0xFF) << 4) | ((id_size - 1) << 2));
        rc = finish_container(&r->out, start, flags, 2, m, offsets, ids, m * id_size);
    }
    PyMem_Free(offsets);
    r->fields.len = frame;
    return rc;
}

static int tag_is(const unsigned char *t, Py_ssize_t n, const char *want) {
    return (size_t)n == strlen(want) && memcmp(t, want, (size_t)n) == 0;
}

static int dispatch(Row *r, const unsigned char *t, Py_ssize_t n) {
    switch (t[0]) {
    case 'N':
        if (tag_is(t, n, "Nat") || tag_is(t, n, "Nat8") || tag_is(t, n, "Nat16") || tag_is(t, n, "Nat32") ||
            tag_is(t, n, "Nat64"))
            return enc_int(r);
        if (tag_is(t, n, "Nats")) return enc_array(r, ITEM_INT);
        break;
    case 'I':
        if (tag_is(t, n, "Int") || tag_is(t, n, "Int8") || tag_is(t, n, "Int16") || tag_is(t, n, "Int32") ||
            tag_is(t, n, "Int64"))
            return enc_int(r);
        break;
    case 'T':
        if (tag_is(t, n, "Text")) return enc_string(r);
        break;
    case 'P':
        if (tag_is(t, n, "Principal")) return enc_string(r);
        break;
    case 'B':
        if (tag_is(t, n, "Blob")) return enc_string(r);
        if (tag_is(t, n, "Bool")) {
            if (literal(r, "true")) return put_byte(&r->out, 0x04);
            if (literal(r, "false")) return put_byte(&r->out, 0x08);
            return FALLBACK;
        }
        if (tag_is(t, n, "Bytes")) return enc_array(r, ITEM_INT);
        break;
    case 'M':
        if (tag_is(t, n, "Map")) return enc_object(r, 0);
        break;
    case 'C':
        if (tag_is(t, n, "Class")) return enc_object(r, 1);
        break;
    case 'F':
        if (tag_is(t, n, "Float")) return enc_float(r);
        if (tag_is(t, n, "Floats")) return enc_array(r, ITEM_FLOAT);
        break;
    case 'A':
        if (tag_is(t, n, "Array")) return enc_array(r, ITEM_VALUE);
        break;
    case 'S':
        if (tag_is(t, n, "Set")) return enc_array(r, ITEM_VALUE);
        break;
    case 'O':
        if (tag_is(t, n, "Option")) return literal(r, "null") ? put_byte(&r->out, 0x00) : enc_value(r);
        break;
    case 'V':
        if (tag_is(t, n, "ValueMap")) return enc_array(r, ITEM_PAIR);
        break;
    }
    return FALLBACK; /* an unknown variant: Python's error */
}

static int scalar_tag(const unsigned char *t, Py_ssize_t n) {
    if (n >= 3 && (memcmp(t, "Nat", 3) == 0 || memcmp(t, "Int", 3) == 0))
        return n == 3 || tag_is(t + 3, n - 3, "8") || tag_is(t + 3, n - 3, "16") || tag_is(t + 3, n - 3, "32") ||
               tag_is(t + 3, n - 3, "64");
    return tag_is(t, n, "Text") || tag_is(t, n, "Principal") || tag_is(t, n, "Blob") || tag_is(t, n, "Bool") ||
           tag_is(t, n, "Float");
}

/* ``{"<variant>": <x>}``, exactly one key. */
static int enc_value(Row *r) {
    if (++r->depth > MAX_DEPTH) return FALLBACK;
    if (!eat(r, '{')) return FALLBACK;
    Py_ssize_t mark = r->scratch.len;
    int rc = read_string(r, &r->scratch);
    if (rc != OK) return rc;
    unsigned char tag[16];
    Py_ssize_t n = r->scratch.len - mark;
    if (n < 1 || n > (Py_ssize_t)sizeof tag) return FALLBACK;
    memcpy(tag, r->scratch.p + mark, (size_t)n);
    r->scratch.len = mark;
    if (!eat(r, ':')) return FALLBACK;
    int scalar = scalar_tag(tag, n);
    if (tag_is(tag, n, "Option") && literal(r, "null")) {
        scalar = 1;
        rc = put_byte(&r->out, 0x00);
    } else {
        rc = dispatch(r, tag, n);
    }
    if (rc != OK) return rc;
    r->scalar = scalar;
    r->depth--;
    return eat(r, '}') ? OK : FALLBACK;
}

/* The metadata: the names in id order. */
int enc_metadata(Row *r, Buf *b) {
    const Py_ssize_t *dict = (const Py_ssize_t *)r->dict.p;
    Py_ssize_t count = r->nkeys, total = 0;
    for (Py_ssize_t id = 0; id < count; id++) total += dict[2 * id + 1];
    int size = size_of(total > count ? total : count);
    Py_ssize_t hdr = 1 + size + (count + 1) * size;
    if (reserve(b, hdr + total) != OK) return ERR;
    unsigned char *at = b->p + b->len, *names = at + hdr;
    *at++ = (unsigned char)(1 | ((size - 1) << 6));
    write_uint(at, (uint64_t)count, size);
    at += size;
    write_uint(at, 0, size);
    at += size;
    Py_ssize_t off = 0;
    for (Py_ssize_t id = 0; id < count; id++) {
        memcpy(names + off, r->names.p + dict[2 * id], (size_t)dict[2 * id + 1]);
        off += dict[2 * id + 1];
        write_uint(at, (uint64_t)off, size);
        at += size;
    }
    b->len += hdr + total;
    return OK;
}

/* One row: OK with the value in r->out, or FALLBACK, or ERR. */
int encode_row(Row *r, const unsigned char *text, Py_ssize_t n) {
    row_reset(r, text, n);
    int rc = enc_value(r);
    if (rc != OK) return rc;
    skip_ws(r);
    return r->p == r->end ? OK : FALLBACK;
}
