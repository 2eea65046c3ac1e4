/* out[M, N] = x[M, K] @ w[K, N] for a few rows (a decode batch), w input-major: the engine's
 * fast decode path stores its weights that way (engine/model/fast_decode.py).
 *
 * MKL's sgemm reads a wide weight at a fraction of the memory's rate when x has 2-8 rows (a
 * [8, 512] x [512, 1552] product ran at 5.7 GB/s against 15.4 for one row, on an Intel Xeon VM).
 * Here the weight streams through once, row after row, KB rows at a time held in vector
 * registers, and every row of x accumulates its share into `out`, which stays in cache: 12-13
 * GB/s at 8 rows on the same machine. Which products take this path is decided by measurement
 * (engine/kernels/cpu.py, benchmarks/decode_paths.py).
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

int small_gemm(int64_t m, int64_t k, int64_t n, const float *x, int64_t ldx, const float *w, int64_t ldw,
               float *out, int64_t ldo) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) out[i * ldo + j] = 0.0f;
    const int64_t nv = n / VW * VW;
    int64_t k0 = 0;
    for (; k0 + KB <= k; k0 += KB) {
        const float *wr = w + k0 * ldw;
        for (int64_t j = 0; j < nv; j += VW) {
            vf wv[KB];
            for (int r = 0; r < KB; r++) wv[r] = *(const vf *)(wr + r * ldw + j);
            for (int64_t i = 0; i < m; i++) {
                const float *xi = x + i * ldx + k0;
                vf acc = *(vf *)(out + i * ldo + j);
                for (int r = 0; r < KB; r++) acc += xi[r] * wv[r];
                *(vf *)(out + i * ldo + j) = acc;
            }
        }
        for (int64_t j = nv; j < n; j++)
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
            for (int64_t j = 0; j < n; j++) out[i * ldo + j] += xv * wr[j];
        }
    }
    return 0;
}
