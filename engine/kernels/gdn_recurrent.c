/* Gated DeltaNet's recurrence on the CPU, float32: what engine/model/fast/gated_deltanet.py's GdnLayer
 * does between its two matrix products, as one call instead of ~40 torch ops a step, reading and
 * writing each request's states where they live in the pool (no gather, no write-back). A decode
 * step is B requests of one token each; an extend (a prefill or an append) is one request of T
 * tokens, taken one after another through the same recurrence: the reference's chunked form is
 * the same arithmetic in another order, and costs a fixed ~4 ms a layer per call on this CPU
 * where T tokens of the recurrence with the state in cache cost well under that. An extend runs
 * head by head (extend_heads) where the value heads are a multiple of 16 wide, token by token
 * (after_conv) otherwise.
 *
 * For request b, value head j of key head h (r value heads a key head, Hv = Hk r):
 *   conv:   y = silu(sum_k window[c][k] w[c][k]), window = [conv state | this token's q k v],
 *           and the conv state shifts by one;
 *   q, k:   l2-normalised per key head, q further scaled by Dk^-1/2;
 *   gates:  beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias), d = exp(g) (0 below floor);
 *   rule:   S' = d S + k delta^T, delta = beta (v - d S^T k), o = S'^T q = d S^T q + (q.k) delta;
 *   output: rms_norm(o) * norm_weight * silu(z), the input of the output projection.
 * The reference (engine/model/gated_deltanet.py, delta_rule.recurrent_step) is the specification;
 * tests/engine/test_cpu_kernels.py holds this to it.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "vmath.h"

static inline float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); } /* torch's threshold */

/* x[0:n] *= rsqrt(mean(x^2) + eps) * scale */
static void rms_scale(float *x, int64_t n, float eps, float scale) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    const float inv = scale / sqrtf(ss / (float)n + eps);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

typedef struct {
    int64_t hk, r, dk, dv, km1, hv, conv_dim, value_dim;
    const float *conv_w, *neg_a, *dt_bias, *norm_w;
    float l2_scale, l2_eps, q_scale, norm_eps, decay_floor;
    float *y, *sq, *sk, *delta;
} layer_t;

/* The delta rule on 64 columns of one head's state s [Dk, row stride dv], the 4 vectors of S^T q,
 * S^T k and delta held in registers: S^T q and S^T k from the old state in one pass, then
 * S = d S + k delta^T in a second; o = d S^T q + (q.k) delta. */
static void rule_columns(float *s, int64_t dk, int64_t dv, const float *q, const float *k, const float *v, float d,
                         float beta, float qk, float *o) {
    v16f aq[4], ak[4], dl[4];
    for (int u = 0; u < 4; u++) aq[u] = ak[u] = (v16f){0};
    for (int64_t i = 0; i < dk; i++) {
        const v16f *row = (const v16f *)(s + i * dv);
        const float qi = q[i], ki = k[i];
        for (int u = 0; u < 4; u++) {
            aq[u] += row[u] * qi;
            ak[u] += row[u] * ki;
        }
    }
    for (int u = 0; u < 4; u++) {
        dl[u] = (*(const v16f *)(v + 16 * u) - d * ak[u]) * beta;
        *(v16f *)(o + 16 * u) = d * aq[u] + qk * dl[u];
    }
    for (int64_t i = 0; i < dk; i++) {
        v16f *row = (v16f *)(s + i * dv);
        const float ki = k[i];
        for (int u = 0; u < 4; u++) row[u] = row[u] * d + ki * dl[u];
    }
}

/* One token through the layer: its projection row pb, the request's conv and recurrent state
 * (updated in place), the output row o (Hv Dv). */
/* The rest of a token after its conv: y (C) holds silu(conv) for this token. */
static void after_conv(const layer_t *L, const float *pb, float *y, float *rec, float *o_row);

static void one_token(const layer_t *L, const float *pb, float *conv, float *rec, float *o_row) {
    const int64_t km1 = L->km1;
    float *y = L->y;
    /* the causal conv over the window, then its state shifted by this token */
    for (int64_t c = 0; c < L->conv_dim; c++) {
        float *st = conv + c * km1;
        const float *w = L->conv_w + c * (km1 + 1);
        float acc = 0.0f;
        for (int64_t k = 0; k < km1; k++) acc += st[k] * w[k];
        y[c] = acc + pb[c] * w[km1];
        for (int64_t k = 0; k + 1 < km1; k++) st[k] = st[k + 1];
        if (km1 > 0) st[km1 - 1] = pb[c];
    }
    silu_array(y, L->conv_dim);
    after_conv(L, pb, y, rec, o_row);
}

/* The conv of T tokens of one request at once, token-major so that it runs along the channels in
 * vector registers (the per-token form walks the channel-major [C, K-1] state a channel at a
 * time): y[t] = silu(sum_k wt[k] * in[t - (K-1) + k]), in[j] the token's q k v for j >= 0 and the
 * conv state before it for j < 0, summed in the per-token form's order; then the state keeps the
 * last K-1 inputs. wt is the weight transposed, [K, C]. */
static void conv_tokens(const layer_t *L, const float *p, int64_t p_stride, int64_t tokens, float *conv,
                        const float *wt, float *ybuf) {
    const int64_t km1 = L->km1, cd = L->conv_dim;
    for (int64_t t = 0; t < tokens; t++) {
        float *yt = ybuf + t * cd;
        if (t >= km1) { /* 16 channels at a time in a register, their SiLU on the way out */
            const float *in = p + (t - km1) * p_stride;
            int64_t c = 0;
            for (; c + 16 <= cd; c += 16) {
                v16f acc = (v16f){0};
                for (int64_t k = 0; k <= km1; k++)
                    acc += *(const v16f *)(in + k * p_stride + c) * *(const v16f *)(wt + k * cd + c);
                *(v16f *)(yt + c) = silu16(acc);
            }
            for (; c < cd; c++) {
                float acc = 0.0f;
                for (int64_t k = 0; k <= km1; k++) acc += in[k * p_stride + c] * wt[k * cd + c];
                yt[c] = silu(acc);
            }
        } else {
            for (int64_t c = 0; c < cd; c++) {
                float acc = 0.0f;
                for (int64_t k = 0; k <= km1; k++) {
                    const int64_t j = t - km1 + k;
                    acc += (j >= 0 ? p[j * p_stride + c] : conv[c * km1 + km1 + j]) * wt[k * cd + c];
                }
                yt[c] = acc;
            }
            silu_array(yt, cd);
        }
    }
    for (int64_t c = 0; c < cd; c++) /* ascending: each read is at or past the entry it writes */
        for (int64_t i = 0; i < km1; i++) {
            const int64_t j = tokens - km1 + i;
            conv[c * km1 + i] = j >= 0 ? p[j * p_stride + c] : conv[c * km1 + km1 + j];
        }
}

static void after_conv(const layer_t *L, const float *pb, float *y, float *rec, float *o_row) {
    const int64_t hk = L->hk, r = L->r, dk = L->dk, dv = L->dv;
    float *sq = L->sq, *sk = L->sk, *delta = L->delta;
    for (int64_t h = 0; h < 2 * hk; h++) rms_scale(y + h * dk, dk, L->l2_eps, L->l2_scale); /* q heads, then k heads */
    for (int64_t i = 0; i < hk * dk; i++) y[i] *= L->q_scale;
    float *z = L->y + L->conv_dim; /* silu(z), the output gate: a copy, the SiLUs vectorised */
    memcpy(z, pb + L->conv_dim, sizeof(float) * L->value_dim);
    silu_array(z, L->value_dim);
    const float *gate_b = pb + L->conv_dim + L->value_dim, *gate_a = gate_b + L->hv;
    for (int64_t j = 0; j < L->hv; j++) {
        const int64_t h = j / r;
        const float *q = y + h * dk, *k = y + hk * dk + h * dk, *v = y + 2 * hk * dk + j * dv;
        const float beta = sigmoid(gate_b[j]);
        const float g = L->neg_a[j] * softplus(gate_a[j] + L->dt_bias[j]);
        const float d = g < L->decay_floor ? 0.0f : expf(g);
        float *s = rec + j * dk * dv; /* [Dk, Dv] */
        float *o = o_row + j * dv;
        float qk = 0.0f;
        for (int64_t i = 0; i < dk; i++) qk += q[i] * k[i];
        int64_t e0 = 0;
        for (; e0 + 64 <= dv; e0 += 64) rule_columns(s + e0, dk, dv, q, k, v + e0, d, beta, qk, o + e0);
        if (e0 < dv) { /* columns past the last 64: the same, a column at a time */
            for (int64_t e = e0; e < dv; e++) sq[e] = sk[e] = 0.0f;
            for (int64_t i = 0; i < dk; i++)
                for (int64_t e = e0; e < dv; e++) {
                    sq[e] += s[i * dv + e] * q[i];
                    sk[e] += s[i * dv + e] * k[i];
                }
            for (int64_t e = e0; e < dv; e++) delta[e] = (v[e] - d * sk[e]) * beta;
            for (int64_t i = 0; i < dk; i++)
                for (int64_t e = e0; e < dv; e++) s[i * dv + e] = s[i * dv + e] * d + k[i] * delta[e];
            for (int64_t e = e0; e < dv; e++) o[e] = d * sq[e] + qk * delta[e];
        }
        rms_scale(o, dv, L->norm_eps, 1.0f);
        const float *zj = z + j * dv;
        for (int64_t e = 0; e < dv; e++) o[e] *= L->norm_w[e] * zj[e];
    }
}

/* An extend's recurrence head by head, each head's state kept in the first-level cache for all T
 * tokens (token by token it is evicted by the other heads' states between two tokens), in one pass
 * over it a token: the update S' = d S + k delta^T of token t is fused with S'^T q and S'^T k of
 * token t+1, which the per-token form reads in a pass of its own. The same arithmetic as
 * after_conv in the same order, element by element: only the loops are exchanged. 64 columns a
 * block, in 16-float vectors (dv a multiple of 16). */
static inline __attribute__((always_inline)) void head_block(const layer_t *L, int64_t tokens, int64_t j, int64_t e0,
                                                             const int nv, float *s, const float *ybuf,
                                                             const float *gates, float *out) {
    const int64_t dk = L->dk, dv = L->dv, hk = L->hk, hv = L->hv, cd = L->conv_dim, gs = 2 * hv + hk;
    const int64_t h = j / L->r, qo = h * dk, ko = (hk + h) * dk, vo = 2 * hk * dk + j * dv + e0;
    v16f aq[4], ak[4], dl[4];
    for (int u = 0; u < nv; u++) aq[u] = ak[u] = (v16f){0};
    for (int64_t i = 0; i < dk; i++) { /* S^T q, S^T k of the first token from the state as it came */
        const v16f *row = (const v16f *)(s + i * dv);
        for (int u = 0; u < nv; u++) {
            aq[u] += row[u] * ybuf[qo + i];
            ak[u] += row[u] * ybuf[ko + i];
        }
    }
    for (int64_t t = 0; t < tokens; t++) {
        const float *y = ybuf + t * cd, *g = gates + t * gs, *k = y + ko;
        const float beta = g[j], d = g[hv + j], qk = g[2 * hv + h];
        float *o = out + t * L->value_dim + j * dv + e0;
        for (int u = 0; u < nv; u++) {
            dl[u] = (*(const v16f *)(y + vo + 16 * u) - d * ak[u]) * beta;
            *(v16f *)(o + 16 * u) = d * aq[u] + qk * dl[u];
        }
        if (t + 1 == tokens) {
            for (int64_t i = 0; i < dk; i++) {
                v16f *row = (v16f *)(s + i * dv);
                for (int u = 0; u < nv; u++) row[u] = row[u] * d + k[i] * dl[u];
            }
            break;
        }
        const float *qn = y + cd + qo, *kn = y + cd + ko;
        for (int u = 0; u < nv; u++) aq[u] = ak[u] = (v16f){0};
        for (int64_t i = 0; i < dk; i++) {
            v16f *row = (v16f *)(s + i * dv);
            for (int u = 0; u < nv; u++) {
                const v16f n = row[u] * d + k[i] * dl[u];
                row[u] = n;
                aq[u] += n * qn[i];
                ak[u] += n * kn[i];
            }
        }
    }
}

/* ybuf [T, C] holds silu(conv) of the request's T tokens; gates [T, 2 Hv + Hk] is scratch. */
static void extend_heads(const layer_t *L, const float *p, int64_t p_stride, int64_t tokens, float *ybuf,
                         float *gates, float *rec, float *out) {
    const int64_t hk = L->hk, hv = L->hv, dk = L->dk, dv = L->dv, cd = L->conv_dim, vd = L->value_dim;
    for (int64_t t = 0; t < tokens; t++) { /* what after_conv does before the rule, for every token */
        float *y = ybuf + t * cd, *g = gates + t * (2 * hv + hk);
        const float *gate_b = p + t * p_stride + cd + vd, *gate_a = gate_b + hv;
        for (int64_t h = 0; h < 2 * hk; h++) rms_scale(y + h * dk, dk, L->l2_eps, L->l2_scale);
        for (int64_t i = 0; i < hk * dk; i++) y[i] *= L->q_scale;
        for (int64_t j = 0; j < hv; j++) {
            g[j] = sigmoid(gate_b[j]);
            const float lg = L->neg_a[j] * softplus(gate_a[j] + L->dt_bias[j]);
            g[hv + j] = lg < L->decay_floor ? 0.0f : expf(lg);
        }
        for (int64_t h = 0; h < hk; h++) {
            float qk = 0.0f;
            for (int64_t i = 0; i < dk; i++) qk += y[h * dk + i] * y[(hk + h) * dk + i];
            g[2 * hv + h] = qk;
        }
    }
    for (int64_t j = 0; j < hv; j++) {
        float *s = rec + j * dk * dv;
        int64_t e0 = 0;
        for (; e0 + 64 <= dv; e0 += 64) head_block(L, tokens, j, e0, 4, s + e0, ybuf, gates, out);
        switch ((dv - e0) / 16) {
        case 3: head_block(L, tokens, j, e0, 3, s + e0, ybuf, gates, out); break;
        case 2: head_block(L, tokens, j, e0, 2, s + e0, ybuf, gates, out); break;
        case 1: head_block(L, tokens, j, e0, 1, s + e0, ybuf, gates, out); break;
        default: break;
        }
    }
    float *z = L->y + cd;
    for (int64_t t = 0; t < tokens; t++) { /* the gated norm, as after_conv ends */
        memcpy(z, p + t * p_stride + cd, sizeof(float) * vd);
        silu_array(z, vd);
        for (int64_t j = 0; j < hv; j++) {
            float *o = out + t * vd + j * dv;
            rms_scale(o, dv, L->norm_eps, 1.0f);
            for (int64_t e = 0; e < dv; e++) o[e] *= L->norm_w[e] * z[j * dv + e];
        }
    }
}

/* `batch` requests of `tokens` tokens each: request b's token t is row b * tokens + t of p and out. */
int gdn_recurrent(
    int64_t batch, int64_t tokens, int64_t hk, int64_t r, int64_t dk, int64_t dv, int64_t kernel,
    const float *p, int64_t p_stride,  /* [B T, p_stride]: q k v (C) | z (Hv Dv) | b (Hv) | a (Hv) */
    const float *conv_w,               /* [C, K] */
    float *conv_buf,                   /* [S, C, K-1] */
    float *rec_buf,                    /* [S, Hv, Dk, Dv] */
    int64_t num_slots,
    const int64_t *slots,              /* [B] */
    const uint8_t *fresh,              /* [B]: 1 where the request starts from zero state */
    const float *neg_a,                /* [Hv]: -exp(A_log) */
    const float *dt_bias,              /* [Hv] */
    const float *norm_w,               /* [Dv] */
    float l2_scale, float l2_eps,      /* l2norm(x) = rms_norm(x, eps = l2_eps) * l2_scale */
    float q_scale, float norm_eps, float decay_floor,
    float *y,                          /* [C + Hv Dv] scratch */
    float *sq, float *sk, float *delta, /* [Dv] scratch each */
    float *out,                        /* [B T, Hv Dv] */
    const float *conv_wt,              /* [K, C]: conv_w transposed, for the token-major conv */
    float *ybuf                        /* [T, C + 2 Hv + Hk] scratch for a request's conv outputs and gates; NULL: a token at a time */
) {
    const int64_t hv = hk * r;
    const layer_t L = {hk, r, dk, dv, kernel - 1, hv, 2 * hk * dk + hv * dv, hv * dv,
                       conv_w, neg_a, dt_bias, norm_w, l2_scale, l2_eps, q_scale, norm_eps, decay_floor,
                       y, sq, sk, delta};
    for (int64_t b = 0; b < batch; b++) {
        const int64_t slot = slots[b];
        if (slot < 0 || slot >= num_slots) return 1;
        float *conv = conv_buf + slot * L.conv_dim * L.km1;
        float *rec = rec_buf + slot * hv * dk * dv;
        if (fresh[b]) {
            memset(conv, 0, sizeof(float) * L.conv_dim * L.km1);
            memset(rec, 0, sizeof(float) * hv * dk * dv);
        }
        if (ybuf != NULL && tokens > 1) {
            const float *pr = p + b * tokens * p_stride;
            float *ob = out + b * tokens * L.value_dim;
            conv_tokens(&L, pr, p_stride, tokens, conv, conv_wt, ybuf);
            if (dv % 16 == 0) {
                extend_heads(&L, pr, p_stride, tokens, ybuf, ybuf + tokens * L.conv_dim, rec, ob);
                continue;
            }
            for (int64_t t = 0; t < tokens; t++)
                after_conv(&L, pr + t * p_stride, ybuf + t * L.conv_dim, rec, ob + t * L.value_dim);
            continue;
        }
        for (int64_t t = 0; t < tokens; t++) {
            const int64_t row = b * tokens + t;
            one_token(&L, p + row * p_stride, conv, rec, out + row * L.value_dim);
        }
    }
    return 0;
}
