/* kb's compiled kernels: the in-place query encoder's (common/query_encoder.py), and below them
   cosines over float16 rows (runtime/cosines.py), kb's walk of an HNSW graph
   (runtime/graph_walk.py), BM25 sums over impact postings (runtime/bm25.py) and crc32
   (formats/checksum.py).

   One query's forward pass multiplies about 11 token rows by 24 (all-MiniLM-L6-v2) or 48
   (multilingual-e5-small) int8 weight matrices read in place from the artifact's mmap. numkong's
   fastest path on x86 without VNNI packs each weight first, and the packs cost more than the
   products they serve; this module multiplies the int8 weights as they lie, with no pack.

   dense(x, w, ws, b, out, n, k, m, gelu, saturate=False, kernel="auto"): out = x @ W.T + b, then
   GELU when asked, where x is float32 (n, k), W int8 (m, k) with float32 row scales ws (m,), b
   float32 (m,), out float32 (n, m), all C-contiguous: CTranslate2's int8 dense layer as
   common/query_encoder.py's numpy reference takes it. Each row of x quantized to int8 (scale
   127 / max |x|), exact int32 sums of int8 x int8 products (vpdpbusd on the uint8-shifted input
   where the CPU has AVX-512 VNNI, 2.2 times as fast as the next; vpmaddwd on sign-extended int16
   where it has AVX2; plain C elsewhere), then acc / row scale / weight scale + bias. With
   ``saturate`` the sums are those of CTranslate2 on an x86 CPU without int8 dot products: pairs
   of uint8 x int8 products cut to int16 (vpmaddubsw, as its kernels do; plain C elsewhere).
   ``kernel`` names the product kernel ("plain", "avx2", "avx512vnni"; "auto": the best the CPU
   and the width allow), for the tests. GELU is the erf one, over libm's erff.

   layer_norm(x, d, g, beta, out, n, k, eps): out = LayerNorm(x + d) (d may be None).

   attention(qkv, out, n, heads, d): one sequence's self-attention.

   Every buffer's size is checked against the shapes before it is read; the GIL is let go during
   the arithmetic, so the encoder's helper threads check the next layers' crc32s meanwhile. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KB_X86_AVX2 1
#endif

/* ---- int8 products ------------------------------------------------------------------------- */

/* Rows of x per step of the AVX2 kernel, which pads x to a multiple of them with zero rows (and
   takes two rows of W at a time). */
#define TOKENS 4

static void dots_plain(const int16_t *q, int nq, const int8_t *w, int m, int k, int32_t *acc) {
    /* acc[t * m + o] = sum q[t, :] * w[o, :] for t < nq, o < m */
    for (int o = 0; o < m; o++) {
        const int8_t *wo = w + (size_t)o * k;
        for (int t = 0; t < nq; t++) {
            const int16_t *x = q + (size_t)t * k;
            int32_t s = 0;
            for (int j = 0; j < k; j++) s += (int32_t)x[j] * (int32_t)wo[j];
            acc[(size_t)t * m + o] = s;
        }
    }
}

/* The saturating sums (dense's ``saturate``): CTranslate2's on an x86 CPU without int8 dot
   products (oneDNN, or MKL, with vpmaddubsw). u is the quantized input shifted into uint8
   (q + 128); each two neighbouring products u[2p] w[2p] + u[2p + 1] w[2p + 1] are cut to int16
   before the int32 sum, and the shift is taken back exactly: acc = sum - 128 x sum(w). An odd last
   column is a pair of its own (one product always fits int16). */
static inline int32_t pair_sat(int32_t v) { return v > 32767 ? 32767 : v < -32768 ? -32768 : v; }

static void dots_plain_sat(const uint8_t *u, int nq, const int8_t *w, int m, int k, int32_t *acc) {
    for (int o = 0; o < m; o++) {
        const int8_t *wo = w + (size_t)o * k;
        int32_t c = 0;
        for (int j = 0; j < k; j++) c += wo[j];
        for (int t = 0; t < nq; t++) {
            const uint8_t *x = u + (size_t)t * k;
            int32_t s = 0;
            int j = 0;
            for (; j + 2 <= k; j += 2) s += pair_sat((int32_t)x[j] * wo[j] + (int32_t)x[j + 1] * wo[j + 1]);
            if (j < k) s += (int32_t)x[j] * wo[j];
            acc[(size_t)t * m + o] = s - 128 * c;
        }
    }
}

#ifdef KB_X86_AVX2
__attribute__((target("avx2"))) static inline int32_t hsum(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

#define LOADW(p) _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p)))
#define LOADQ(p) _mm256_loadu_si256((const __m256i *)(p))
#define MADD(a, v, y) a = _mm256_add_epi32(a, _mm256_madd_epi16(v, y))

/* q: nq rows (a multiple of TOKENS) of k int16 (k a multiple of 16). Two weight rows by four
   tokens per step: eight accumulators, six loads per 128 products. */
__attribute__((target("avx2"))) static void dots_avx2(const int16_t *q, int nq, const int8_t *w, int m, int k, int32_t *acc) {
    int o = 0;
    for (; o + 2 <= m; o += 2) {
        const int8_t *w0 = w + (size_t)o * k, *w1 = w0 + k;
        for (int t = 0; t < nq; t += TOKENS) {
            const int16_t *x0 = q + (size_t)t * k, *x1 = x0 + k, *x2 = x1 + k, *x3 = x2 + k;
            __m256i a00 = _mm256_setzero_si256(), a01 = a00, a02 = a00, a03 = a00;
            __m256i a10 = a00, a11 = a00, a12 = a00, a13 = a00;
            for (int j = 0; j < k; j += 16) {
                __m256i v0 = LOADW(w0 + j), v1 = LOADW(w1 + j);
                __m256i y0 = LOADQ(x0 + j), y1 = LOADQ(x1 + j), y2 = LOADQ(x2 + j), y3 = LOADQ(x3 + j);
                MADD(a00, v0, y0); MADD(a01, v0, y1); MADD(a02, v0, y2); MADD(a03, v0, y3);
                MADD(a10, v1, y0); MADD(a11, v1, y1); MADD(a12, v1, y2); MADD(a13, v1, y3);
            }
            int32_t *r = acc + (size_t)t * m + o;
            r[0] = hsum(a00); r[m] = hsum(a01); r[2 * (size_t)m] = hsum(a02); r[3 * (size_t)m] = hsum(a03);
            r[1] = hsum(a10); r[m + 1] = hsum(a11); r[2 * (size_t)m + 1] = hsum(a12); r[3 * (size_t)m + 1] = hsum(a13);
        }
    }
    for (; o < m; o++) {  /* an odd last row */
        const int8_t *w0 = w + (size_t)o * k;
        for (int t = 0; t < nq; t++) {
            const int16_t *x0 = q + (size_t)t * k;
            __m256i a = _mm256_setzero_si256();
            for (int j = 0; j < k; j += 16) MADD(a, LOADW(w0 + j), LOADQ(x0 + j));
            acc[(size_t)t * m + o] = hsum(a);
        }
    }
}

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

CPU_HAS(have_avx2, __builtin_cpu_supports("avx2"))

/* The kernels whose input is u = q + 128 (uint8 rows, nq a multiple of TOKENS, k a multiple of
   STEP), as CTranslate2's kernels take it on x86: two weight rows by four tokens per step, as
   dots_avx2, less 128 x each weight row's sum. ACC(a, y, v) adds the products of the input
   bytes y and the weight bytes v into the int32 lanes of a; SUM adds up a's lanes; ONES8 is
   every byte 1 (a weight row's sum is its products with it). */
#define DOTS_U8(NAME, TARGET, VEC, STEP, ZERO, LOAD, ACC, SUM, ONES8)                                  \
    TARGET static int32_t NAME##_row_sum(const int8_t *w, int k) {                                   \
        VEC a = ZERO;                                                                                \
        for (int j = 0; j < k; j += STEP) ACC(a, ONES8, LOAD(w + j));                                \
        return SUM(a);                                                                               \
    }                                                                                                \
    TARGET static void NAME(const uint8_t *u, int nq, const int8_t *w, int m, int k, int32_t *acc) { \
        int o = 0;                                                                                   \
        for (; o + 2 <= m; o += 2) {                                                                 \
            const int8_t *w0 = w + (size_t)o * k, *w1 = w0 + k;                                      \
            int32_t c0 = 128 * NAME##_row_sum(w0, k), c1 = 128 * NAME##_row_sum(w1, k);              \
            for (int t = 0; t < nq; t += TOKENS) {                                                   \
                const uint8_t *x0 = u + (size_t)t * k, *x1 = x0 + k, *x2 = x1 + k, *x3 = x2 + k;     \
                VEC a00 = ZERO, a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00, a12 = a00, a13 = a00; \
                for (int j = 0; j < k; j += STEP) {                                                  \
                    VEC v0 = LOAD(w0 + j), v1 = LOAD(w1 + j);                                        \
                    VEC y0 = LOAD(x0 + j), y1 = LOAD(x1 + j), y2 = LOAD(x2 + j), y3 = LOAD(x3 + j);  \
                    ACC(a00, y0, v0); ACC(a01, y1, v0); ACC(a02, y2, v0); ACC(a03, y3, v0);          \
                    ACC(a10, y0, v1); ACC(a11, y1, v1); ACC(a12, y2, v1); ACC(a13, y3, v1);          \
                }                                                                                    \
                int32_t *r = acc + (size_t)t * m + o;                                                \
                r[0] = SUM(a00) - c0; r[m] = SUM(a01) - c0;                                          \
                r[2 * (size_t)m] = SUM(a02) - c0; r[3 * (size_t)m] = SUM(a03) - c0;                  \
                r[1] = SUM(a10) - c1; r[m + 1] = SUM(a11) - c1;                                      \
                r[2 * (size_t)m + 1] = SUM(a12) - c1; r[3 * (size_t)m + 1] = SUM(a13) - c1;          \
            }                                                                                        \
        }                                                                                            \
        for (; o < m; o++) { /* an odd last row */                                                   \
            const int8_t *w0 = w + (size_t)o * k;                                                    \
            int32_t c0 = 128 * NAME##_row_sum(w0, k);                                                \
            for (int t = 0; t < nq; t++) {                                                           \
                const uint8_t *x0 = u + (size_t)t * k;                                               \
                VEC a = ZERO;                                                                        \
                for (int j = 0; j < k; j += STEP) ACC(a, LOAD(x0 + j), LOAD(w0 + j));                \
                acc[(size_t)t * m + o] = SUM(a) - c0;                                                \
            }                                                                                        \
        }                                                                                            \
    }

/* The saturating sums with vpmaddubsw, as CTranslate2's kernels do them: each two neighbouring
   uint8 x int8 products added into an int16 with saturation (dots_plain_sat), then into int32;
   32 products per instruction. A weight row's sum cannot saturate (pairs of int8). */
#define LOADB(p) _mm256_loadu_si256((const __m256i *)(p))
#define SADD(a, y, v) a = _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_maddubs_epi16(y, v), _mm256_set1_epi16(1)))
DOTS_U8(dots_avx2_sat, __attribute__((target("avx2"))), __m256i, 32, _mm256_setzero_si256(), LOADB, SADD, hsum, _mm256_set1_epi8(1))

/* Exact sums with AVX-512 VNNI (vpdpbusd: four uint8 x int8 products added into each int32 lane,
   with no cut: each product fits int16 and the lane sums in 32 bits), 64 products per
   instruction, as CTranslate2's kernels do on such CPUs: the same int32 sums as dots_avx2's. */
#define VNNI512 __attribute__((target("avx512f,avx512bw,avx512vnni")))
#define LOADZ(p) _mm512_loadu_si512((const void *)(p))
#define DPB(a, y, v) a = _mm512_dpbusd_epi32(a, y, v)
DOTS_U8(dots_vnni512, VNNI512, __m512i, 64, _mm512_setzero_si512(), LOADZ, DPB, _mm512_reduce_add_epi32, _mm512_set1_epi8(1))

CPU_HAS(have_vnni512, __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni"))
#endif

/* The product kernels dense() may run, best first where the CPU and the width allow
   (``kernel`` "auto"), or the one a caller names (the tests run each). */
enum { K_AUTO, K_PLAIN, K_AVX2, K_VNNI512 };

static int kernel_of(const char *name) {
    if (!name || !strcmp(name, "auto")) return K_AUTO;
    if (!strcmp(name, "plain")) return K_PLAIN;
    if (!strcmp(name, "avx2")) return K_AVX2;
    if (!strcmp(name, "avx512vnni")) return K_VNNI512;
    return -1;
}

static int kernel_runs(int kind) {
#ifdef KB_X86_AVX2
    if (kind == K_AVX2) return have_avx2();
    if (kind == K_VNNI512) return have_vnni512();
#endif
    return kind == K_PLAIN;
}

/* The model's small float tensors (scales, biases, layer norms) lie in model.embed at whatever
   offsets CTranslate2's file gives them, many not a multiple of 4: they are read with memcpy,
   which is defined at any address and compiles to a plain load. */
static inline float load_float(const unsigned char *p) {
    float f;
    memcpy(&f, p, sizeof f);
    return f;
}

/* ---- the Python functions ------------------------------------------------------------------ */

/* A buffer of ``items`` items of ``itemsize`` bytes; ``aligned``: read through typed pointers
   (the activations, which numpy allocates aligned), so its address must be a multiple of it. */
static int check(Py_buffer *b, Py_ssize_t items, Py_ssize_t itemsize, const char *what, int aligned) {
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

static inline float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

static PyObject *dense(PyObject *self, PyObject *args) {
    Py_buffer x, w, ws, b, out;
    int n, k, m, act, sat = 0;
    const char *kname = NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*iiip|pz", &x, &w, &ws, &b, &out, &n, &k, &m, &act, &sat, &kname)) return NULL;
    PyObject *result = NULL;
    int16_t *q = NULL;
    uint8_t *u = NULL;
    float *qscale = NULL;
    int32_t *acc = NULL;
    if (n <= 0 || k <= 0 || m <= 0 || n > 1 << 16 || k > 1 << 16 || m > 1 << 20) {
        PyErr_SetString(PyExc_ValueError, "dense: shapes out of range");
        goto done;
    }
    int kind = kernel_of(kname);
    if (kind < 0 || (kind != K_AUTO && !kernel_runs(kind)) || (sat && kind == K_VNNI512)) {
        PyErr_Format(PyExc_ValueError, "dense: no kernel %s%s here", kname, sat ? " with saturate" : "");
        goto done;
    }
    if (kind == K_AUTO) {
#ifdef KB_X86_AVX2
        kind = !sat && k % 64 == 0 && have_vnni512() ? K_VNNI512 : k % (sat ? 32 : 16) == 0 && have_avx2() ? K_AVX2 : K_PLAIN;
#else
        kind = K_PLAIN;
#endif
    } else if ((kind == K_VNNI512 && k % 64) || (kind == K_AVX2 && k % (sat ? 32 : 16))) {
        kind = K_PLAIN;  /* a width the kernel does not take */
    }
    if (!check(&x, (Py_ssize_t)n * k, 4, "x", 1) || !check(&w, (Py_ssize_t)m * k, 1, "the weight", 0) ||
        !check(&ws, m, 4, "the weight's scales", 0) || !check(&b, m, 4, "the bias", 0) || !check(&out, (Py_ssize_t)n * m, 4, "out", 1))
        goto done;
    int nq = (n + TOKENS - 1) / TOKENS * TOKENS;
    q = calloc((size_t)nq * k, sizeof *q);
    qscale = malloc((size_t)n * sizeof *qscale);
    acc = malloc((size_t)nq * m * sizeof *acc);
    int unsigned_input = sat || kind == K_VNNI512;  /* u = q + 128 */
    if (unsigned_input) u = malloc((size_t)nq * k);
    if (!q || !qscale || !acc || (unsigned_input && !u)) {
        PyErr_NoMemory();
        goto done;
    }
    const float *xf = x.buf;
    const unsigned char *wsb = ws.buf, *bb = b.buf;
    float *of = out.buf;
    Py_BEGIN_ALLOW_THREADS
    /* quantize_rows: amax floored at 127 / FLT_MAX, scale = 127 / amax, q = rint(x * scale + 128) - 128. A
       row with a NaN or an infinity gets a NaN scale and zeros (a float that is not finite has no
       int8 value), so that its outputs are NaN and the encoder refuses the query. */
    for (int t = 0; t < n; t++) {
        const float *r = xf + (size_t)t * k;
        float amax = 127.0f / 3.4028234663852886e38f;
        int finite = 1;
        for (int j = 0; j < k; j++) {
            float a = fabsf(r[j]);
            finite &= a <= 3.4028234663852886e38f;
            amax = a > amax ? a : amax;
        }
        if (!finite) {
            qscale[t] = NAN;
            continue;  /* its q row stays zeros (calloc) */
        }
        float s = qscale[t] = 127.0f / amax;
        int16_t *qt = q + (size_t)t * k;
        for (int j = 0; j < k; j++) qt[j] = (int16_t)(rintf(r[j] * s + 128.0f) - 128.0f);
    }
    if (unsigned_input)
        for (size_t i = 0; i < (size_t)nq * k; i++) u[i] = (uint8_t)(q[i] + 128);
#ifdef KB_X86_AVX2
    if (kind == K_VNNI512)
        dots_vnni512(u, nq, w.buf, m, k, acc);
    else if (kind == K_AVX2)
        sat ? dots_avx2_sat(u, nq, w.buf, m, k, acc) : dots_avx2(q, nq, w.buf, m, k, acc);
    else
#endif
        sat ? dots_plain_sat(u, n, w.buf, m, k, acc) : dots_plain(q, n, w.buf, m, k, acc);
    /* (acc / row scale) / weight scale + bias, then GELU */
    for (int t = 0; t < n; t++) {
        const int32_t *a = acc + (size_t)t * m;
        float *y = of + (size_t)t * m, s = qscale[t];
        for (int o = 0; o < m; o++) {
            float v = (float)a[o] / s / load_float(wsb + 4 * (size_t)o) + load_float(bb + 4 * (size_t)o);
            y[o] = act ? gelu(v) : v;
        }
    }
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    free(q);
    free(u);
    free(qscale);
    free(acc);
    PyBuffer_Release(&x);
    PyBuffer_Release(&w);
    PyBuffer_Release(&ws);
    PyBuffer_Release(&b);
    PyBuffer_Release(&out);
    return result;
}

/* layer_norm(x, d, g, beta, out, n, k, eps): out = LayerNorm(x + d) (d may be None), the mean
   and variance summed in double. */
static PyObject *layer_norm(PyObject *self, PyObject *args) {
    Py_buffer x, d = {0}, g, beta, out;
    PyObject *dobj;
    int n, k;
    double eps;
    if (!PyArg_ParseTuple(args, "y*Oy*y*w*iid", &x, &dobj, &g, &beta, &out, &n, &k, &eps)) return NULL;
    PyObject *result = NULL;
    int have_d = dobj != Py_None;
    if (have_d && PyObject_GetBuffer(dobj, &d, PyBUF_SIMPLE) < 0) goto release;
    if (n <= 0 || k <= 0 || n > 1 << 16 || k > 1 << 16) {
        PyErr_SetString(PyExc_ValueError, "layer_norm: shapes out of range");
        goto release;
    }
    if (!check(&x, (Py_ssize_t)n * k, 4, "x", 1) || (have_d && !check(&d, (Py_ssize_t)n * k, 4, "the residual", 1)) ||
        !check(&g, k, 4, "gamma", 0) || !check(&beta, k, 4, "beta", 0) || !check(&out, (Py_ssize_t)n * k, 4, "out", 1))
        goto release;
    const float *xf = x.buf, *df = have_d ? d.buf : NULL;
    const unsigned char *gb = g.buf, *bb = beta.buf;
    float *of = out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (int t = 0; t < n; t++) {
        const float *r = xf + (size_t)t * k, *dr = df ? df + (size_t)t * k : NULL;
        float *y = of + (size_t)t * k;
        double sum = 0, sq = 0;
        for (int j = 0; j < k; j++) {
            y[j] = dr ? r[j] + dr[j] : r[j];
            sum += y[j];
        }
        float mean = (float)(sum / k);
        for (int j = 0; j < k; j++) sq += (double)(y[j] - mean) * (y[j] - mean);
        float rstd = (float)(1.0 / sqrt(sq / k + eps));
        for (int j = 0; j < k; j++) y[j] = (y[j] - mean) * rstd * load_float(gb + 4 * (size_t)j) + load_float(bb + 4 * (size_t)j);
    }
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
release:
    PyBuffer_Release(&x);
    if (have_d && d.obj) PyBuffer_Release(&d);
    PyBuffer_Release(&g);
    PyBuffer_Release(&beta);
    PyBuffer_Release(&out);
    return result;
}

/* attention(qkv, out, n, heads, d): out = the context of one sequence's self-attention (n x
   heads * d, float32) from its fused QKV projection qkv (n x 3 * heads * d): per head,
   softmax(q k^T / sqrt(d)) v. ``s``: n floats of scratch. */
static void attend(const float *qkv, float *out, int n, int heads, int d, float *s) {
    const int hidden = heads * d, row = 3 * hidden;
    const float alpha = 1.0f / sqrtf((float)d);
    for (int h = 0; h < heads; h++) {
        const float *Q = qkv + (size_t)h * d, *K = Q + hidden, *V = Q + 2 * hidden;
        for (int i = 0; i < n; i++) {
            const float *qi = Q + (size_t)i * row;
            float mx = -INFINITY, total = 0.0f;
            for (int j = 0; j < n; j++) {
                const float *kj = K + (size_t)j * row;
                float dot = 0.0f;
                for (int c = 0; c < d; c++) dot += qi[c] * kj[c];
                s[j] = dot * alpha;
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = 0; j < n; j++) total += s[j] = expf(s[j] - mx);
            float *oi = out + (size_t)i * hidden + (size_t)h * d;
            for (int c = 0; c < d; c++) oi[c] = 0.0f;
            for (int j = 0; j < n; j++) {
                const float p = s[j] / total, *vj = V + (size_t)j * row;
                for (int c = 0; c < d; c++) oi[c] += p * vj[c];
            }
        }
    }
}

static PyObject *attention(PyObject *self, PyObject *args) {
    Py_buffer qkv, out;
    int n, heads, d;
    if (!PyArg_ParseTuple(args, "y*w*iii", &qkv, &out, &n, &heads, &d)) return NULL;
    PyObject *result = NULL;
    float *s = NULL;
    if (n <= 0 || heads <= 0 || d <= 0 || n > 1 << 14 || heads > 1 << 10 || d > 1 << 12) {
        PyErr_SetString(PyExc_ValueError, "attention: shapes out of range");
        goto done;
    }
    if (!check(&qkv, (Py_ssize_t)n * 3 * heads * d, 4, "qkv", 1) || !check(&out, (Py_ssize_t)n * heads * d, 4, "out", 1)) goto done;
    s = malloc((size_t)n * sizeof *s);
    if (!s) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    attend(qkv.buf, out.buf, n, heads, d, s);
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    free(s);
    PyBuffer_Release(&qkv);
    PyBuffer_Release(&out);
    return result;
}


/* ---- cosines over float16 rows --------------------------------------------------------------- */

/* cosines_f16(q, rows, out, n, k): out[i] = cosine of q (float32, k) with row i of rows (n x k
   float16, the vectors as an artifact stores them), summed in float32: dot / sqrt(|row|^2 |q|^2).
   A zero row gives NaN (0 / 0), a row that is not finite NaN or infinity: the caller decides
   (runtime/cosines.py). Where the CPU has AVX2 and F16C only: ``f16_kernel()`` says which. The
   dense leg's scan and kb's graph walk used numkong's cdist for this, whose import alone costs a
   one-shot search 3-5 ms. */

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

static PyObject *f16_kernel(PyObject *self, PyObject *unused) {
#ifdef KB_X86_AVX2
    if (have_f16c()) return PyUnicode_FromString("f16c");
#endif
    return PyUnicode_FromString("none");
}

/* ---- crc32 ----------------------------------------------------------------------------------- */

/* zlib's CRC-32 (reflected polynomial 0xEDB88320), the checksum of every section, page and row
   group kb reads (formats/checksum.py). Where the CPU has PCLMULQDQ and SSE4.1 it folds 64 bytes
   a step with carry-less multiplies (Gopal, Ozturk et al., "Fast CRC Computation for Generic
   Polynomials Using PCLMULQDQ Instruction", Intel 2009, with the bit-reflected constants and the
   Barrett reduction of Chromium's zlib); bytes the fold leaves, and CPUs without it, go through a
   table a byte at a time. */

static uint32_t crc_table[256];

static void crc_table_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int j = 0; j < 8; j++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

/* ``c``: the running register (already inverted). */
static uint32_t crc_bytes(uint32_t c, const unsigned char *p, size_t n) {
    while (n--) c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

#ifdef KB_X86_AVX2
CPU_HAS(have_pclmul, __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1"))

/* The running register ``c`` over ``len`` bytes: len >= 64 and a multiple of 16. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc_fold(uint32_t c, const unsigned char *buf, size_t len) {
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    __m128i x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    __m128i x5, x6, x7, x8;
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)c));
    buf += 64;
    len -= 64;
    while (len >= 64) { /* four lanes of 16 bytes, each folded 64 bytes on */
        x5 = _mm_clmulepi64_si128(x1, k1k2, 0x00);
        x6 = _mm_clmulepi64_si128(x2, k1k2, 0x00);
        x7 = _mm_clmulepi64_si128(x3, k1k2, 0x00);
        x8 = _mm_clmulepi64_si128(x4, k1k2, 0x00);
        x1 = _mm_clmulepi64_si128(x1, k1k2, 0x11);
        x2 = _mm_clmulepi64_si128(x2, k1k2, 0x11);
        x3 = _mm_clmulepi64_si128(x3, k1k2, 0x11);
        x4 = _mm_clmulepi64_si128(x4, k1k2, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), _mm_loadu_si128((const __m128i *)(buf + 0x00)));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), _mm_loadu_si128((const __m128i *)(buf + 0x10)));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), _mm_loadu_si128((const __m128i *)(buf + 0x20)));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), _mm_loadu_si128((const __m128i *)(buf + 0x30)));
        buf += 64;
        len -= 64;
    }
    /* the four lanes into one */
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x2), x5);
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x3), x5);
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x4), x5);
    while (len >= 16) {
        x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
        x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), _mm_loadu_si128((const __m128i *)buf)), x5);
        buf += 16;
        len -= 16;
    }
    /* 128 bits to 64, then Barrett's reduction to 32 */
    x2 = _mm_clmulepi64_si128(x1, k3k4, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), k5k0, 0x00), x2);
    x2 = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), poly, 0x10);
    x2 = _mm_clmulepi64_si128(_mm_and_si128(x2, low32), poly, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

static uint32_t crc32_of(uint32_t crc, const unsigned char *p, size_t n) {
    uint32_t c = ~crc;
#ifdef KB_X86_AVX2
    if (n >= 64 && have_pclmul()) {
        size_t whole = n & ~(size_t)15;
        c = crc_fold(c, p, whole);
        p += whole;
        n -= whole;
    }
#endif
    return ~crc_bytes(c, p, n);
}

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

static PyObject *crc_kernel(PyObject *self, PyObject *unused) {
#ifdef KB_X86_AVX2
    if (have_pclmul()) return PyUnicode_FromString("pclmul");
#endif
    return PyUnicode_FromString("table");
}

static PyObject *simd(PyObject *self, PyObject *unused) {
#ifdef KB_X86_AVX2
    if (have_vnni512()) return PyUnicode_FromString("avx512vnni");
    if (have_avx2()) return PyUnicode_FromString("avx2");
#endif
    return PyUnicode_FromString("plain");
}

static PyMethodDef methods[] = {
    {"dense", dense, METH_VARARGS, "dense(x, w, ws, b, out, n, k, m, gelu, saturate=False, kernel='auto'): out = x @ W.T + b (int8), GELU when asked; int8 pair sums cut to int16 when saturate."},
    {"layer_norm", layer_norm, METH_VARARGS, "layer_norm(x, d, g, beta, out, n, k, eps): out = LayerNorm(x + d); d may be None."},
    {"attention", attention, METH_VARARGS, "attention(qkv, out, n, heads, d): out = self-attention of one sequence from its fused QKV projection."},
    {"simd", simd, METH_NOARGS, "The best product kernel this CPU runs: 'avx512vnni', 'avx2' or 'plain'."},
    {"crc32", (PyCFunction)(void (*)(void))crc32, METH_FASTCALL, "crc32(data, value=0): zlib.crc32(data, value)."},
    {"crc32_many", crc32_many, METH_VARARGS, "crc32_many(data, starts, stops, out, n): out[i] = crc32(data[starts[i]:stops[i]])."},
    {"walk_f16", walk_f16, METH_VARARGS, "walk_f16(image, q, upper, upper_levels, crcs, ok, out_slots, out_dist, size, conn, base, max_level, entry, levels_at, nodes_at, matrix_at, dims, ef, count) -> (status, info, found): kb's walk of an HNSW graph."},
    {"acc_top", acc_top, METH_VARARGS, "acc_top(acc, n, allowed, lam, k, out_ids, out_scores) -> count: the k best of acc[i] > 0 (allowed), by acc + lam * acc (lam > 0) descending, ties by id."},
    {"impact_add", impact_add, METH_VARARGS, "impact_add(ids, imp, scale, acc, n_ids, n) -> bad: acc[ids[i]] += imp[i] * scale (u32 ids, u8 impacts, float64 acc)."},
    {"crc_kernel", crc_kernel, METH_NOARGS, "How crc32 sums on this CPU: 'pclmul' or 'table'."},
    {"cosines_f16", cosines_f16, METH_VARARGS, "cosines_f16(q, rows, out, n, k): out[i] = cosine of float32 q with float16 row i."},
    {"f16_kernel", f16_kernel, METH_NOARGS, "Whether cosines_f16 runs on this CPU: 'f16c' or 'none'."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels", "kb's compiled kernels: the in-place query encoder's and crc32.", -1, methods};

PyMODINIT_FUNC PyInit__kernels(void) {
    crc_table_init();
    return PyModule_Create(&module);
}
