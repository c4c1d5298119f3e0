/* The in-place query encoder's compiled kernels (models/query_encoder.py, whose numpy functions
   are the reference the tests hold these against, and the fallback where no compiler ran).

   One query's forward pass multiplies about 11 token rows by 24 (all-MiniLM-L6-v2) or 48
   (multilingual-e5-small) int8 weight matrices read in place from the artifact's mmap; this
   module multiplies the int8 weights as they lie, with no pack and no copy.

   dense(x, w, ws, b, out, n, k, m, gelu, saturate=False, kernel="auto"): out = x @ W.T + b, then
   GELU when asked, where x is float32 (n, k), W int8 (m, k) with float32 row scales ws (m,), b
   float32 (m,), out float32 (n, m), all C-contiguous: CTranslate2's int8 dense layer as
   models/query_encoder.py's numpy reference takes it. Each row of x quantized to int8 (scale
   127 / max |x|), exact int32 sums of int8 x int8 products (vpdpbusd on the uint8-shifted input
   where the CPU has AVX-512 VNNI, 2.2 times as fast as the next; vpmaddwd on sign-extended int16
   where it has AVX2; plain C elsewhere), then acc / row scale / weight scale + bias. With
   ``saturate`` the sums are those of CTranslate2 on an x86 CPU without int8 dot products: pairs
   of uint8 x int8 products cut to int16 (vpmaddubsw, as its kernels do; plain C elsewhere).
   ``kernel`` names the product kernel ("plain", "avx2", "avx512vnni"; "auto": the best the CPU
   and the width allow), for the tests. GELU is the erf one (``gelu``).

   layer_norm(x, d, g, beta, out, n, k, eps): out = LayerNorm(x + d) (d may be None).

   attention(qkv, out, n, heads, d): one sequence's self-attention.

   Every buffer's size is checked against the shapes before it is read; the GIL is let go during
   the arithmetic, so the encoder's helper threads check the next layers' crc32s meanwhile. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../formats/kernels.h"

/* The float loops (quantization, rescale and GELU, layer norm, attention), compiled twice where
   the toolchain can pick a clone at load time: for AVX2 (eight lanes) and for the baseline CPU.
   setup.py compiles with -ffp-contract=off, so that both take the numpy reference's float steps
   (no multiply and add fused where numpy rounds twice). */
#if defined(KB_X86_AVX2) && defined(__linux__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define FLOAT_LOOPS __attribute__((target_clones("arch=haswell", "default")))
#endif
#endif
#ifndef FLOAT_LOOPS
#define FLOAT_LOOPS
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

/* GELU, 0.5 x (1 + erf(x / sqrt 2)), with Abramowitz & Stegun's erf 7.1.28 (3e-7, in double): a
   polynomial, which the compiler vectorizes, where libm's erff is a call per value (40 ns here,
   a tenth of a 256-token MiniLM pass); the numpy reference takes the same steps
   (models/query_encoder.py ``erf``). */
static const double ERF_A[6] = {0.0705230784, 0.0422820123, 0.0092705272, 0.0001520143, 0.0002765672, 0.0000430638};

static inline float gelu(float x) {
    double z = x * 0.70710678118654752, a = fabs(z), p = 0.0;
    for (int i = 5; i >= 0; i--) p = (p + ERF_A[i]) * a;
    p += 1.0;
    p *= p, p *= p, p *= p, p *= p;
    return (float)(0.5 * x * (1.0 + copysign(1.0 - 1.0 / p, z)));
}

/* quantize_rows: amax floored at 127 / FLT_MAX, scale = 127 / amax, q = rint(x * scale + 128) - 128.
   A row with a NaN or an infinity gets a NaN scale and zeros (a float that is not finite has no
   int8 value), so that its outputs are NaN and the encoder refuses the query. q: zeros. */
FLOAT_LOOPS static void quantize(const float *xf, int n, int k, int16_t *q, float *qscale) {
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
            continue;
        }
        float s = qscale[t] = 127.0f / amax;
        int16_t *qt = q + (size_t)t * k;
        /* y = x * scale + 128 lies in [1, 255]: adding and taking back 2^23 rounds it to the
           nearest integer, ties to even, as rintf does, in a loop the compiler vectorizes */
        for (int j = 0; j < k; j++) qt[j] = (int16_t)(((r[j] * s + 128.0f) + 0x1p23f) - 0x1p23f) - 128;
    }
}

/* out = acc x (1 / row scale) / weight scale + bias (CTranslate2's order), then GELU when ``act``. */
FLOAT_LOOPS static void rescale(const int32_t *acc, const float *qscale, const unsigned char *ws, const unsigned char *b, float *out, int n, int m, int act) {
    for (int t = 0; t < n; t++) {
        const int32_t *a = acc + (size_t)t * m;
        float *y = out + (size_t)t * m, r = 1.0f / qscale[t];
        for (int o = 0; o < m; o++) {
            float v = (float)a[o] * r / load_float(ws + 4 * (size_t)o) + load_float(b + 4 * (size_t)o);
            y[o] = act ? gelu(v) : v;
        }
    }
}

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
    quantize(xf, n, k, q, qscale);
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
    rescale(acc, qscale, wsb, bb, of, n, m, act);
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
FLOAT_LOOPS static void norm_rows(const float *xf, const float *df, const unsigned char *gb, const unsigned char *bb, float *of, int n, int k, double eps) {
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
        for (int j = 0; j < k; j++) y[j] = (y[j] - mean) * (rstd * load_float(gb + 4 * (size_t)j)) + load_float(bb + 4 * (size_t)j);
    }
}

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
    norm_rows(xf, df, gb, bb, of, n, k, eps);
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
FLOAT_LOOPS static void attend(const float *restrict qkv, float *restrict out, int n, int heads, int d, float *restrict s, float *restrict kT) {
    const int hidden = heads * d, row = 3 * hidden;
    const float alpha = 1.0f / sqrtf((float)d);
    for (int h = 0; h < heads; h++) {
        const float *Q = qkv + (size_t)h * d, *K = Q + hidden, *V = Q + 2 * hidden;
        for (int j = 0; j < n; j++) /* k transposed, (d, n): the loops over keys run in lanes */
            for (int c = 0; c < d; c++) kT[(size_t)c * n + j] = K[(size_t)j * row + c];
        for (int i = 0; i < n; i++) {
            const float *qi = Q + (size_t)i * row;
            for (int j = 0; j < n; j++) s[j] = 0.0f;
            for (int c = 0; c < d; c++) {
                const float qc = qi[c], *kc = kT + (size_t)c * n;
                for (int j = 0; j < n; j++) s[j] += qc * kc[j];
            }
            for (int j = 0; j < n; j++) s[j] *= alpha;
            float mx = s[0], total = 0.0f;
            for (int j = 1; j < n; j++) mx = s[j] > mx ? s[j] : mx;
            for (int j = 0; j < n; j++) total += s[j] = expf(s[j] - mx);
            float *oi = out + (size_t)i * hidden + (size_t)h * d;
            for (int c = 0; c < d; c++) oi[c] = 0.0f;
            const float inv = 1.0f / total;
            for (int j = 0; j < n; j++) {
                const float p = s[j] * inv, *vj = V + (size_t)j * row;
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
    float *s = NULL, *kT = NULL;
    if (n <= 0 || heads <= 0 || d <= 0 || n > 1 << 14 || heads > 1 << 10 || d > 1 << 12) {
        PyErr_SetString(PyExc_ValueError, "attention: shapes out of range");
        goto done;
    }
    if (!check(&qkv, (Py_ssize_t)n * 3 * heads * d, 4, "qkv", 1) || !check(&out, (Py_ssize_t)n * heads * d, 4, "out", 1)) goto done;
    s = malloc((size_t)n * sizeof *s);
    kT = malloc((size_t)n * d * sizeof *kT);
    if (!s || !kT) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    attend(qkv.buf, out.buf, n, heads, d, s, kT);
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    free(s);
    free(kT);
    PyBuffer_Release(&qkv);
    PyBuffer_Release(&out);
    return result;
}

static PyObject *simd(PyObject *self, PyObject *unused) {
    const char *best = "plain";
#ifdef KB_X86_AVX2
    best = have_vnni512() ? "avx512vnni" : have_avx2() ? "avx2" : best;
#endif
    return PyUnicode_FromString(best);
}


static PyMethodDef methods[] = {
    {"dense", dense, METH_VARARGS, "dense(x, w, ws, b, out, n, k, m, gelu, saturate=False, kernel='auto'): out = x @ W.T + b (int8), GELU when asked; int8 pair sums cut to int16 when saturate."},
    {"layer_norm", layer_norm, METH_VARARGS, "layer_norm(x, d, g, beta, out, n, k, eps): out = LayerNorm(x + d); d may be None."},
    {"attention", attention, METH_VARARGS, "attention(qkv, out, n, heads, d): out = self-attention of one sequence from its fused QKV projection."},
    {"simd", simd, METH_NOARGS, "The best product kernel this CPU runs: 'avx512vnni', 'avx2' or 'plain'."},
    {NULL, NULL, 0, NULL},
};

KB_MODULE(_encoder, "kb's compiled kernels of the in-place query encoder.", (void)0)
