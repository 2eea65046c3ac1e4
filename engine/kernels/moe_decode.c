/* A sparse MoE layer for a few tokens (a decode batch) on the CPU, float32, after its fused
 * projection: the router's softmax and top-k, each picked expert's SwiGLU over the tokens that
 * picked it, the shared expert and its gate, and the residual, in one call instead of ~25 torch
 * ops a token (engine/model/fast/moe.py's MoeLayer: the specification, with
 * engine/model/moe.py; tests/engine/test_cpu_kernels.py holds this to it).
 *
 * An expert's products have 1-4 rows. Each is computed with every row's accumulators for a tile
 * of the weight's columns held in vector registers while the weight streams through once, row
 * after row: for [1, 512] x [512, 256] that read at 14 GB/s where MKL's sgemm read at 12.7
 * (docs/benchmarks.md, "C kernels").
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "vmath.h"

#ifdef __AVX512F__
#define VW 16
#define NV1 16 /* vectors of columns a tile: 1 row */
#define NV2 8  /* 2 rows */
#define NV4 4  /* 3-4 rows */
#else
#define VW 8
#define NV1 8
#define NV2 4
#define NV4 2
#endif
typedef float vf __attribute__((vector_size(VW * 4), aligned(4), may_alias));

/* out[M, NV VW] = x[M, k] @ w[k, NV VW] (row stride ldw), the accumulators in registers */
#define DEFINE_TILE(M, NV)                                                                              \
    static void tile_##M(int64_t k, const float *x, int64_t ldx, const float *w, int64_t ldw, float *out, \
                         int64_t ldo) {                                                                 \
        vf acc[M][NV];                                                                                  \
        _Pragma("GCC unroll 16") for (int i = 0; i < M; i++)                                            \
            _Pragma("GCC unroll 16") for (int v = 0; v < NV; v++) acc[i][v] = (vf){0};                  \
        for (int64_t kk = 0; kk < k; kk++) {                                                            \
            const float *wr = w + kk * ldw;                                                             \
            vf wv[NV];                                                                                  \
            _Pragma("GCC unroll 16") for (int v = 0; v < NV; v++) wv[v] = *(const vf *)(wr + v * VW);   \
            _Pragma("GCC unroll 16") for (int i = 0; i < M; i++) {                                      \
                const float xi = x[i * ldx + kk];                                                       \
                _Pragma("GCC unroll 16") for (int v = 0; v < NV; v++) acc[i][v] += xi * wv[v];          \
            }                                                                                           \
        }                                                                                               \
        _Pragma("GCC unroll 16") for (int i = 0; i < M; i++)                                            \
            _Pragma("GCC unroll 16") for (int v = 0; v < NV; v++) *(vf *)(out + i * ldo + v * VW) = acc[i][v]; \
    }
DEFINE_TILE(1, NV1)
DEFINE_TILE(2, NV2)
DEFINE_TILE(3, NV4)
DEFINE_TILE(4, NV4)

/* out[m, n] = x[m, k] @ w[k, n], w row-major (input-major weights); any m, n */
static void rows_gemm(int64_t m, int64_t k, int64_t n, const float *x, int64_t ldx, const float *w, int64_t ldw,
                      float *out, int64_t ldo) {
    for (int64_t i0 = 0; i0 < m; i0 += 4) {
        const int64_t mb = m - i0 < 4 ? m - i0 : 4;
        const int64_t nt = (mb == 1 ? NV1 : mb == 2 ? NV2 : NV4) * VW;
        const float *xb = x + i0 * ldx;
        float *ob = out + i0 * ldo;
        int64_t j = 0;
        for (; j + nt <= n; j += nt) {
            if (mb == 1) tile_1(k, xb, ldx, w + j, ldw, ob + j, ldo);
            else if (mb == 2) tile_2(k, xb, ldx, w + j, ldw, ob + j, ldo);
            else if (mb == 3) tile_3(k, xb, ldx, w + j, ldw, ob + j, ldo);
            else tile_4(k, xb, ldx, w + j, ldw, ob + j, ldo);
        }
        for (; j < n; j++) /* columns past the last tile */
            for (int64_t i = 0; i < mb; i++) {
                float acc = 0.0f;
                for (int64_t kk = 0; kk < k; kk++) acc += xb[i * ldx + kk] * w[kk * ldw + j];
                ob[i * ldo + j] = acc;
            }
    }
}


/* act[0:n] = silu(gate[0:n]) * up[0:n] */
static void swiglu(int64_t n, const float *gate, const float *up, float *act) {
    int64_t c = 0;
    for (; c + 16 <= n; c += 16)
        *(v16f *)(act + c) = silu16(*(const v16f *)(gate + c)) * *(const v16f *)(up + c);
    for (; c < n; c++) act[c] = silu(gate[c]) * up[c];
}

#define MAX_TOKENS 8
#define MAX_TOP_K 16

int moe_decode(
    int64_t tokens, int64_t hidden, int64_t inter, int64_t num_experts, int64_t top_k, int64_t norm_topk,
    const float *p, int64_t ldp,  /* [T, ldp]: router logits (E) | shared gate (1) | shared gate (Is) | shared up (Is) */
    const float *h,               /* [T, H] the layer's normed input */
    const float *x,               /* [T, H] the residual */
    const int64_t *gate_up,       /* [E] addresses of each expert's [H, 2I] (gate columns, then up) */
    const int64_t *down,          /* [E] addresses of each expert's [I, H] */
    int64_t shared_inter,         /* Is; 0: no shared expert (then p holds the router logits alone) */
    const float *shared_down,     /* [Is, H] */
    float *scratch,               /* T H (2 + k) + T Is + threads T (H + 3 I) floats */
    float *out,                   /* [T, H] = x + routed + sigmoid(shared gate) * shared */
    int64_t threads               /* the experts shared out among this many (OpenMP, torch's own runtime) */
) {
    if (tokens > MAX_TOKENS || top_k > MAX_TOP_K || top_k > num_experts) return 1;
    int64_t ids[MAX_TOKENS][MAX_TOP_K];
    float wts[MAX_TOKENS][MAX_TOP_K];
    /* the router: softmax over the experts, the top k (largest first, the lower id on a tie), renormalised */
    for (int64_t t = 0; t < tokens; t++) {
        const float *logits = p + t * ldp;
        float mx = logits[0];
        for (int64_t e = 1; e < num_experts; e++) mx = logits[e] > mx ? logits[e] : mx;
        float sum = 0.0f;
        for (int64_t e = 0; e < num_experts; e++) sum += expf(logits[e] - mx);
        float picked_sum = 0.0f;
        for (int64_t j = 0; j < top_k; j++) {
            int64_t best = -1;
            for (int64_t e = 0; e < num_experts; e++) {
                int taken = 0;
                for (int64_t i = 0; i < j; i++) taken |= ids[t][i] == e;
                if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
            }
            ids[t][j] = best;
            wts[t][j] = expf(logits[best] - mx) / sum;
            picked_sum += wts[t][j];
        }
        if (norm_topk)
            for (int64_t j = 0; j < top_k; j++) wts[t][j] /= picked_sum;
    }
    /* the experts picked, in ascending id, each over the tokens that picked it, in token order:
     * expert used[u] has picks first[u] .. first[u + 1] - 1, pick q is token rows[q] with weight rw[q] */
    int64_t used[MAX_TOKENS * MAX_TOP_K], first[MAX_TOKENS * MAX_TOP_K + 1], rows[MAX_TOKENS * MAX_TOP_K];
    float rw[MAX_TOKENS * MAX_TOP_K];
    int64_t n_used = 0, picks = 0;
    for (int64_t e = 0; e < num_experts; e++) {
        const int64_t m0 = picks;
        for (int64_t t = 0; t < tokens; t++)
            for (int64_t j = 0; j < top_k; j++)
                if (ids[t][j] == e) {
                    rows[picks] = t;
                    rw[picks++] = wts[t][j];
                }
        if (picks > m0) {
            used[n_used] = e;
            first[n_used++] = m0;
        }
    }
    first[n_used] = picks;
    float *routed = scratch;                    /* [T, H] */
    float *ys = routed + tokens * hidden;       /* [T k, H]: each pick's expert output */
    float *sy = ys + tokens * top_k * hidden;   /* [T, H]: the shared expert's */
    float *sact = sy + tokens * hidden;         /* [T, Is] */
    float *own = sact + tokens * shared_inter;  /* per thread: xs [T, H] | gu [T, 2I] | act [T, I] */
    const int64_t own_size = tokens * (hidden + 3 * inter);
    /* each expert (and the shared one) a task: its products are computed alike on any thread,
     * and the sums below run in the same order, so the result does not depend on the threads */
    const int64_t tasks = n_used + (shared_inter > 0);
    if (threads > tasks) threads = tasks;
    if (threads < 1) threads = 1;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; task++) {
#ifdef _OPENMP
        float *xs = own + omp_get_thread_num() * own_size;
#else
        float *xs = own;
#endif
        float *gu = xs + tokens * hidden, *act = gu + tokens * 2 * inter;
        if (task == n_used) { /* the shared expert, over every token */
            for (int64_t t = 0; t < tokens; t++) {
                const float *g = p + t * ldp + num_experts + 1, *u = g + shared_inter;
                swiglu(shared_inter, g, u, sact + t * shared_inter);
            }
            rows_gemm(tokens, shared_inter, hidden, sact, shared_inter, shared_down, hidden, sy, hidden);
            continue;
        }
        const int64_t e = used[task], q0 = first[task], m = first[task + 1] - q0;
        for (int64_t i = 0; i < m; i++) memcpy(xs + i * hidden, h + rows[q0 + i] * hidden, sizeof(float) * hidden);
        rows_gemm(m, hidden, 2 * inter, xs, hidden, (const float *)(intptr_t)gate_up[e], 2 * inter, gu, 2 * inter);
        for (int64_t i = 0; i < m; i++) swiglu(inter, gu + i * 2 * inter, gu + i * 2 * inter + inter, act + i * inter);
        rows_gemm(m, inter, hidden, act, inter, (const float *)(intptr_t)down[e], hidden, ys + q0 * hidden, hidden);
    }
    memset(routed, 0, sizeof(float) * tokens * hidden);
    for (int64_t q = 0; q < picks; q++) { /* experts in ascending id, as the reference adds them */
        float *r = routed + rows[q] * hidden;
        const float *yq = ys + q * hidden;
        for (int64_t c = 0; c < hidden; c++) r[c] += yq[c] * rw[q];
    }
    if (shared_inter > 0) {
        for (int64_t t = 0; t < tokens; t++) {
            const float gate = sigmoid(p[t * ldp + num_experts]);
            for (int64_t c = 0; c < hidden; c++)
                out[t * hidden + c] = x[t * hidden + c] + (routed[t * hidden + c] + gate * sy[t * hidden + c]);
        }
    } else {
        for (int64_t t = 0; t < tokens; t++)
            for (int64_t c = 0; c < hidden; c++) out[t * hidden + c] = x[t * hidden + c] + routed[t * hidden + c];
    }
    return 0;
}
