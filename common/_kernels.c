/* kb's compiled kernels for the in-place query encoder (common/query_encoder.py).

   One query's forward pass multiplies about 11 token rows by 24 (all-MiniLM-L6-v2) or 48
   (multilingual-e5-small) int8 weight matrices read in place from the artifact's mmap. numkong's
   fastest path on x86 without VNNI packs each weight first, and the packs cost more than the
   products they serve; this module multiplies the int8 weights as they lie, with no pack.

   dense(x, w, ws, b, out, n, k, m, gelu): out = x @ W.T + b, then GELU when asked, where
   x is float32 (n, k), W int8 (m, k) with float32 row scales ws (m,), b float32 (m,), out
   float32 (n, m), all C-contiguous. The arithmetic is CTranslate2's int8 dense layer, step for
   step as common/query_encoder.py's numpy version does it: each row of x quantized to int8
   (scale 127 / max |x|, shifted into uint8 and rounded half to even), exact int32 sums of
   int8 x int8 products (vpmaddwd on sign-extended int16 where the CPU has AVX2, plain C
   elsewhere; both exact), then acc / (row scale x weight scale) + bias in float32. GELU is the
   erf form with the same Abramowitz & Stegun polynomial as the numpy version; only expf may
   differ from numpy's exp in the last bit. Compiled with -ffp-contract=off so that no multiply
   and add fuse where numpy rounds twice.

   layer_norm(x, d, g, beta, out, n, k, eps): out = LayerNorm(x + d) (d may be None), with
   CTranslate2's variance E[x^2] - mean^2 clamped at 0, in numpy's float32 steps and summation
   order, so that it equals the numpy version bit for bit.

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

static int have_avx2(void) {
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    return known;
}
#endif

/* ---- float steps, in numpy's order (common/query_encoder.py) -------------------------------- */

static const float ERF_P = 0.3275911f;
static const float ERF_A[5] = {1.061405429f, -1.453152027f, 1.421413741f, -0.284496736f, 0.254829592f};

static float erf_as(float x) {
    float a = fabsf(x);
    float t = a * ERF_P;
    t += 1.0f;
    t = 1.0f / t;
    float poly = t * ERF_A[0];
    for (int i = 1; i < 5; i++) {
        poly += ERF_A[i];
        poly *= t;
    }
    a = a * a;
    a = -a;
    a = expf(a);
    poly *= a;
    poly = 1.0f - poly;
    return copysignf(poly, x);
}

static const float SQRT_HALF = 0.70710678118654752440f; /* _F(1 / math.sqrt(2)) */

static inline float gelu(float x) {
    float e = erf_as(x * SQRT_HALF);
    e += 1.0f;
    x *= 0.5f;
    x *= e;
    return x;
}

/* ---- the Python functions ------------------------------------------------------------------ */

/* The model's small float tensors (scales, biases, layer norms) lie in model.embed at whatever
   offsets CTranslate2's file gives them, many not a multiple of 4: they are read with memcpy,
   which is defined at any address and compiles to a plain load. */
static inline float load_float(const unsigned char *p) {
    float f;
    memcpy(&f, p, sizeof f);
    return f;
}

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

static PyObject *dense(PyObject *self, PyObject *args) {
    Py_buffer x, w, ws, b, out;
    int n, k, m, act;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*iiip", &x, &w, &ws, &b, &out, &n, &k, &m, &act)) return NULL;
    PyObject *result = NULL;
    int16_t *q = NULL;
    float *qscale = NULL;
    int32_t *acc = NULL;
    if (n <= 0 || k <= 0 || m <= 0 || n > 1 << 16 || k > 1 << 16 || m > 1 << 20) {
        PyErr_SetString(PyExc_ValueError, "dense: shapes out of range");
        goto done;
    }
    if (!check(&x, (Py_ssize_t)n * k, 4, "x", 1) || !check(&w, (Py_ssize_t)m * k, 1, "the weight", 0) ||
        !check(&ws, m, 4, "the weight's scales", 0) || !check(&b, m, 4, "the bias", 0) || !check(&out, (Py_ssize_t)n * m, 4, "out", 1))
        goto done;
    int nq = (n + TOKENS - 1) / TOKENS * TOKENS;
    q = calloc((size_t)nq * k, sizeof *q);
    qscale = malloc((size_t)n * sizeof *qscale);
    acc = malloc((size_t)nq * m * sizeof *acc);
    if (!q || !qscale || !acc) {
        PyErr_NoMemory();
        goto done;
    }
    const float *xf = x.buf;
    const unsigned char *wsb = ws.buf, *bb = b.buf;
    float *of = out.buf;
    Py_BEGIN_ALLOW_THREADS
    /* quantize_rows: amax floored at 127 / FLT_MAX, scale = 127 / amax, rint(x * scale + 128) - 128.
       A row with a NaN or an infinity gets a NaN scale and zeros (a float that is not finite has
       no int8 value), so that its outputs are NaN and the encoder refuses the query. */
    const float cap = 127.0f / 3.4028234663852886e38f;
    for (int t = 0; t < n; t++) {
        const float *r = xf + (size_t)t * k;
        float amax = 0.0f;
        int finite = 1;
        for (int j = 0; j < k; j++) {
            float a = fabsf(r[j]);
            if (!(a <= 3.4028234663852886e38f)) finite = 0;
            else if (a > amax) amax = a;
        }
        if (!finite) {
            qscale[t] = NAN;
            continue;  /* its q row stays zeros (calloc) */
        }
        if (amax < cap) amax = cap;
        float s = 127.0f / amax;
        qscale[t] = s;
        int16_t *qt = q + (size_t)t * k;
        for (int j = 0; j < k; j++) {
            float v = r[j] * s;
            v += 128.0f;
            v = rintf(v);
            v -= 128.0f;
            qt[j] = (int16_t)(int8_t)v;
        }
    }
#ifdef KB_X86_AVX2
    if (k % 16 == 0 && have_avx2())
        dots_avx2(q, nq, w.buf, m, k, acc);
    else
#endif
        dots_plain(q, n, w.buf, m, k, acc);
    /* acc / (row scale x weight scale) + bias, then GELU */
    for (int t = 0; t < n; t++) {
        const int32_t *a = acc + (size_t)t * m;
        float *y = of + (size_t)t * m;
        float s = qscale[t];
        for (int o = 0; o < m; o++) {
            float v = (float)a[o];
            float sc = s * load_float(wsb + 4 * (size_t)o);
            v /= sc;
            v += load_float(bb + 4 * (size_t)o);
            y[o] = act ? gelu(v) : v;
        }
    }
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    free(q);
    free(qscale);
    free(acc);
    PyBuffer_Release(&x);
    PyBuffer_Release(&w);
    PyBuffer_Release(&ws);
    PyBuffer_Release(&b);
    PyBuffer_Release(&out);
    return result;
}

/* numpy's float32 sum of a contiguous row (loops_utils.h ``pairwise_sum``), in its order: eight
   float accumulators over blocks of at most 128, halves (cut at a multiple of 8) above that; of
   the squares when ``sq``. The layer norm's sums must be numpy's to the bit: a last-bit change of a
   norm's output moves int8 rounding in the next layer, and a query vector by up to 0.003. */
static float pairwise_sum(const float *a, Py_ssize_t n, int sq) {
    if (n < 8) {
        float res = 0.0f;
        for (Py_ssize_t i = 0; i < n; i++) res += sq ? a[i] * a[i] : a[i];
        return res;
    }
    if (n <= 128) {
        float r[8];
        for (int j = 0; j < 8; j++) r[j] = sq ? a[j] * a[j] : a[j];
        Py_ssize_t i = 8;
        for (; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] += sq ? a[i + j] * a[i + j] : a[i + j];
        float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += sq ? a[i] * a[i] : a[i];
        return res;
    }
    Py_ssize_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2, sq) + pairwise_sum(a + n2, n - n2, sq);
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
    for (int t = 0; t < n; t++) {
        const float *r = xf + (size_t)t * k, *dr = df ? df + (size_t)t * k : NULL;
        float *y = of + (size_t)t * k;
        for (int j = 0; j < k; j++) y[j] = dr ? r[j] + dr[j] : r[j];
        /* numpy's steps (common/query_encoder.py layer_norm): mean and mean square as float32
           sums over k, var = msq - mean^2 clamped at 0, + eps, sqrt */
        float mean = pairwise_sum(y, k, 0) / (float)k, var = pairwise_sum(y, k, 1) / (float)k;
        var -= mean * mean;
        if (var < 0.0f) var = 0.0f;
        var += (float)eps;
        float sd = sqrtf(var);
        for (int j = 0; j < k; j++) {
            float v = y[j] - mean;
            v /= sd;
            v *= load_float(gb + 4 * (size_t)j);
            v += load_float(bb + 4 * (size_t)j);
            y[j] = v;
        }
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

static PyObject *simd(PyObject *self, PyObject *unused) {
#ifdef KB_X86_AVX2
    if (have_avx2()) return PyUnicode_FromString("avx2");
#endif
    return PyUnicode_FromString("plain");
}

static PyMethodDef methods[] = {
    {"dense", dense, METH_VARARGS, "dense(x, w, ws, b, out, n, k, m, gelu): out = x @ W.T + b (int8 like CTranslate2), GELU when asked."},
    {"layer_norm", layer_norm, METH_VARARGS, "layer_norm(x, d, g, beta, out, n, k, eps): out = LayerNorm(x + d); d may be None."},
    {"simd", simd, METH_NOARGS, "The product kernel this CPU runs: 'avx2' or 'plain'."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels", "kb's compiled kernels for the in-place query encoder.", -1, methods};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
