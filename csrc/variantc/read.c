/* Reading the wire JSON text, and the names a row has met. */
#include "variantc.h"

void row_free(Row *r) {
    PyMem_Free(r->out.p);
    PyMem_Free(r->names.p);
    PyMem_Free(r->fields.p);
    PyMem_Free(r->offsets.p);
    PyMem_Free(r->scratch.p);
    PyMem_Free(r->ids.p);
    PyMem_Free(r->dict.p);
    PyMem_Free(r->slots);
}

void row_reset(Row *r, const unsigned char *p, Py_ssize_t n) {
    r->p = p;
    r->end = p + n;
    r->out.len = r->names.len = r->fields.len = r->offsets.len = r->scratch.len = r->ids.len = r->dict.len = 0;
    if (r->nkeys && r->slots) memset(r->slots, 0xFF, sizeof(int32_t) * (size_t)r->nslots);
    r->nkeys = 0;
    r->depth = 0;
}

static uint64_t hash_bytes(const unsigned char *s, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ULL;
    return h;
}

static int grow_slots(Row *r) {
    Py_ssize_t n = r->nslots ? r->nslots * 2 : 64;
    int32_t *slots = PyMem_Malloc(sizeof(int32_t) * (size_t)n);
    if (!slots) {
        PyErr_NoMemory();
        return ERR;
    }
    memset(slots, 0xFF, sizeof(int32_t) * (size_t)n);
    Py_ssize_t *dict = (Py_ssize_t *)r->dict.p;
    for (Py_ssize_t id = 0; id < r->nkeys; id++) {
        uint64_t h = hash_bytes(r->names.p + dict[2 * id], dict[2 * id + 1]);
        Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)(n - 1));
        while (slots[i] >= 0) i = (i + 1) & (n - 1);
        slots[i] = (int32_t)id;
    }
    PyMem_Free(r->slots);
    r->slots = slots;
    r->nslots = n;
    return OK;
}

/* The id of the name at names[key, key+len): ``keys.setdefault(name, len(keys))``. */
Py_ssize_t key_id(Row *r, Py_ssize_t key, Py_ssize_t len) {
    if ((r->nkeys + 1) * 2 > r->nslots && grow_slots(r) != OK) return -1;
    const unsigned char *s = r->names.p + key;
    Py_ssize_t i = (Py_ssize_t)(hash_bytes(s, len) & (uint64_t)(r->nslots - 1));
    Py_ssize_t *dict = (Py_ssize_t *)r->dict.p;
    while (r->slots[i] >= 0) {
        Py_ssize_t id = r->slots[i];
        if (dict[2 * id + 1] == len && memcmp(r->names.p + dict[2 * id], s, (size_t)len) == 0) return id;
        i = (i + 1) & (r->nslots - 1);
    }
    Py_ssize_t entry[2] = {key, len};
    if (put(&r->dict, entry, sizeof entry) != OK) return -1;
    r->slots[i] = (int32_t)r->nkeys;
    return r->nkeys++;
}

/* ---- the JSON text ---- */

void skip_ws(Row *r) {
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\n' || *r->p == '\r' || *r->p == '\t')) r->p++;
}

int eat(Row *r, unsigned char c) {
    skip_ws(r);
    if (r->p < r->end && *r->p == c) {
        r->p++;
        return 1;
    }
    return 0;
}

static int hex4(const unsigned char *s, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return 0;
    }
    *out = v;
    return 1;
}

/* The length of the well-formed UTF-8 sequence at ``s`` (0: none), as Python decodes it:
 * no overlong forms, no surrogates, nothing past U+10FFFF. */
static int utf8_length(const unsigned char *s, const unsigned char *end) {
    unsigned char c = s[0];
    int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (!n || c > 0xF4 || end - s < n) return 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (c == 0xE0 && s[1] < 0xA0) return 0; /* overlong */
    if (c == 0xED && s[1] >= 0xA0) return 0; /* a surrogate */
    if (c == 0xF0 && s[1] < 0x90) return 0; /* overlong */
    if (c == 0xF4 && s[1] >= 0x90) return 0; /* past U+10FFFF */
    return n;
}

/* Reads a JSON string and appends its UTF-8 bytes to ``dst``. */
int read_string(Row *r, Buf *dst) {
    if (!eat(r, '"')) return FALLBACK;
    const unsigned char *run = r->p;
    for (;;) {
        if (r->p >= r->end) return FALLBACK;
        unsigned char c = *r->p;
        if (c == '"' || c == '\\') {
            if (put(dst, run, r->p - run) != OK) return ERR;
            if (c == '"') {
                r->p++;
                return OK;
            }
            if (r->end - r->p < 2) return FALLBACK;
            unsigned char e = r->p[1], ch;
            r->p += 2;
            switch (e) {
            case '"': ch = '"'; break;
            case '\\': ch = '\\'; break;
            case '/': ch = '/'; break;
            case 'b': ch = '\b'; break;
            case 'f': ch = '\f'; break;
            case 'n': ch = '\n'; break;
            case 'r': ch = '\r'; break;
            case 't': ch = '\t'; break;
            case 'u': {
                uint32_t cp, lo;
                if (r->end - r->p < 4 || !hex4(r->p, &cp)) return FALLBACK;
                r->p += 4;
                if (cp >= 0xDC00 && cp <= 0xDFFF) return FALLBACK; /* lone low surrogate: Python's error */
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (r->end - r->p < 6 || r->p[0] != '\\' || r->p[1] != 'u' || !hex4(r->p + 2, &lo) || lo < 0xDC00 ||
                        lo > 0xDFFF)
                        return FALLBACK;
                    r->p += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                unsigned char u[4];
                int n;
                if (cp < 0x80) u[0] = (unsigned char)cp, n = 1;
                else if (cp < 0x800) u[0] = 0xC0 | (cp >> 6), u[1] = 0x80 | (cp & 0x3F), n = 2;
                else if (cp < 0x10000)
                    u[0] = 0xE0 | (cp >> 12), u[1] = 0x80 | ((cp >> 6) & 0x3F), u[2] = 0x80 | (cp & 0x3F), n = 3;
                else
                    u[0] = 0xF0 | (cp >> 18), u[1] = 0x80 | ((cp >> 12) & 0x3F), u[2] = 0x80 | ((cp >> 6) & 0x3F),
                    u[3] = 0x80 | (cp & 0x3F), n = 4;
                if (put(dst, u, n) != OK) return ERR;
                run = r->p;
                continue;
            }
            default: return FALLBACK;
            }
            if (put_byte(dst, ch) != OK) return ERR;
            run = r->p;
            continue;
        }
        if (c < 0x20) return FALLBACK; /* not JSON */
        if (c >= 0x80) {
            int k = utf8_length(r->p, r->end);
            if (!k) return FALLBACK; /* not UTF-8: Python's error */
            r->p += k;
            continue;
        }
        r->p++;
    }
}

static Py_ssize_t digits(Row *r) {
    const unsigned char *s = r->p;
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') r->p++;
    return r->p - s;
}

/* A JSON number, exactly as JSON writes one: [start, end), and whether it is a plain
 * integer (-?digits). */
int read_number(Row *r, const unsigned char **start, Py_ssize_t *len, int *integer) {
    skip_ws(r);
    const unsigned char *s = r->p;
    if (r->p < r->end && *r->p == '-') r->p++;
    const unsigned char *first = r->p;
    Py_ssize_t whole = digits(r);
    if (!whole || (whole > 1 && *first == '0')) return FALLBACK;
    int plain = 1;
    if (r->p < r->end && *r->p == '.') {
        r->p++;
        if (!digits(r)) return FALLBACK;
        plain = 0;
    }
    if (r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
        r->p++;
        if (r->p < r->end && (*r->p == '+' || *r->p == '-')) r->p++;
        if (!digits(r)) return FALLBACK;
        plain = 0;
    }
    *start = s;
    *len = r->p - s;
    *integer = plain;
    return OK;
}

int literal(Row *r, const char *word) {
    skip_ws(r);
    size_t n = strlen(word);
    if ((size_t)(r->end - r->p) >= n && memcmp(r->p, word, n) == 0) {
        r->p += n;
        return 1;
    }
    return 0;
}
