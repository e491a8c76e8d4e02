/* One pass over many float arrays: the raw sums behind tb_gradlens' statistics.
 *
 * A plain C library (no Python API, no TensorFlow headers), loaded with
 * ctypes or wrapped as TensorFlow ops (_op.cc) by tb_gradlens/numerics/
 * kernel.py; without a compiler the TensorFlow path computes the same.
 * Three entry points, each one pass into raw sums per array, then the
 * columns of its record from them:
 *
 *   gl_gradient_statistics  grad_stats columns and the log2 histogram
 *   gl_divergence_metrics   the divergence metrics
 *   gl_update_statistics    the update statistics
 *
 * The column formulas are those of gradient_stats.py, divergence.py and
 * updates.py (their docstrings), in the column order of metadata/kinds.py;
 * kernel.py checks that order.  Every backend is tested against the same
 * float64 NumPy references.
 *
 * Elements are widened exactly (bfloat16 and float16 to float32, float32 to
 * float64) with denormals kept: the threads clear the flush-to-zero and
 * denormals-are-zero modes TensorFlow sets on its own threads.  Arrays are
 * cut into chunks of CHUNK elements that the threads share; a row split
 * over several chunks is merged after the threads join.
 *
 * Float32 bit layout (IEEE-754 binary32): sign bit 31, an 8-bit exponent
 * field (bias 127; 0: zero or subnormal, all ones: Inf or NaN), 23
 * mantissa bits (the F32_ constants below).  The histogram layout (bin of exponent e, special bins)
 * is passed in by the caller, from tb_gradlens.metadata.
 */

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

enum { GL_FLOAT32 = 0, GL_BFLOAT16 = 1, GL_FLOAT16 = 2, GL_FLOAT64 = 3, GL_NONE = -1 };

/* Bit layouts (IEEE-754); gl_float32_layout reports the float32 one, which
 * kernel.py checks against tb_gradlens.float_formats when it loads. */
#define F32_MANTISSA_BITS 23
#define F32_BIAS 127
#define F32_FIELD_MAX 0xffu                                       /* Inf, NaN */
#define F32_MANTISSA_MASK ((1u << F32_MANTISSA_BITS) - 1)
#define F32_EXPONENT_MASK (F32_FIELD_MAX << F32_MANTISSA_BITS)
#define F32_MIN_SUBNORMAL (1 - F32_BIAS - F32_MANTISSA_BITS)      /* log2 of the smallest */
#define F16_MANTISSA_BITS 10
#define F16_BIAS 15
#define F16_FIELD_MAX 0x1fu
#define F64_MANTISSA_BITS 52
#define F64_BIAS 1023
#define F64_FIELD_MAX 0x7ffu
#define NARROW_SHIFT 16   /* bfloat16 = the upper half of a float32 */

#define BLOCK 512         /* elements converted and summed at a time: a pass's buffers stay in L1 */
#define CHUNK (1 << 16)   /* elements per unit of work shared by the threads */
#define FIELDS ((int)(2 * (F32_FIELD_MAX + 1)))  /* sign and exponent field: bits >> 23 */

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_CLONES
#endif

typedef double v4d __attribute__((vector_size(32)));
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

/* ------------------------------------------------------------------------
 * Floating-point environment and widening.
 * ---------------------------------------------------------------------- */

typedef struct { uint64_t saved; } fp_mode;

static fp_mode keep_denormals(void)
{
  fp_mode mode = {0};
#if defined(__x86_64__) || defined(__i386__)
  mode.saved = _mm_getcsr();
  _mm_setcsr((unsigned int)mode.saved & ~0x8040u); /* FTZ (bit 15), DAZ (bit 6) */
#elif defined(__aarch64__)
  uint64_t fpcr;
  __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
  mode.saved = fpcr;
  fpcr &= ~(1ull << 24); /* FZ */
  __asm__ volatile("msr fpcr, %0" : : "r"(fpcr));
#endif
  return mode;
}

static void restore_mode(fp_mode mode)
{
#if defined(__x86_64__) || defined(__i386__)
  _mm_setcsr((unsigned int)mode.saved);
#elif defined(__aarch64__)
  __asm__ volatile("msr fpcr, %0" : : "r"(mode.saved));
#else
  (void)mode;
#endif
}

static inline float float_of(uint32_t bits) { float f; memcpy(&f, &bits, 4); return f; }
static inline uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* float16 bits -> float32 bits (exact: every float16 is a float32). */
static inline uint32_t half_bits_to_float_bits(uint16_t h)
{
  const uint32_t widen = F32_MANTISSA_BITS - F16_MANTISSA_BITS, rebias = F32_BIAS - F16_BIAS;
  const uint32_t mask = (1u << F16_MANTISSA_BITS) - 1;
  uint32_t sign = (uint32_t)(h >> 15) << 31;
  uint32_t field = (h >> F16_MANTISSA_BITS) & F16_FIELD_MAX, mantissa = h & mask;
  if (field == 0) {
    if (mantissa == 0) return sign;
    int shift = 0;  /* a subnormal: normalize m * 2^(1 - bias - p) */
    while (!(mantissa & (mask + 1))) { mantissa <<= 1; shift++; }
    return sign | ((uint32_t)(rebias + 1 - shift) << F32_MANTISSA_BITS) | ((mantissa & mask) << widen);
  }
  if (field == F16_FIELD_MAX) return sign | F32_EXPONENT_MASK | (mantissa << widen);
  return sign | ((field + rebias) << F32_MANTISSA_BITS) | (mantissa << widen);
}

/* Elements [start, start + m) of an array as float32 bits (float64 rounds). */
static void to_float32_bits(const void *data, int dtype, int64_t start, int64_t m, uint32_t *out)
{
  int64_t i;
  switch (dtype) {
  case GL_FLOAT32: memcpy(out, (const uint32_t *)data + start, (size_t)m * 4); break;
  case GL_BFLOAT16: for (i = 0; i < m; i++) out[i] = (uint32_t)((const uint16_t *)data)[start + i] << NARROW_SHIFT; break;
  case GL_FLOAT16: for (i = 0; i < m; i++) out[i] = half_bits_to_float_bits(((const uint16_t *)data)[start + i]); break;
  default: for (i = 0; i < m; i++) out[i] = bits_of((float)((const double *)data)[start + i]); break;
  }
}

/* Elements [start, start + m) of an array widened exactly to float64. */
VECTOR_CLONES
static void to_float64(const void *data, int dtype, int64_t start, int64_t m, double *out)
{
  int64_t i;
  switch (dtype) {
  case GL_FLOAT32: for (i = 0; i < m; i++) out[i] = ((const float *)data)[start + i]; break;
  case GL_BFLOAT16: for (i = 0; i < m; i++) out[i] = float_of((uint32_t)((const uint16_t *)data)[start + i] << NARROW_SHIFT); break;
  case GL_FLOAT16: for (i = 0; i < m; i++) out[i] = float_of(half_bits_to_float_bits(((const uint16_t *)data)[start + i])); break;
  default: memcpy(out, (const double *)data + start, (size_t)m * 8); break;
  }
}

static inline int finite32(uint32_t bits) { return (bits & F32_EXPONENT_MASK) != F32_EXPONENT_MASK; }

/* ------------------------------------------------------------------------
 * Work sharing: chunks of rows, run by n threads, merged per row.
 * ---------------------------------------------------------------------- */

typedef struct {
  int64_t row, start, length;
  double *partial; /* this chunk's partial row, or NULL: it writes the row itself */
} chunk;

typedef struct job job;
typedef void (*chunk_fn)(const job *, const chunk *, double *out);

struct job {
  chunk_fn run;
  chunk *chunks;
  int64_t n_chunks;
  int64_t next;                         /* the next chunk to take (atomic) */
  const void *const *a, *const *b, *const *c;
  const int32_t *a_dtypes, *b_dtypes, *c_dtypes;
  const int32_t *mantissa_bits, *min_normal;
  double floor_fraction;
  int32_t min_exponent, zero_bin;
  int32_t width;                        /* doubles per row */
  double *rows;                         /* [rows, width], or NULL: finish each row at once */
  void (*finish)(const job *, int64_t row, const double *raw);
  float *stats, *hist;                  /* gradient statistics: the outputs */
  const double *implicit_zeros;
  int32_t n_bins, subnormal_bins;
  int failed;                           /* a worker ran out of memory */
};

/* Runs chunks until none is left.  A chunk that is a whole row writes its
 * raw row into the job's rows, or (rows NULL) into this worker's buffer,
 * finished into the outputs at once: no [rows, width] buffer for 10^5
 * histograms. */
static void *worker(void *arg)
{
  job *j = (job *)arg;
  fp_mode mode = keep_denormals();
  double *local = j->rows ? NULL : (double *)malloc((size_t)j->width * sizeof(double));
  if (!j->rows && !local) {
    __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
  } else {
    for (;;) {
      int64_t k = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
      if (k >= j->n_chunks) break;
      const chunk *c = &j->chunks[k];
      if (c->partial) {
        j->run(j, c, c->partial);
      } else if (j->rows) {
        j->run(j, c, j->rows + c->row * j->width);
      } else {
        j->run(j, c, local);
        j->finish(j, c->row, local);
      }
    }
  }
  free(local);
  restore_mode(mode);
  return NULL;
}

#define MAX_THREADS 64

static void run_threads(job *j, int threads)
{
  pthread_t ids[MAX_THREADS];
  int started = 0;
  j->next = 0;
  int n = threads < j->n_chunks ? threads : (int)j->n_chunks;
  if (n > MAX_THREADS) n = MAX_THREADS;
  for (int t = 1; t < n; t++)
    if (pthread_create(&ids[started], NULL, worker, j) == 0) started++;
  worker(j); /* the calling thread works too; alone when threads start to fail */
  for (int t = 0; t < started; t++) pthread_join(ids[t], NULL);
}

/* Cut rows into chunks of at most CHUNK elements.  A row cut in several
 * gets one partial row per chunk (in `*partials`, to free), merged by
 * `merge` after the threads join. */
static int make_chunks(job *j, int64_t count, const int64_t *sizes, double **partials)
{
  int64_t n = 0, n_partial = 0;
  for (int64_t r = 0; r < count; r++) {
    int64_t k = sizes[r] <= CHUNK ? 1 : (sizes[r] + CHUNK - 1) / CHUNK;
    n += k;
    if (k > 1) n_partial += k;
  }
  chunk *chunks = (chunk *)malloc((size_t)(n ? n : 1) * sizeof(chunk));
  double *part = n_partial ? (double *)malloc((size_t)n_partial * j->width * sizeof(double)) : NULL;
  if (!chunks || (n_partial && !part)) { free(chunks); free(part); return -1; }
  int64_t i = 0, p = 0;
  for (int64_t r = 0; r < count; r++) {
    int64_t k = sizes[r] <= CHUNK ? 1 : (sizes[r] + CHUNK - 1) / CHUNK;
    for (int64_t q = 0; q < k; q++, i++) {
      chunks[i].row = r;
      chunks[i].start = q * CHUNK;
      chunks[i].length = q + 1 < k ? CHUNK : sizes[r] - q * CHUNK;
      chunks[i].partial = k == 1 ? NULL : part + (p++) * j->width;
    }
  }
  j->chunks = chunks;
  j->n_chunks = n;
  *partials = part;
  return 0;
}

enum { MERGE_ADD = 0, MERGE_MIN = 1, MERGE_MAX = 2 };

/* Fold the partial rows of each split row, columns [lo, hi) (ops[i] says
 * how), into the job's row, or without rows into the row's first partial,
 * then finish it. */
static void merge(const job *j, int lo, int hi, const char *ops)
{
  double *row = NULL;
  for (int64_t k = 0; k < j->n_chunks; k++) {
    const chunk *c = &j->chunks[k];
    if (!c->partial) continue;
    if (c->start == 0) { /* a row's chunks come in order */
      row = j->rows ? j->rows + c->row * j->width : c->partial;
      if (j->rows) memcpy(row + lo, c->partial + lo, (size_t)(hi - lo) * sizeof(double));
    } else {
      for (int i = lo; i < hi; i++) {
        double v = c->partial[i];
        if (ops[i] == MERGE_MIN) row[i] = v < row[i] ? v : row[i];
        else if (ops[i] == MERGE_MAX) row[i] = v > row[i] ? v : row[i];
        else row[i] += v;
      }
    }
    if (!j->rows && (k + 1 == j->n_chunks || j->chunks[k + 1].start == 0)) j->finish(j, c->row, row);
  }
}

/* ------------------------------------------------------------------------
 * Gradient statistics.  Row: [sum, sum of squares, min, max] over finite
 * elements (float64; min +Inf and max -Inf when none), then the histogram
 * counts (bins: exponent e at e - min_exponent, then zero, +Inf, -Inf, NaN
 * from zero_bin on).
 * ---------------------------------------------------------------------- */

enum { GS_SUM, GS_SUMSQ, GS_MIN, GS_MAX, GS_HIST };

/* mask ? a : b, lane by lane (a macro: vector arguments change the ABI). */
#define SELECT8(mask, a, b) ((v8f)((((v8i)(a)) & (mask)) | (((v8i)(b)) & ~(mask))))

/* Sum, sum of squares (float64), min and max of a block, all elements;
 * returns the number of exact zeros (+0 and -0). */
VECTOR_CLONES
static int64_t block_values(const float *x, int64_t m, double *row)
{
  v4d s0 = {0, 0, 0, 0}, s1 = s0, q0 = s0, q1 = s0;
  float lo = (float)row[GS_MIN], hi = (float)row[GS_MAX];
  v8f vlo = {lo, lo, lo, lo, lo, lo, lo, lo}, vhi = {hi, hi, hi, hi, hi, hi, hi, hi};
  const v8f zero = {0, 0, 0, 0, 0, 0, 0, 0};
  v8i vzeros = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0, zeros = 0;
  for (; i + 8 <= m; i += 8) {
    v8f f;
    memcpy(&f, x + i, sizeof f);
    v4d a = {f[0], f[1], f[2], f[3]}, b = {f[4], f[5], f[6], f[7]};
    s0 += a; s1 += b; q0 += a * a; q1 += b * b;
    vlo = SELECT8(f < vlo, f, vlo);
    vhi = SELECT8(f > vhi, f, vhi);
    vzeros -= f == zero;
  }
  double s = 0, q = 0;
  for (; i < m; i++) {
    double d = x[i];
    s += d; q += d * d;
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
    zeros += x[i] == 0;
  }
  for (int k = 0; k < 4; k++) { s += s0[k] + s1[k]; q += q0[k] + q1[k]; }
  for (int k = 0; k < 8; k++) { lo = vlo[k] < lo ? vlo[k] : lo; hi = vhi[k] > hi ? vhi[k] : hi; zeros += vzeros[k]; }
  row[GS_SUM] += s; row[GS_SUMSQ] += q; row[GS_MIN] = lo; row[GS_MAX] = hi;
  return zeros;
}

/* Counts per sign-and-exponent field (four copies: runs of equal fields
 * do not wait on each other's stores). */
static void block_fields(const uint32_t *b, int64_t m, uint32_t fields[4][FIELDS])
{
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) {
    fields[0][b[i] >> F32_MANTISSA_BITS]++; fields[1][b[i + 1] >> F32_MANTISSA_BITS]++;
    fields[2][b[i + 2] >> F32_MANTISSA_BITS]++; fields[3][b[i + 3] >> F32_MANTISSA_BITS]++;
  }
  for (; i < m; i++) fields[0][b[i] >> F32_MANTISSA_BITS]++;
}

static inline int floor_log2(uint32_t x) { return 31 - __builtin_clz(x); }

/* The exact histogram bin of one float32. */
static inline int exact_bin(const job *j, uint32_t u)
{
  uint32_t field = (u >> F32_MANTISSA_BITS) & F32_FIELD_MAX, mantissa = u & F32_MANTISSA_MASK;
  if (field == F32_FIELD_MAX) return j->zero_bin + (mantissa ? 3 : ((u >> 31) ? 2 : 1));
  if (field == 0) return mantissa ? floor_log2(mantissa) + F32_MIN_SUBNORMAL - j->min_exponent : j->zero_bin;
  return (int)field - F32_BIAS - j->min_exponent;
}

/* Every element the exact way: small chunks and chunks with rare values. */
static void chunk_exact(const job *j, const chunk *c, double *row, int histogram, int values)
{
  uint32_t buffer[BLOCK];
  const void *data = j->a[c->row];
  int dtype = j->a_dtypes[c->row];
  double *hist = row + GS_HIST;
  int64_t end = c->start + c->length;
  for (int64_t s = c->start; s < end; s += BLOCK) {
    int64_t m = end - s < BLOCK ? end - s : BLOCK;
    const uint32_t *b = buffer;
    if (dtype == GL_FLOAT32) b = (const uint32_t *)data + s;
    else to_float32_bits(data, dtype, s, m, buffer);
    for (int64_t i = 0; i < m; i++) {
      uint32_t u = b[i];
      if (histogram) {
        uint32_t field = (u >> F32_MANTISSA_BITS) & F32_FIELD_MAX;
        if (histogram == 2 || field == 0 || field == F32_FIELD_MAX) hist[exact_bin(j, u)] += 1;
      }
      if (values && finite32(u)) {
        float f = float_of(u);
        row[GS_SUM] += (double)f;
        row[GS_SUMSQ] += (double)f * f;
        if (f < row[GS_MIN]) row[GS_MIN] = f;
        if (f > row[GS_MAX]) row[GS_MAX] = f;
      }
    }
  }
}

#define SMALL 512

static void gradient_chunk(const job *j, const chunk *c, double *row)
{
  memset(row, 0, (size_t)j->width * sizeof(double));
  row[GS_MIN] = INFINITY;
  row[GS_MAX] = -INFINITY;
  if (c->length < SMALL) { chunk_exact(j, c, row, 2, 1); return; }
  uint32_t fields[4][FIELDS];
  uint32_t buffer[BLOCK];
  const void *data = j->a[c->row];
  int dtype = j->a_dtypes[c->row];
  double *hist = row + GS_HIST;
  int64_t zeros = 0, end = c->start + c->length;
  memset(fields, 0, sizeof fields);
  for (int64_t s = c->start; s < end; s += BLOCK) {
    int64_t m = end - s < BLOCK ? end - s : BLOCK;
    const uint32_t *b = buffer;
    if (dtype == GL_FLOAT32) b = (const uint32_t *)data + s;
    else to_float32_bits(data, dtype, s, m, buffer);
    block_fields(b, m, fields);
    zeros += block_values((const float *)b, m, row);
  }
  int64_t field0 = 0, field255 = 0;
  for (int f = 0; f < FIELDS; f++) {
    int64_t n = (int64_t)fields[0][f] + fields[1][f] + fields[2][f] + fields[3][f];
    if (!n) continue;
    int field = f & F32_FIELD_MAX;
    if (field == 0) field0 += n;
    else if (field == F32_FIELD_MAX) field255 += n;
    else hist[field - F32_BIAS - j->min_exponent] += (double)n;
  }
  if (field0 == zeros && field255 == 0) { hist[j->zero_bin] += (double)zeros; return; }
  /* Rare values: subnormals need their bins; Inf and NaN their own bins
   * and value sums without them. */
  if (field255) {
    row[GS_SUM] = row[GS_SUMSQ] = 0;
    row[GS_MIN] = INFINITY;
    row[GS_MAX] = -INFINITY;
  }
  chunk_exact(j, c, row, 1, field255 != 0);
}

static void gradient_finish(const job *j, int64_t row, const double *raw);

static int gradient_statistics(job *j, int64_t count, const int64_t *sizes, int32_t threads)
{
  double *partials = NULL;
  j->run = gradient_chunk;
  j->finish = gradient_finish;
  j->width = GS_HIST + j->n_bins;
  if (make_chunks(j, count, sizes, &partials)) return -1;
  run_threads(j, threads);
  char *ops = (char *)calloc((size_t)j->width, 1);
  if (!ops) { free(j->chunks); free(partials); return -1; }
  ops[GS_MIN] = MERGE_MIN;
  ops[GS_MAX] = MERGE_MAX;
  fp_mode mode = keep_denormals(); /* a subnormal min must not flush when narrowed */
  merge(j, 0, j->width, ops);
  restore_mode(mode);
  free(ops);
  free(j->chunks);
  free(partials);
  return j->failed ? -1 : 0;
}

/* ------------------------------------------------------------------------
 * Divergence of a candidate c from a reference r, over the elements where
 * both are finite.  Row: [n, sum r^2, sum d^2, sum c^2, sum c*r,
 * sum (d / spacing)^2, max |d|, max rel, #significant, #sign flips,
 * #flushed, #non-finite] with d = c - r, floor = floor_fraction *
 * sqrt(sum r^2 / n), spacing = 2^max(max(floor(log2 max(|r|, floor)),
 * min_normal) - p, -1022), rel = |d| / max(|r|, floor) (0 when d = 0,
 * Inf when only the denominator is 0), significant: |r| > floor.
 * implicit_zeros (or NULL): per pair, how many pairs (0, 0) the arrays
 * leave out (the rows two IndexedSlices gradients do not name); they add
 * to n and nothing else.
 * ---------------------------------------------------------------------- */

enum { DV_N, DV_SUM_R2, DV_SUM_D2, DV_SUM_C2, DV_SUM_CR, DV_SUM_ULP2, DV_MAX_ABS, DV_MAX_REL,
       DV_SIGNIFICANT, DV_FLIPPED, DV_FLUSHED, DV_NONFINITE, DV_WIDTH };

static inline int sign_of(double x) { return (x > 0) - (x < 0); }

/* 2^-k for the spacing exponent k of `floored` (>= 0, finite). */
static inline double inverse_spacing(double floored, int p, int min_normal)
{
  uint64_t bits;
  memcpy(&bits, &floored, 8);
  int e = (int)((bits >> F64_MANTISSA_BITS) & F64_FIELD_MAX) - F64_BIAS;
  int k = (e > min_normal ? e : min_normal) - p;
  if (k < 1 - F64_BIAS) k = 1 - F64_BIAS;  /* the smallest normal float64 */
  uint64_t inverse = (uint64_t)(F64_BIAS - k) << F64_MANTISSA_BITS;
  double out;
  memcpy(&out, &inverse, 8);
  return out;
}

/* Elements [s, s + BLOCK) of a chunk's candidate and reference, widened
 * to float64; returns how many (0 past the chunk's end). */
static int64_t pair_block(const job *j, const chunk *c, int64_t s, double *cb, double *rb)
{
  int64_t end = c->start + c->length, m = end - s < BLOCK ? end - s : BLOCK;
  if (m <= 0) return 0;
  to_float64(j->a[c->row], j->a_dtypes[c->row], s, m, cb);
  to_float64(j->b[c->row], j->b_dtypes[c->row], s, m, rb);
  return m;
}

typedef int64_t v4l __attribute__((vector_size(32)));
typedef uint64_t v4ul __attribute__((vector_size(32)));
#define SELECT4(mask, a, b) ((v4d)((((v4l)(a)) & (mask)) | (((v4l)(b)) & ~(mask))))
#define F64_EXPONENT_MASK ((int64_t)F64_FIELD_MAX << F64_MANTISSA_BITS)

/* Lanes where both values are finite (all ones), else 0; e: the exponent masks. */
#define BOTH_FINITE(c, r, e) ((((v4l)(c) & (e)) != (e)) & (((v4l)(r) & (e)) != (e)))

VECTOR_CLONES
static void norms_block(const double *cb, const double *rb, int64_t m, double *n, double *sum_r2)
{
  const v4l exponent = {F64_EXPONENT_MASK, F64_EXPONENT_MASK, F64_EXPONENT_MASK, F64_EXPONENT_MASK};
  v4l count = {0, 0, 0, 0};
  v4d q = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) {
    v4d c, r;
    memcpy(&c, cb + i, sizeof c);
    memcpy(&r, rb + i, sizeof r);
    v4l fin = BOTH_FINITE(c, r, exponent);
    r = (v4d)((v4l)r & fin);
    count -= fin;
    q += r * r;
  }
  double nn = 0, qq = 0;
  for (; i < m; i++) {
    if (!isfinite(cb[i]) || !isfinite(rb[i])) continue;
    nn += 1;
    qq += rb[i] * rb[i];
  }
  for (int k = 0; k < 4; k++) { nn += (double)count[k]; qq += q[k]; }
  *n += nn;
  *sum_r2 += qq;
}

/* norms_block for a float32 reference and a candidate as float32 bits:
 * the same sums in the same order, without widening the candidate. */
VECTOR_CLONES
static void norms_block_f32(const uint32_t *cb, const float *rb, int64_t m, double *n, double *sum_r2)
{
  const v8i exponent = {F32_EXPONENT_MASK, F32_EXPONENT_MASK, F32_EXPONENT_MASK, F32_EXPONENT_MASK,
                        F32_EXPONENT_MASK, F32_EXPONENT_MASK, F32_EXPONENT_MASK, F32_EXPONENT_MASK};
  v8i count = {0, 0, 0, 0, 0, 0, 0, 0};
  v4d q = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= m; i += 8) {
    v8i c, r;
    memcpy(&c, cb + i, sizeof c);
    memcpy(&r, rb + i, sizeof r);
    v8i fin = ((c & exponent) != exponent) & ((r & exponent) != exponent);
    v8f kept = (v8f)(r & fin);
    v4d lo = {kept[0], kept[1], kept[2], kept[3]}, hi = {kept[4], kept[5], kept[6], kept[7]};
    count -= fin;
    q += lo * lo;
    q += hi * hi;
  }
  double nn = 0, qq = 0;
  for (; i + 4 <= m; i += 4) {  /* as norms_block's lanes take them */
    for (int k = 0; k < 4; k++) {
      int fin = finite32(cb[i + k]) && finite32(bits_of(rb[i + k]));
      double r = fin ? (double)rb[i + k] : 0.0;
      nn += fin;
      q[k] += r * r;
    }
  }
  for (; i < m; i++) {
    if (!finite32(cb[i]) || !finite32(bits_of(rb[i]))) continue;
    nn += 1;
    qq += (double)rb[i] * rb[i];
  }
  for (int k = 0; k < 8; k++) nn += (double)count[k];
  for (int k = 0; k < 4; k++) qq += q[k];
  *n += nn;
  *sum_r2 += qq;
}

static void divergence_norms(const job *j, const chunk *c, double *row)
{
  double n = 0, sum_r2 = 0;
  int64_t m, end = c->start + c->length;
  int c_dtype = j->a_dtypes[c->row];
  if (j->b_dtypes[c->row] == GL_FLOAT32 && c_dtype != GL_FLOAT64) {  /* the common case: no widening */
    uint32_t bits[BLOCK];
    const float *r = (const float *)j->b[c->row];
    for (int64_t s = c->start; s < end; s += BLOCK) {
      m = end - s < BLOCK ? end - s : BLOCK;
      const uint32_t *cbits = bits;
      if (c_dtype == GL_FLOAT32) cbits = (const uint32_t *)j->a[c->row] + s;
      else to_float32_bits(j->a[c->row], c_dtype, s, m, bits);
      norms_block_f32(cbits, r + s, m, &n, &sum_r2);
    }
  } else {
    double cb[BLOCK], rb[BLOCK];
    for (int64_t s = c->start; (m = pair_block(j, c, s, cb, rb)) > 0; s += BLOCK)
      norms_block(cb, rb, m, &n, &sum_r2);
  }
  row[DV_N] = n;
  row[DV_SUM_R2] = sum_r2;
}

/* What pass 2 accumulates over a chunk. */
typedef struct {
  double sum_d2, sum_c2, sum_cr, sum_u2, max_abs;
  double rel_num, rel_den;  /* the largest |d| / max(|r|, floor) so far, as a fraction */
  int64_t significant, flipped, flushed, nonfinite;
} divergence_acc;

/* rel_num / rel_den < num / den, without dividing (all >= 0; den 0 is Inf). */
static inline void keep_larger_fraction(divergence_acc *a, double num, double den)
{
  if (num * a->rel_den > a->rel_num * den) { a->rel_num = num; a->rel_den = den; }
}

/* One element, as the vector loop below computes four. */
static inline void divergence_element(divergence_acc *a, double cv, double rv, double floor, int p, int min_normal)
{
  if (!isfinite(cv) || !isfinite(rv)) { a->nonfinite++; return; }
  double d = cv - rv, ad = fabs(d), ar = fabs(rv);
  double floored = ar > floor ? ar : floor;
  double ulps = d * inverse_spacing(floored, p, min_normal);
  a->sum_d2 += d * d; a->sum_c2 += cv * cv; a->sum_cr += cv * rv; a->sum_u2 += ulps * ulps;
  if (ad > a->max_abs) a->max_abs = ad;
  keep_larger_fraction(a, ad, floored);
  int is_significant = ar > floor;
  a->significant += is_significant;
  a->flipped += is_significant & (sign_of(cv) != sign_of(rv));
  a->flushed += (rv != 0) & (cv == 0);
}

/* Four lanes at a time: non-finite pairs are zeroed (they add nothing to
 * any sum, maximum or count but nonfinite).  The spacing 2^-k of each
 * floored |r| comes from the exponent field of max(|r|, floor, 2^e_low)
 * (inverse_spacing's clamps folded into one maximum: e_low =
 * max(min_normal, p + 1 - F64_BIAS)); a significant r is nonzero, so its
 * sign differs from c's when c is zero or their sign bits differ. */
VECTOR_CLONES
static void divergence_block(divergence_acc *a, const double *cb, const double *rb, int64_t m, double floor, int p,
                             int min_normal)
{
  int e_low = min_normal > p + 1 - F64_BIAS ? min_normal : p + 1 - F64_BIAS;
  double spacing_floor = ldexp(1.0, e_low);
  spacing_floor = floor <= spacing_floor ? spacing_floor : floor;  /* a NaN floor stays NaN */
  const v4d zero = {0, 0, 0, 0}, vfloor = {floor, floor, floor, floor};
  const v4d vlow = {spacing_floor, spacing_floor, spacing_floor, spacing_floor};
  const v4l sign = {INT64_MIN, INT64_MIN, INT64_MIN, INT64_MIN};
  const v4l izero = {0, 0, 0, 0};
  const v4l exponent = {F64_EXPONENT_MASK, F64_EXPONENT_MASK, F64_EXPONENT_MASK, F64_EXPONENT_MASK};
  const int64_t top = 2 * F64_BIAS + p;
  const v4l vtop = {top, top, top, top};
  v4d d2 = zero, c2 = zero, cr = zero, u2 = zero, max_abs = zero, num = zero, den = {1, 1, 1, 1};
  v4l significant = izero, flipped = izero, flushed = izero, nonfinite = izero;
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) {
    v4d c, r;
    memcpy(&c, cb + i, sizeof c);
    memcpy(&r, rb + i, sizeof r);
    v4l fin = BOTH_FINITE(c, r, exponent);
    nonfinite -= ~fin;
    c = (v4d)((v4l)c & fin);
    r = (v4d)((v4l)r & fin);
    v4d d = c - r;
    v4d ad = (v4d)((v4l)d & ~sign), ar = (v4d)((v4l)r & ~sign);
    v4l above = ar > vfloor;
    v4d floored = SELECT4(above, ar, vfloor);
    v4d spaced = SELECT4(ar > vlow, ar, vlow);
    v4d inverse = (v4d)((vtop - (v4l)((v4ul)spaced >> F64_MANTISSA_BITS)) << F64_MANTISSA_BITS);
    v4d ulps = d * inverse;
    d2 += d * d; c2 += c * c; cr += c * r; u2 += ulps * ulps;
    max_abs = SELECT4(ad > max_abs, ad, max_abs);
    v4l larger = ad * den > num * floored;
    num = SELECT4(larger, ad, num);
    den = SELECT4(larger, floored, den);
    significant -= above;
    v4l c_zero = c == zero;
    flipped -= above & (c_zero | (((v4l)c ^ (v4l)r) < izero));
    flushed -= (r != zero) & c_zero;
  }
  for (int q = 0; q < 4; q++) {
    a->sum_d2 += d2[q]; a->sum_c2 += c2[q]; a->sum_cr += cr[q]; a->sum_u2 += u2[q];
    if (max_abs[q] > a->max_abs) a->max_abs = max_abs[q];
    keep_larger_fraction(a, num[q], den[q]);
    a->significant += significant[q]; a->flipped += flipped[q];
    a->flushed += flushed[q]; a->nonfinite += nonfinite[q];
  }
  for (; i < m; i++) divergence_element(a, cb[i], rb[i], floor, p, min_normal);
}

static void divergence_rest(const job *j, const chunk *c, double *row)
{
  double cb[BLOCK], rb[BLOCK];
  divergence_acc a;
  memset(&a, 0, sizeof a);
  a.rel_den = 1;
  const double *full = j->rows + c->row * j->width; /* n and sum r^2, merged */
  double floor = j->floor_fraction * sqrt(full[DV_SUM_R2] / (full[DV_N] > 0 ? full[DV_N] : 1));
  int p = j->mantissa_bits[c->row], min_normal = j->min_normal[c->row];
  int64_t m;
  for (int64_t s = c->start; (m = pair_block(j, c, s, cb, rb)) > 0; s += BLOCK)
    divergence_block(&a, cb, rb, m, floor, p, min_normal);
  row[DV_SUM_D2] = a.sum_d2; row[DV_SUM_C2] = a.sum_c2; row[DV_SUM_CR] = a.sum_cr; row[DV_SUM_ULP2] = a.sum_u2;
  row[DV_MAX_ABS] = a.max_abs;
  row[DV_MAX_REL] = a.rel_den > 0 ? a.rel_num / a.rel_den : (a.rel_num > 0 ? INFINITY : 0.0);
  row[DV_SIGNIFICANT] = (double)a.significant; row[DV_FLIPPED] = (double)a.flipped;
  row[DV_FLUSHED] = (double)a.flushed; row[DV_NONFINITE] = (double)a.nonfinite;
}

static int divergence_sums(int64_t count, const void *const *candidates, const int32_t *candidate_dtypes,
                       const void *const *references, const int32_t *reference_dtypes, const int64_t *sizes,
                       const double *implicit_zeros, const int32_t *mantissa_bits, const int32_t *min_normal,
                       double floor_fraction, double *rows, int32_t threads)
{
  job j;
  double *partials = NULL;
  char ops[DV_WIDTH] = {0};
  memset(&j, 0, sizeof j);
  j.a = candidates; j.a_dtypes = candidate_dtypes;
  j.b = references; j.b_dtypes = reference_dtypes;
  j.mantissa_bits = mantissa_bits; j.min_normal = min_normal;
  j.floor_fraction = floor_fraction;
  j.width = DV_WIDTH;
  j.rows = rows;
  if (make_chunks(&j, count, sizes, &partials)) return -1;
  j.run = divergence_norms;        /* pass 1: the floor needs rms(r) */
  run_threads(&j, threads);
  merge(&j, DV_N, DV_SUM_R2 + 1, ops);
  for (int64_t r = 0; implicit_zeros && r < count; r++)  /* zero pairs not passed: counted in n only */
    rows[r * DV_WIDTH + DV_N] += implicit_zeros[r];
  j.run = divergence_rest;         /* pass 2 */
  run_threads(&j, threads);
  ops[DV_MAX_ABS] = MERGE_MAX;
  ops[DV_MAX_REL] = MERGE_MAX;
  merge(&j, DV_SUM_D2, DV_WIDTH, ops);
  free(j.chunks);
  free(partials);
  return 0;
}

/* ------------------------------------------------------------------------
 * Update statistics of weights before -> after (same dtype), optional
 * gradient.  Row: [n, sum u^2, sum before^2, lost] with u = after - before
 * (float64); lost counts, for weights wider than bfloat16, the elements
 * whose bits changed but whose bfloat16 rounding did not; for bfloat16
 * weights, those with a finite nonzero gradient whose value did not change
 * (NaN without a gradient).  "Equal" compares bits, +0 == -0.
 * ---------------------------------------------------------------------- */

enum { UP_N, UP_SUM_U2, UP_SUM_B2, UP_LOST, UP_WIDTH };

/* float32 bits -> bfloat16 bits, round to nearest even (NaN -> quiet NaN),
 * as TensorFlow's cast rounds. */
static inline uint16_t bfloat16_of(uint32_t u)
{
  const uint32_t half = 1u << (NARROW_SHIFT - 1);
  if ((u & 0x7fffffffu) > F32_EXPONENT_MASK) return (uint16_t)(((u >> NARROW_SHIFT) & 0x8000u) | 0x7fc0u);
  return (uint16_t)((u + (half - 1) + ((u >> NARROW_SHIFT) & 1u)) >> NARROW_SHIFT);
}

static inline uint64_t raw_bits(const void *data, int dtype, int64_t i)
{
  if (dtype == GL_FLOAT32) return ((const uint32_t *)data)[i];
  if (dtype == GL_FLOAT64) return ((const uint64_t *)data)[i];
  return ((const uint16_t *)data)[i];
}

static inline uint64_t magnitude_mask(int dtype)
{
  return dtype == GL_FLOAT32 ? 0x7fffffffull : dtype == GL_FLOAT64 ? 0x7fffffffffffffffull : 0x7fffull;
}

static inline int same_value(uint64_t x, uint64_t y, uint64_t mask)
{
  return x == y || ((x & mask) == 0 && (y & mask) == 0);
}

/* Float32 weights (the usual case): sum u^2 and sum before^2 in float64
 * vectors, and the lost count from the bits, branch-free.  The same sums
 * as the general loop below, in a different order (float64 sums of
 * float32 squares: the difference is rounding of the float64 sums). */
VECTOR_CLONES
static void update_block_f32(const float *b, const float *a, int64_t m, double *out)
{
  v4d u0 = {0, 0, 0, 0}, u1 = u0, q0 = u0, q1 = u0;
  int64_t i = 0;
  for (; i + 8 <= m; i += 8) {
    v8f fb, fa;
    memcpy(&fb, b + i, sizeof fb);
    memcpy(&fa, a + i, sizeof fa);
    v4d b0 = {fb[0], fb[1], fb[2], fb[3]}, b1 = {fb[4], fb[5], fb[6], fb[7]};
    v4d a0 = {fa[0], fa[1], fa[2], fa[3]}, a1 = {fa[4], fa[5], fa[6], fa[7]};
    v4d d0 = a0 - b0, d1 = a1 - b1;
    u0 += d0 * d0; u1 += d1 * d1; q0 += b0 * b0; q1 += b1 * b1;
  }
  double su = 0, sq = 0;
  for (; i < m; i++) {
    double d = (double)a[i] - (double)b[i];
    su += d * d; sq += (double)b[i] * (double)b[i];
  }
  for (int k = 0; k < 4; k++) { su += u0[k] + u1[k]; sq += q0[k] + q1[k]; }
  const uint32_t *bb = (const uint32_t *)b, *ab = (const uint32_t *)a;
  const uint32_t half = 1u << (NARROW_SHIFT - 1);
  int64_t lost = 0;
  for (i = 0; i < m; i++) {
    uint32_t x = bb[i], y = ab[i];
    int changed = x != y && ((x | y) & 0x7fffffffu) != 0;
    /* bfloat16_of without the branch (NaN -> quiet NaN) */
    uint32_t rx = (x + (half - 1) + ((x >> NARROW_SHIFT) & 1u)) >> NARROW_SHIFT;
    uint32_t ry = (y + (half - 1) + ((y >> NARROW_SHIFT) & 1u)) >> NARROW_SHIFT;
    rx = (x & 0x7fffffffu) > F32_EXPONENT_MASK ? (((x >> NARROW_SHIFT) & 0x8000u) | 0x7fc0u) : (rx & 0xffffu);
    ry = (y & 0x7fffffffu) > F32_EXPONENT_MASK ? (((y >> NARROW_SHIFT) & 0x8000u) | 0x7fc0u) : (ry & 0xffffu);
    int same16 = rx == ry || ((rx | ry) & 0x7fffu) == 0;
    lost += changed & same16;
  }
  out[0] += su; out[1] += sq; out[2] += (double)lost;
}

static void update_chunk(const job *j, const chunk *c, double *row)
{
  if (j->a_dtypes[c->row] == GL_FLOAT32) {
    const float *before = (const float *)j->a[c->row], *after = (const float *)j->b[c->row];
    double sums[3] = {0, 0, 0};
    for (int64_t s = c->start; s < c->start + c->length; s += BLOCK) {
      int64_t m = c->start + c->length - s < BLOCK ? c->start + c->length - s : BLOCK;
      update_block_f32(before + s, after + s, m, sums);
    }
    row[UP_N] = (double)c->length;
    row[UP_SUM_U2] = sums[0];
    row[UP_SUM_B2] = sums[1];
    row[UP_LOST] = sums[2];
    return;
  }
  double bb[BLOCK], ab[BLOCK], gb[BLOCK];
  uint32_t b32[BLOCK], a32[BLOCK];
  const void *before = j->a[c->row], *after = j->b[c->row], *grad = j->c[c->row];
  int dtype = j->a_dtypes[c->row], grad_dtype = j->c_dtypes[c->row];
  uint64_t mask = magnitude_mask(dtype);
  double sum_u2 = 0, sum_b2 = 0, lost = 0;
  int64_t end = c->start + c->length;
  for (int64_t s = c->start; s < end; s += BLOCK) {
    int64_t m = end - s < BLOCK ? end - s : BLOCK;
    to_float64(before, dtype, s, m, bb);
    to_float64(after, dtype, s, m, ab);
    for (int64_t i = 0; i < m; i++) {
      double u = ab[i] - bb[i];
      sum_u2 += u * u;
      sum_b2 += bb[i] * bb[i];
    }
    if (dtype == GL_BFLOAT16) {
      if (grad_dtype == GL_NONE) continue;
      to_float64(grad, grad_dtype, s, m, gb);
      for (int64_t i = 0; i < m; i++)
        lost += isfinite(gb[i]) && gb[i] != 0 && same_value(raw_bits(before, dtype, s + i), raw_bits(after, dtype, s + i), mask);
    } else {
      to_float32_bits(before, dtype, s, m, b32);
      to_float32_bits(after, dtype, s, m, a32);
      for (int64_t i = 0; i < m; i++)
        lost += !same_value(raw_bits(before, dtype, s + i), raw_bits(after, dtype, s + i), mask)
                && same_value(bfloat16_of(b32[i]), bfloat16_of(a32[i]), 0x7fffu);
    }
  }
  row[UP_N] = (double)c->length;
  row[UP_SUM_U2] = sum_u2;
  row[UP_SUM_B2] = sum_b2;
  row[UP_LOST] = dtype == GL_BFLOAT16 && grad_dtype == GL_NONE ? NAN : lost;
}

static int update_sums(int64_t count, const void *const *before, const void *const *after, const int32_t *dtypes,
                   const void *const *gradients, const int32_t *gradient_dtypes, const int64_t *sizes,
                   double *rows, int32_t threads)
{
  job j;
  double *partials = NULL;
  char ops[UP_WIDTH] = {0};
  memset(&j, 0, sizeof j);
  j.run = update_chunk;
  j.a = before; j.a_dtypes = dtypes;
  j.b = after; j.b_dtypes = dtypes;
  j.c = gradients; j.c_dtypes = gradient_dtypes;
  j.width = UP_WIDTH;
  j.rows = rows;
  if (make_chunks(&j, count, sizes, &partials)) return -1;
  run_threads(&j, threads);
  merge(&j, 0, UP_WIDTH, ops);
  free(j.chunks);
  free(partials);
  return 0;
}

/* ------------------------------------------------------------------------
 * Columns from raw sums (formulas: gradient_stats.py, divergence.py,
 * updates.py), and the exported entry points.
 * ---------------------------------------------------------------------- */

static inline double per(double total, double n) { return n > 0 ? total / n : NAN; }
static inline double nan_max(double a, double b) { return (isnan(a) || isnan(b)) ? NAN : (a > b ? a : b); }

/* grad_stats columns: l2_norm, mean, std, min, max, max_abs, rms,
 * zero_fraction, subnormal_fraction, nan_count, posinf_count, neginf_count,
 * count, is_none; the histogram gets the implicit zeros. */
enum { GRAD_STATS_COLUMNS = 14 };

static void gradient_columns(const double *row, double implicit, int32_t zero_bin, int32_t n_bins,
                             int32_t subnormal_bins, float *stats, float *hist)
{
  const double *h = row + GS_HIST;
  double n = 0, n_finite = 0, subnormal = 0;
  for (int b = 0; b < n_bins; b++) {
    double v = h[b] + (b == zero_bin ? implicit : 0.0);
    hist[b] = (float)v;
    n += v;
    if (b <= zero_bin) n_finite += v;
    if (b < subnormal_bins) subnormal += v;
  }
  double total = row[GS_SUM], squares = row[GS_SUMSQ], lo = row[GS_MIN], hi = row[GS_MAX];
  if (implicit > 0) { lo = lo < 0 ? lo : 0.0; hi = hi > 0 ? hi : 0.0; }
  double mean = per(total, n_finite), mean_sq = per(squares, n_finite);
  double var = mean_sq - mean * mean;
  if (!(n_finite > 0)) { lo = NAN; hi = NAN; }
  double out[GRAD_STATS_COLUMNS] = {
    sqrt(squares), mean, sqrt(var > 0 ? var : (isnan(var) ? NAN : 0.0)), lo, hi,
    nan_max(fabs(lo), fabs(hi)), sqrt(mean_sq),
    per(h[zero_bin] + implicit, n), per(subnormal, n),
    h[zero_bin + 3], h[zero_bin + 1], h[zero_bin + 2], n, 0.0,
  };
  for (int c = 0; c < GRAD_STATS_COLUMNS; c++) stats[c] = (float)out[c];
}

/* Returns 0, or -1 when memory ran out. */
static void gradient_finish(const job *j, int64_t row, const double *raw)
{
  gradient_columns(raw, j->implicit_zeros ? j->implicit_zeros[row] : 0.0, j->zero_bin, j->n_bins,
                   j->subnormal_bins, j->stats + row * GRAD_STATS_COLUMNS, j->hist + row * j->n_bins);
}

/* Returns 0, or -1 when memory ran out. */
int gl_gradient_statistics(int64_t count, const void *const *data, const int32_t *dtypes, const int64_t *sizes,
                           const double *implicit_zeros, int32_t min_exponent, int32_t zero_bin, int32_t n_bins,
                           int32_t subnormal_bins, float *stats, float *hist, int32_t threads)
{
  job j;
  memset(&j, 0, sizeof j);
  j.a = data;
  j.a_dtypes = dtypes;
  j.min_exponent = min_exponent;
  j.zero_bin = zero_bin;
  j.n_bins = n_bins;
  j.subnormal_bins = subnormal_bins;
  j.implicit_zeros = implicit_zeros;
  j.stats = stats;
  j.hist = hist;
  return gradient_statistics(&j, count, sizes, threads);
}

static double ratio_or(double numerator, double denominator, double if_only_denominator_zero, double if_both_zero)
{
  if (denominator > 0) return numerator / denominator;
  return numerator > 0 ? if_only_denominator_zero : if_both_zero;
}

/* divergence columns: rel_l2, cosine, norm_ratio, max_abs, max_rel,
 * ulp_rms, sign_flip, flush_to_zero, nonfinite. */
enum { DIVERGENCE_COLUMNS = 9 };

static void divergence_columns(const double *s, double *out)
{
  double n = s[DV_N];
  double cosine;
  if (s[DV_SUM_C2] > 0 && s[DV_SUM_R2] > 0) {
    cosine = s[DV_SUM_CR] / sqrt(s[DV_SUM_C2] * s[DV_SUM_R2]);
    cosine = cosine < -1 ? -1 : (cosine > 1 ? 1 : cosine);
  } else {
    cosine = (s[DV_SUM_C2] == 0 && s[DV_SUM_R2] == 0) ? 1.0 : 0.0;
  }
  double safe_n = n > 1 ? n : 1;
  double values[DIVERGENCE_COLUMNS - 1] = {
    ratio_or(sqrt(s[DV_SUM_D2]), sqrt(s[DV_SUM_R2]), INFINITY, 0.0), cosine,
    ratio_or(sqrt(s[DV_SUM_C2]), sqrt(s[DV_SUM_R2]), INFINITY, 1.0),
    s[DV_MAX_ABS], s[DV_MAX_REL], sqrt(s[DV_SUM_ULP2] / safe_n),
    s[DV_FLIPPED] / (s[DV_SIGNIFICANT] > 1 ? s[DV_SIGNIFICANT] : 1), s[DV_FLUSHED] / safe_n,
  };
  for (int c = 0; c < DIVERGENCE_COLUMNS - 1; c++) out[c] = n > 0 ? values[c] : NAN;
  out[DIVERGENCE_COLUMNS - 1] = s[DV_NONFINITE];
}

int gl_divergence_metrics(int64_t count, const void *const *candidates, const int32_t *candidate_dtypes,
                          const void *const *references, const int32_t *reference_dtypes, const int64_t *sizes,
                          const double *implicit_zeros, const int32_t *mantissa_bits, const int32_t *min_normal,
                          double floor_fraction, double *metrics, int32_t threads)
{
  double *rows = (double *)malloc((size_t)(count ? count : 1) * DV_WIDTH * sizeof(double));
  if (!rows) return -1;
  int result = divergence_sums(count, candidates, candidate_dtypes, references, reference_dtypes, sizes,
                               implicit_zeros, mantissa_bits, min_normal, floor_fraction, rows, threads);
  fp_mode mode = keep_denormals();
  for (int64_t r = 0; result == 0 && r < count; r++)
    divergence_columns(rows + r * DV_WIDTH, metrics + r * DIVERGENCE_COLUMNS);
  restore_mode(mode);
  free(rows);
  return result;
}

/* update columns: update_rms, update_ratio (1 for weights that were all zero), lost_update_bf16. */
enum { UPDATE_COLUMNS = 3 };

int gl_update_statistics(int64_t count, const void *const *before, const void *const *after, const int32_t *dtypes,
                         const void *const *gradients, const int32_t *gradient_dtypes, const int64_t *sizes,
                         float *out, int32_t threads)
{
  double *rows = (double *)malloc((size_t)(count ? count : 1) * UP_WIDTH * sizeof(double));
  if (!rows) return -1;
  int result = update_sums(count, before, after, dtypes, gradients, gradient_dtypes, sizes, rows, threads);
  fp_mode mode = keep_denormals();
  for (int64_t r = 0; result == 0 && r < count; r++) {
    const double *s = rows + r * UP_WIDTH;
    double n = s[UP_N], safe_n = n > 1 ? n : 1;
    double values[UPDATE_COLUMNS] = {
      sqrt(s[UP_SUM_U2] / safe_n), ratio_or(sqrt(s[UP_SUM_U2]), sqrt(s[UP_SUM_B2]), 1.0, 0.0),
      s[UP_LOST] / safe_n,
    };
    for (int c = 0; c < UPDATE_COLUMNS; c++) out[r * UPDATE_COLUMNS + c] = (float)(n > 0 ? values[c] : NAN);
  }
  restore_mode(mode);
  free(rows);
  return result;
}

/* The float32 layout this file assumes: mantissa bits, bias, exponent of
 * the smallest subnormal (kernel.py compares them with float_formats). */
void gl_float32_layout(int32_t *out)
{
  out[0] = F32_MANTISSA_BITS;
  out[1] = F32_BIAS;
  out[2] = F32_MIN_SUBNORMAL;
}
