/* Decode attention on the CPU, float32, reading each request's K/V where they live in the pool:
 * what engine/model/fast/attention.py's AttentionLayer does at decode with the torch backend
 * (gather the contexts padded to the longest, then scaled_dot_product_attention with a mask),
 * without the gather, the padding or the mask. Scores go to a scratch row a query head; the
 * softmax subtracts the row's maximum, as torch's does.
 *
 * For request b, query head h of key/value head g = h / r (r = Hq / Hkv, grouped-query attention
 * as torch's enable_gqa), over the context slots s_0..s_{L-1}:
 *   p_j = softmax_j(scale q_h . K[s_j, g]),  out_h = sum_j p_j V[s_j, g].
 * tests/engine/test_cpu_kernels.py holds this to the torch ops.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "vmath.h"

static inline float dot16(const float *a, const float *b, int64_t d) { /* d a multiple of 16 */
    v16f acc = *(const v16f *)a * *(const v16f *)b;
    for (int64_t e = 16; e < d; e += 16) acc += *(const v16f *)(a + e) * *(const v16f *)(b + e);
    return hsum16(acc);
}

static inline float dot(const float *a, const float *b, int64_t d) {
    if (d % 16 == 0) return dot16(a, b, d);
    float s = 0.0f;
    for (int64_t e = 0; e < d; e++) s += a[e] * b[e];
    return s;
}

/* o[e0 : e0 + 16 nv] = sum_j p[j] v_j[e0 : ...], v_j = vg + slots[j] row: the sums held in registers */
static inline __attribute__((always_inline)) void weighted_sum(int64_t len, const float *p, const float *vg,
                                                               const int64_t *slots, int64_t row, int64_t e0,
                                                               const int nv, float *o) {
    v16f acc[4];
    for (int u = 0; u < nv; u++) acc[u] = (v16f){0};
    for (int64_t j = 0; j < len; j++) {
        const float *v = vg + slots[j] * row + e0;
        for (int u = 0; u < nv; u++) acc[u] += p[j] * *(const v16f *)(v + 16 * u);
    }
    for (int u = 0; u < nv; u++) *(v16f *)(o + e0 + 16 * u) = acc[u];
}

int paged_attention(
    int64_t batch, int64_t hq, int64_t hkv, int64_t d, float scale,
    const float *q, int64_t q_stride, /* [B, q_stride]: request b's Hq heads of D from q + b q_stride */
    const float *k_buf,               /* [S, Hkv, D] */
    const float *v_buf,               /* [S, Hkv, D] */
    int64_t num_slots,
    const int64_t *kv_indptr,         /* [B + 1]: request b's context is kv_slots[kv_indptr[b]:kv_indptr[b + 1]] */
    const int64_t *kv_slots,
    float *scores_all,                /* [threads, r, longest context] scratch */
    float *out,                       /* [B, Hq, D] */
    int64_t threads                   /* requests shared out among this many (OpenMP, torch's own runtime) */
) {
    if (hkv <= 0 || hq % hkv != 0) return 1;
    const int64_t r = hq / hkv;
    int64_t longest = 0;
    for (int64_t b = 0; b < batch; b++) { /* every context checked before any is read */
        const int64_t len = kv_indptr[b + 1] - kv_indptr[b];
        if (len <= 0) return 1;
        for (int64_t j = 0; j < len; j++)
            if (kv_slots[kv_indptr[b] + j] < 0 || kv_slots[kv_indptr[b] + j] >= num_slots) return 2;
        longest = len > longest ? len : longest;
    }
    if (threads > batch) threads = batch;
    if (threads < 1) threads = 1;
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int64_t b = 0; b < batch; b++) {
#ifdef _OPENMP
        float *scores = scores_all + omp_get_thread_num() * r * longest;
#else
        float *scores = scores_all;
#endif
        const int64_t start = kv_indptr[b], len = kv_indptr[b + 1] - start;
        const int64_t *slots = kv_slots + start;
        for (int64_t g = 0; g < hkv; g++) {
            const float *qg = q + b * q_stride + g * r * d;
            for (int64_t j = 0; j < len; j++) { /* a key row is read once for the r heads that share it */
                const float *k = k_buf + (slots[j] * hkv + g) * d;
                for (int64_t h = 0; h < r; h++) scores[h * len + j] = dot(qg + h * d, k, d) * scale;
            }
            for (int64_t h = 0; h < r; h++) {
                float *s = scores + h * len, mx = s[0], sum = 0.0f;
                for (int64_t j = 1; j < len; j++) mx = s[j] > mx ? s[j] : mx;
                for (int64_t j = 0; j < len; j++) s[j] -= mx;
                exp_array(s, len);
                for (int64_t j = 0; j < len; j++) sum += s[j];
                const float inv = 1.0f / sum;
                for (int64_t j = 0; j < len; j++) s[j] *= inv;
            }
            float *og = out + (b * hq + g * r) * d;
            if (d % 16 == 0) {
                for (int64_t h = 0; h < r; h++) {
                    const float *p = scores + h * len, *vg = v_buf + g * d;
                    float *o = og + h * d;
                    int64_t e0 = 0;
                    for (; e0 + 64 <= d; e0 += 64) weighted_sum(len, p, vg, slots, hkv * d, e0, 4, o);
                    switch ((d - e0) / 16) {
                    case 3: weighted_sum(len, p, vg, slots, hkv * d, e0, 3, o); break;
                    case 2: weighted_sum(len, p, vg, slots, hkv * d, e0, 2, o); break;
                    case 1: weighted_sum(len, p, vg, slots, hkv * d, e0, 1, o); break;
                    default: break;
                    }
                }
                continue;
            }
            memset(og, 0, sizeof(float) * r * d);
            for (int64_t j = 0; j < len; j++) {
                const float *v = v_buf + (slots[j] * hkv + g) * d;
                for (int64_t h = 0; h < r; h++) {
                    const float p = scores[h * len + j];
                    float *o = og + h * d;
                    for (int64_t e = 0; e < d; e++) o[e] += p * v[e];
                }
            }
        }
    }
    return 0;
}
