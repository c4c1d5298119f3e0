/* kb's compiled kernels for the runtime: cosines over float16 rows (runtime/cosines.py), kb's
   walk of an HNSW graph (runtime/graph_walk.py) and BM25 sums over impact postings
   (runtime/bm25.py). numpy and usearch are the references the tests hold them against, and the
   fallbacks where no compiler ran. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../formats/crc32.h"

/* ---- cosines over float16 rows --------------------------------------------------------------- */

/* cosines_f16(q, rows, out, n, k): out[i] = cosine of q (float32, k) with row i of rows (n x k
   float16, the vectors as an artifact stores them), summed in float32: dot / sqrt(|row|^2 |q|^2).
   A zero row gives NaN (0 / 0), a row that is not finite NaN or infinity: the caller decides
   (runtime/cosines.py). Where the CPU has AVX2 and F16C only: ``f16_kernel()`` says which. */

#ifdef KB_X86_AVX2
CPU_HAS(have_f16c, __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c"))

__attribute__((target("avx2,f16c"))) static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,f16c"))) static float squared_norm(const float *q, int k) {
    __m256 qq8 = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= k; j += 8) {
        __m256 x = _mm256_loadu_ps(q + j);
        qq8 = _mm256_add_ps(qq8, _mm256_mul_ps(x, x));
    }
    float qq = hsum_ps(qq8);
    for (; j < k; j++) qq += q[j] * q[j];
    return qq;
}

/* The cosine of q (squared norm qq) with the float16 row r. */
__attribute__((target("avx2,f16c"))) static float cos_row_f16(const float *q, float qq, const unsigned char *r, int k) {
    __m256 d8 = _mm256_setzero_ps(), rr8 = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= k; j += 8) {
        __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(r + 2 * (size_t)j)));
        d8 = _mm256_add_ps(d8, _mm256_mul_ps(v, _mm256_loadu_ps(q + j)));
        rr8 = _mm256_add_ps(rr8, _mm256_mul_ps(v, v));
    }
    float d = hsum_ps(d8), rr = hsum_ps(rr8);
    for (; j < k; j++) {
        uint16_t h;
        memcpy(&h, r + 2 * (size_t)j, 2);
        float v = _cvtsh_ss(h);
        d += v * q[j];
        rr += v * v;
    }
    return d / sqrtf(rr * qq);
}

__attribute__((target("avx2,f16c"))) static void cos_rows_f16(const float *q, const unsigned char *rows, Py_ssize_t n, int k, float *out) {
    float qq = squared_norm(q, k);
    for (Py_ssize_t i = 0; i < n; i++) out[i] = cos_row_f16(q, qq, rows + (size_t)i * k * 2, k);
}
#endif

static PyObject *cosines_f16(PyObject *self, PyObject *args) {
    Py_buffer q, rows, out;
    Py_ssize_t n;
    int k;
    if (!PyArg_ParseTuple(args, "y*y*w*ni", &q, &rows, &out, &n, &k)) return NULL;
    PyObject *result = NULL;
    if (n < 0 || k <= 0 || k > 1 << 16) {
        PyErr_SetString(PyExc_ValueError, "cosines_f16: shapes out of range");
        goto done;
    }
    if (!check(&q, k, 4, "q", 1) || !check(&rows, n * k, 2, "the rows", 0) || !check(&out, n, 4, "out", 1)) goto done;
#ifdef KB_X86_AVX2
    if (have_f16c()) {
        Py_BEGIN_ALLOW_THREADS
        cos_rows_f16(q.buf, rows.buf, n, k, out.buf);
        Py_END_ALLOW_THREADS
        Py_INCREF(Py_None);
        result = Py_None;
        goto done;
    }
#endif
    PyErr_SetString(PyExc_RuntimeError, "cosines_f16 needs AVX2 and F16C (f16_kernel() says 'none' here)");
done:
    PyBuffer_Release(&q);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&out);
    return result;
}

KERNEL_NAME(f16_kernel, have_f16c, "f16c", "none")

/* Binary heaps of (distance, slot) pairs, ordered by distance, then slot: the walk's beam and
   candidates, and BM25's best k (``acc_top``, as (-score, id)). */
typedef struct {
    double d;
    int64_t slot;
} Near;

static int near_before(Near a, Near b) { return a.d < b.d || (a.d == b.d && a.slot < b.slot); }

/* ``far`` 0 keeps the nearest on top, 1 the farthest. */
static void heap_push(Near *h, int64_t *n, Near x, int far) {
    int64_t i = (*n)++;
    while (i) {
        int64_t up = (i - 1) / 2;
        if (far ? !near_before(h[up], x) : !near_before(x, h[up])) break;
        h[i] = h[up];
        i = up;
    }
    h[i] = x;
}

static Near heap_pop(Near *h, int64_t *n, int far) {
    Near top = h[0], x = h[--(*n)];
    int64_t i = 0;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && (far ? near_before(h[c], h[c + 1]) : near_before(h[c + 1], h[c]))) c++;
        if (far ? !near_before(x, h[c]) : !near_before(h[c], x)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
    return top;
}

static int near_order(const void *a, const void *b) {
    Near x = *(const Near *)a, y = *(const Near *)b;
    return near_before(x, y) ? -1 : near_before(y, x) ? 1 : 0;
}

/* ---- kb's walk of an HNSW graph -------------------------------------------------------------- */

/* walk_f16(image, q, upper, upper_levels, crcs, ok, out_slots, out_dist, size, conn, base,
   max_level, entry, levels_at, nodes_at, matrix_at, dims, ef, count) -> (status, info, found):
   runtime/graph_walk.py's search of a usearch image (cos, float16 rows, u32 slots) in place, for
   a one-shot search of a large artifact. HNSW's search (Malkov and Yashunin, algorithm 5): a
   greedy descent through the upper levels, then a beam of width ``ef`` on level 0, expanding its
   nearest unexpanded node until none is nearer than the beam's farthest. Where the numpy walk
   takes a few dozen batched steps of array work, this expands one node at a time: at a million
   chunks its time is then the first touches of the pages it reads and their crc32s.

   ``image``: the section's bytes; the layout (formats/hnsw.py ``GraphLayout``) was read and
   checked from its headers and levels by the caller, and ``upper`` (int64, ascending: the nodes
   above level 0) and ``upper_levels`` (int64, len(upper) + 1 running sums of their levels) place
   each record. Every byte is checked before it is used: each page under a record or a row against
   ``crcs`` (the section's page crc32s, u32) unless ``ok`` (one byte a page) says it was, which is
   then set; no checks where ``crcs`` is empty (the whole section was verified). Each list's count
   against its capacity, each slot against ``size``, each record and row against the image.
   ``q``: the query, float32, its values those of float16 (as usearch casts it).

   ``out_slots`` (int64) and ``out_dist`` (float64, 1 - cosine), ``count`` long, get the nearest
   ``found`` nodes, nearest first (ties by slot). ``status``: 0; 1 a page's crc32 is wrong (info:
   the page); 2 a list is longer than its capacity; 3 a slot is outside the graph; 4 a stored
   vector is not finite; 5 out of memory; 6 a record or row outside the image (info: its offset).
   The GIL is let go for the walk: ``ok`` is written meanwhile, so no other thread may check the
   same section's pages at the same time (runtime/index.py opens one walk a search). */

#define WALK_PAGE 4096 /* formats/artifact.py's PAGE: one crc32 a page (walk_f16 checks ``crcs`` against it) */
#ifdef KB_X86_AVX2
#define WALK_NODE_HEAD 10 /* key (u64), level (i16) */

enum { WALK_OK, WALK_BAD_PAGE, WALK_LONG_LIST, WALK_BAD_SLOT, WALK_NOT_FINITE, WALK_NO_MEMORY, WALK_OUTSIDE };

typedef struct {
    const unsigned char *b;
    int64_t len;
    const int64_t *upper, *upper_levels;
    int64_t n_upper;
    const uint32_t *crcs;
    unsigned char *ok;
    int64_t pages; /* 0: no page checks */
    int64_t size, base_bytes, upper_bytes, levels_at, nodes_at, matrix_at, row_bytes;
    int dims;
    const float *q;
    float qq;
    int64_t info;
} Walk;

static int walk_check(Walk *w, int64_t lo, int64_t hi) {
    if (lo < 0 || hi > w->len || lo >= hi) {
        w->info = lo;
        return WALK_OUTSIDE;
    }
    if (!w->pages) return WALK_OK;
    for (int64_t p = lo / WALK_PAGE; p <= (hi - 1) / WALK_PAGE; p++) {
        if (p >= w->pages) {
            w->info = lo;
            return WALK_OUTSIDE;
        }
        if (!w->ok[p]) {
            int64_t at = p * WALK_PAGE, n = w->len - at < WALK_PAGE ? w->len - at : WALK_PAGE;
            if (crc32_of(0, w->b + at, (size_t)n) != w->crcs[p]) {
                w->info = p;
                return WALK_BAD_PAGE;
            }
            w->ok[p] = 1;
        }
    }
    return WALK_OK;
}

static int walk_level(const Walk *w, int64_t slot) {
    int16_t v;
    memcpy(&v, w->b + w->levels_at + 2 * slot, 2);
    return v < 0 ? 0 : v;
}

/* Node ``slot``'s list at ``level`` (its record checked): *list its slots, *count how many; none
   where the node does not reach ``level``. Every slot of it is checked to be inside the graph. */
static int walk_list(Walk *w, int64_t slot, int level, const unsigned char **list, uint32_t *count) {
    *count = 0;
    int top = walk_level(w, slot);
    if (top < level) return WALK_OK;
    int64_t lo = 0, hi = w->n_upper; /* the nodes above level 0 before this one */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (w->upper[mid] < slot) lo = mid + 1;
        else hi = mid;
    }
    int64_t at = w->nodes_at + slot * (WALK_NODE_HEAD + w->base_bytes) + w->upper_levels[lo] * w->upper_bytes;
    int r = walk_check(w, at, at + WALK_NODE_HEAD + w->base_bytes + (int64_t)top * w->upper_bytes);
    if (r) return r;
    int64_t off = at + WALK_NODE_HEAD + (level ? w->base_bytes + (int64_t)(level - 1) * w->upper_bytes : 0);
    uint32_t c;
    memcpy(&c, w->b + off, 4);
    if ((int64_t)c > (level ? w->upper_bytes : w->base_bytes) / 4 - 1) return WALK_LONG_LIST;
    const unsigned char *s = w->b + off + 4;
    for (uint32_t i = 0; i < c; i++) {
        uint32_t v;
        memcpy(&v, s + 4 * (size_t)i, 4);
        if ((int64_t)v >= w->size) return WALK_BAD_SLOT;
    }
    *list = s;
    *count = c;
    return WALK_OK;
}

static int64_t walk_slot(const unsigned char *list, uint32_t i) {
    uint32_t v;
    memcpy(&v, list + 4 * (size_t)i, 4);
    return v;
}

/* 1 - cosine of the query with ``slot``'s row (checked first); a zero row is 1 (no direction, no
   similarity), a row that is not finite WALK_NOT_FINITE. */
static int walk_distance(Walk *w, int64_t slot, double *d) {
    int64_t at = w->matrix_at + slot * w->row_bytes;
    int r = walk_check(w, at, at + w->row_bytes);
    if (r) return r;
    double x = 1.0 - (double)cos_row_f16(w->q, w->qq, w->b + at, w->dims);
    if (!isfinite(x)) {
        for (int j = 0; j < w->dims; j++) {
            uint16_t h;
            memcpy(&h, w->b + at + 2 * (size_t)j, 2);
            if ((h & 0x7C00) == 0x7C00) return WALK_NOT_FINITE;
        }
        x = 1.0;
    }
    *d = x;
    return WALK_OK;
}

static int walk_search(Walk *w, int max_level, int64_t entry, int64_t ef, int64_t count, int64_t *out_slots, double *out_dist, int64_t *found) {
    int r;
    int64_t cur = entry;
    double cur_d;
    const unsigned char *list;
    uint32_t n;
    if ((r = walk_distance(w, cur, &cur_d))) return r;
    for (int level = max_level; level > 0; level--) { /* greedy: to the nearest neighbour while it is nearer */
        for (;;) {
            if ((r = walk_list(w, cur, level, &list, &n))) return r;
            int64_t best = -1;
            double best_d = 0;
            for (uint32_t i = 0; i < n; i++) {
                double d;
                int64_t s = walk_slot(list, i);
                if ((r = walk_distance(w, s, &d))) return r;
                if (best < 0 || d < best_d) best = s, best_d = d;
            }
            if (best < 0 || best_d >= cur_d) break;
            cur = best, cur_d = best_d;
        }
    }
    unsigned char *seen = calloc((size_t)(w->size + 7) / 8, 1);
    int64_t todo_cap = 1024, n_todo = 0, n_beam = 0;
    Near *todo = malloc(sizeof(Near) * (size_t)todo_cap), *beam = malloc(sizeof(Near) * (size_t)(ef + 1));
    if (!seen || !todo || !beam) {
        r = WALK_NO_MEMORY;
        goto done;
    }
    seen[cur / 8] |= (unsigned char)(1 << (cur % 8));
    Near start = {cur_d, cur};
    heap_push(todo, &n_todo, start, 0);
    heap_push(beam, &n_beam, start, 1);
    while (n_todo) {
        Near c = heap_pop(todo, &n_todo, 0);
        if (n_beam >= ef && c.d >= beam[0].d) break; /* no unexpanded node nearer than the beam's farthest */
        if ((r = walk_list(w, c.slot, 0, &list, &n))) goto done;
        for (uint32_t i = 0; i < n; i++) {
            int64_t s = walk_slot(list, i);
            if (seen[s / 8] & (1 << (s % 8))) continue;
            seen[s / 8] |= (unsigned char)(1 << (s % 8));
            double d;
            if ((r = walk_distance(w, s, &d))) goto done;
            if (n_beam >= ef && d >= beam[0].d) continue;
            Near x = {d, s};
            if (n_todo == todo_cap) {
                Near *more = realloc(todo, sizeof(Near) * (size_t)(todo_cap *= 2));
                if (!more) {
                    r = WALK_NO_MEMORY;
                    goto done;
                }
                todo = more;
            }
            heap_push(todo, &n_todo, x, 0);
            heap_push(beam, &n_beam, x, 1);
            if (n_beam > ef) heap_pop(beam, &n_beam, 1);
        }
    }
    qsort(beam, (size_t)n_beam, sizeof(Near), near_order);
    *found = n_beam < count ? n_beam : count;
    for (int64_t i = 0; i < *found; i++) out_slots[i] = beam[i].slot, out_dist[i] = beam[i].d;
    r = WALK_OK;
done:
    free(seen);
    free(todo);
    free(beam);
    return r;
}
#endif

static PyObject *walk_f16(PyObject *self, PyObject *args) {
    Py_buffer b, q, up, upl, crcs, ok, slots, dist;
    Py_ssize_t size, conn, base, max_level, entry, levels_at, nodes_at, matrix_at, dims, ef, count;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*w*w*nnnnnnnnnnn", &b, &q, &up, &upl, &crcs, &ok, &slots, &dist, &size, &conn, &base, &max_level, &entry, &levels_at, &nodes_at,
                          &matrix_at, &dims, &ef, &count))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n_upper = up.len / 8, pages = crcs.len / 4;
    if (size <= 0 || conn < 1 || base < 1 || max_level < 0 || max_level > 64 || entry < 0 || entry >= size || dims <= 0 || dims > 1 << 16 || ef < 1 || count < 1 || levels_at < 0 ||
        levels_at + 2 * size > b.len || nodes_at < 0 || matrix_at < 0 || matrix_at + size * 2 * dims > b.len) {
        PyErr_SetString(PyExc_ValueError, "walk_f16: layout out of range");
        goto done;
    }
    if (!check(&q, dims, 4, "q", 1) || !check(&upl, n_upper + 1, 8, "upper_levels", 1) || !check(&up, n_upper, 8, "upper", 1) || !check(&crcs, pages, 4, "crcs", 1) ||
        !check(&ok, pages, 1, "ok", 0) || !check(&slots, count, 8, "out_slots", 1) || !check(&dist, count, 8, "out_dist", 1))
        goto done;
    if (pages && pages != (b.len + WALK_PAGE - 1) / WALK_PAGE) {
        PyErr_SetString(PyExc_ValueError, "walk_f16: crcs must hold one crc32 a page of the image");
        goto done;
    }
#ifdef KB_X86_AVX2
    if (have_f16c()) {
        Walk w = {b.buf, b.len, up.buf, upl.buf, n_upper, crcs.buf, ok.buf, pages, size, 4 + 4 * (int64_t)base, 4 + 4 * (int64_t)conn, levels_at, nodes_at, matrix_at,
                  2 * (int64_t)dims, (int)dims, q.buf, 0.0f, 0};
        int64_t found = 0;
        int status;
        Py_BEGIN_ALLOW_THREADS
        w.qq = squared_norm(q.buf, (int)dims);
        status = walk_search(&w, (int)max_level, entry, ef, count, slots.buf, dist.buf, &found);
        Py_END_ALLOW_THREADS
        if (status == WALK_NO_MEMORY) PyErr_NoMemory();
        else result = Py_BuildValue("iLL", status, (long long)w.info, (long long)found);
        goto done;
    }
#endif
    PyErr_SetString(PyExc_RuntimeError, "walk_f16 needs AVX2 and F16C (f16_kernel() says 'none' here)");
done:
    PyBuffer_Release(&b);
    PyBuffer_Release(&q);
    PyBuffer_Release(&up);
    PyBuffer_Release(&upl);
    PyBuffer_Release(&crcs);
    PyBuffer_Release(&ok);
    PyBuffer_Release(&slots);
    PyBuffer_Release(&dist);
    return result;
}

/* ---- BM25 sums over impact postings ---------------------------------------------------------- */

/* impact_add(ids, imp, scale, acc, n_ids, n) -> bad: acc[ids[i]] += imp[i] * scale for each of
   the n_ids postings of a term (ids u32, imp u8 impacts, acc float64 of n), in posting order:
   the same sums, bit for bit, as numpy's bincount over the term's weights (runtime/bm25.py
   ``_weighted_sum``), without its float64 and intp copies of every posting. Returns 0, or 1 with
   acc untouched where an id is not below n (a corrupt artifact). The GIL is let go meanwhile: at
   a million chunks a long query's postings number near a million. */
static PyObject *impact_add(PyObject *self, PyObject *args) {
    Py_buffer ids, imp, acc;
    double scale;
    Py_ssize_t m, n;
    if (!PyArg_ParseTuple(args, "y*y*dw*nn", &ids, &imp, &scale, &acc, &m, &n)) return NULL;
    PyObject *result = NULL;
    if (m < 0 || n < 0) {
        PyErr_SetString(PyExc_ValueError, "impact_add: sizes out of range");
        goto done;
    }
    if (!check(&ids, m, 4, "ids", 0) || !check(&imp, m, 1, "imp", 0) || !check(&acc, n, 8, "acc", 1)) goto done;
    const unsigned char *id = ids.buf, *w = imp.buf;
    double *a = acc.buf;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < m && !bad; i++) {
        uint32_t v;
        memcpy(&v, id + 4 * (size_t)i, 4);
        bad = (Py_ssize_t)v >= n;
    }
    if (!bad)
        for (Py_ssize_t i = 0; i < m; i++) {
            uint32_t v;
            memcpy(&v, id + 4 * (size_t)i, 4);
            a[v] += (double)w[i] * scale;
        }
    Py_END_ALLOW_THREADS
    result = PyLong_FromLong(bad);
done:
    PyBuffer_Release(&ids);
    PyBuffer_Release(&imp);
    PyBuffer_Release(&acc);
    return result;
}

/* acc_top(acc, n, allowed, lam, k, out_ids, out_scores) -> count: the k best chunks of BM25 sums
   (runtime/bm25.py ``top_bm25``). Among the ids i < n with acc[i] > 0 (and allowed[i], one byte a
   chunk, unless allowed is None), by score acc[i] + lam * acc[i] where lam > 0, else acc[i],
   descending, ties by id ascending: what ``top_k`` over ``bm25_scores`` gives, bit for bit (the
   same float64 steps), without the mask, the id and score arrays of every matching chunk (at a
   million chunks a long query matches over half of them) and their partition. out_ids (int64)
   and out_scores (float64), k long, get them best first; count = min(k, matches). The GIL is let
   go. A heap of the k best so far as (-score, id), the worst at its root; ids come in ascending
   order, so a score equal to the root's never displaces it. */
static PyObject *acc_top(PyObject *self, PyObject *args) {
    Py_buffer acc, ids, scores, allowed = {0};
    PyObject *allowed_obj;
    Py_ssize_t n, k;
    double lam;
    if (!PyArg_ParseTuple(args, "y*nOdnw*w*", &acc, &n, &allowed_obj, &lam, &k, &ids, &scores)) return NULL;
    PyObject *result = NULL;
    Near *h = NULL;
    int have_allowed = allowed_obj != Py_None;
    if (have_allowed && PyObject_GetBuffer(allowed_obj, &allowed, PyBUF_SIMPLE) < 0) goto done;
    if (n < 0 || k < 0) {
        PyErr_SetString(PyExc_ValueError, "acc_top: sizes out of range");
        goto done;
    }
    if (!check(&acc, n, 8, "acc", 1) || (have_allowed && !check(&allowed, n, 1, "allowed", 0)) || !check(&ids, k, 8, "out_ids", 1) ||
        !check(&scores, k, 8, "out_scores", 1))
        goto done;
    h = malloc((size_t)(k + 1) * sizeof *h);
    if (!h) {
        PyErr_NoMemory();
        goto done;
    }
    const double *a = acc.buf;
    const unsigned char *ok = have_allowed ? allowed.buf : NULL;
    int64_t count = 0;
    Py_BEGIN_ALLOW_THREADS
    /* a score must beat ``floor``: 0 until the heap holds k (no zero, negative or NaN passes),
       then the root's, and that test alone turns nearly every chunk away */
    double floor = 0;
    for (Py_ssize_t i = 0; k && i < n; i++) {
        double v = a[i], s = lam > 0 ? v + lam * v : v;
        if (!(s > floor) || (ok && !ok[i])) continue;
        heap_push(h, &count, (Near){-s, (int64_t)i}, 1);
        if (count > k) heap_pop(h, &count, 1);
        if (count == k) floor = -h[0].d;
    }
    qsort(h, (size_t)count, sizeof *h, near_order); /* best first */
    int64_t *oi = ids.buf;
    double *os = scores.buf;
    for (int64_t m = 0; m < count; m++) oi[m] = h[m].slot, os[m] = -h[m].d;
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t((Py_ssize_t)count);
done:
    free(h);
    PyBuffer_Release(&acc);
    if (have_allowed && allowed.obj) PyBuffer_Release(&allowed);
    PyBuffer_Release(&ids);
    PyBuffer_Release(&scores);
    return result;
}

static PyMethodDef methods[] = {
    {"walk_f16", walk_f16, METH_VARARGS, "walk_f16(image, q, upper, upper_levels, crcs, ok, out_slots, out_dist, size, conn, base, max_level, entry, levels_at, nodes_at, matrix_at, dims, ef, count) -> (status, info, found): kb's walk of an HNSW graph."},
    {"acc_top", acc_top, METH_VARARGS, "acc_top(acc, n, allowed, lam, k, out_ids, out_scores) -> count: the k best of acc[i] > 0 (allowed), by acc + lam * acc (lam > 0) descending, ties by id."},
    {"impact_add", impact_add, METH_VARARGS, "impact_add(ids, imp, scale, acc, n_ids, n) -> bad: acc[ids[i]] += imp[i] * scale (u32 ids, u8 impacts, float64 acc)."},
    {"cosines_f16", cosines_f16, METH_VARARGS, "cosines_f16(q, rows, out, n, k): out[i] = cosine of float32 q with float16 row i."},
    {"f16_kernel", f16_kernel, METH_NOARGS, "Whether cosines_f16 runs on this CPU: 'f16c' or 'none'."},
    {NULL, NULL, 0, NULL},
};

KB_MODULE(_kernels, "kb's compiled runtime kernels.", crc_table_init())
