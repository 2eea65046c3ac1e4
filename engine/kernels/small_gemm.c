/* out[M, N] = x[M, K] @ w[K, N] for a few rows (a decode batch), w input-major: the engine's
 * fast path stores its weights that way (engine/model/fast/projection.py).
 *
 * MKL's sgemm reads a wide weight at a fraction of the memory's rate when x has 2-8 rows (a
 * [8, 512] x [512, 1552] product ran at 5.7 GB/s against 15.4 for one row, on an Intel Xeon VM).
 * Here the weight streams through once, row after row, KB rows at a time held in vector
 * registers, and every row of x accumulates its share into `out`, which stays in cache: 12-13
 * GB/s at 8 rows on the same machine. Which products take this path is decided by measurement
 * (engine/kernels/cpu.py, benchmarks/decode_paths.py). With two threads or more the columns are
 * shared out (OpenMP, torch's own runtime).
 */
#include <stdint.h>

#ifdef __AVX512F__
#define VW 16 /* floats a vector; 16 registers of weight rows, 32 zmm in all */
#define KB 16
#else
#define VW 8 /* 8 ymm registers of weight rows of 16 (AVX2) */
#define KB 8
#endif
typedef float vf __attribute__((vector_size(VW * 4), aligned(4), may_alias));

/* out[:, j0:j1] of the product; j0 and j1 multiples of VW, or j1 = n */
static void columns(int64_t m, int64_t k, int64_t n, const float *x, int64_t ldx, const float *w, int64_t ldw,
                    float *out, int64_t ldo, int64_t j0, int64_t j1) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = j0; j < j1; j++) out[i * ldo + j] = 0.0f;
    const int64_t nv = j0 + (j1 - j0) / VW * VW;
    int64_t k0 = 0;
    for (; k0 + KB <= k; k0 += KB) {
        const float *wr = w + k0 * ldw;
        for (int64_t j = j0; j < nv; j += VW) {
            vf wv[KB];
            for (int r = 0; r < KB; r++) wv[r] = *(const vf *)(wr + r * ldw + j);
            for (int64_t i = 0; i < m; i++) {
                const float *xi = x + i * ldx + k0;
                vf acc = *(vf *)(out + i * ldo + j);
                for (int r = 0; r < KB; r++) acc += xi[r] * wv[r];
                *(vf *)(out + i * ldo + j) = acc;
            }
        }
        for (int64_t j = nv; j < j1; j++)
            for (int64_t i = 0; i < m; i++) {
                float acc = out[i * ldo + j];
                for (int r = 0; r < KB; r++) acc += x[i * ldx + k0 + r] * wr[r * ldw + j];
                out[i * ldo + j] = acc;
            }
    }
    for (; k0 < k; k0++) { /* the rows left over */
        const float *wr = w + k0 * ldw;
        for (int64_t i = 0; i < m; i++) {
            const float xv = x[i * ldx + k0];
            for (int64_t j = j0; j < j1; j++) out[i * ldo + j] += xv * wr[j];
        }
    }
}

/* `threads` threads each take a share of the columns (whole vectors): each column's sums are the
 * same whatever the share, so the result does not depend on the thread count. */
int small_gemm(int64_t m, int64_t k, int64_t n, const float *x, int64_t ldx, const float *w, int64_t ldw,
               float *out, int64_t ldo, int64_t threads) {
    const int64_t vectors = (n + VW - 1) / VW;
    if (threads > vectors) threads = vectors;
    if (threads < 1) threads = 1;
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int64_t t = 0; t < threads; t++) {
        const int64_t j0 = vectors * t / threads * VW, j1 = t + 1 == threads ? n : vectors * (t + 1) / threads * VW;
        columns(m, k, n, x, ldx, w, ldw, out, ldo, j0, j1);
    }
    return 0;
}
