/* Vector math shared by the engine's C kernels (engine/kernels/*.c): 16-float vectors (one AVX-512
 * register; two AVX2 ones where that is what the CPU has) and the exp, SiLU and sigmoid they use. */
#ifndef TOKDRIFT_VMATH_H
#define TOKDRIFT_VMATH_H

#include <math.h>
#include <stdint.h>

typedef float v16f __attribute__((vector_size(64), aligned(4), may_alias));
typedef int32_t v16i __attribute__((vector_size(64)));

typedef float v8f __attribute__((vector_size(32), aligned(4), may_alias));
typedef float v4f __attribute__((vector_size(16), aligned(4), may_alias));

/* the sum of a vector's 16 lanes, halved four times (a chain of 4 adds, not 16) */
static inline float hsum16(const v16f x) {
    const v8f a = __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7) +
                  __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15);
    const v4f b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
    return (b[0] + b[2]) + (b[1] + b[3]);
}

static inline float silu(float x) { return x / (1.0f + expf(-x)); }
static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* exp(x), 16 floats at a time in vector registers (libm's expf is a call a value): the argument
 * clamped to where a float is finite, split into k ln2 + r, a degree-6 polynomial for exp(r)
 * (Cephes' expf, relative error about 1e-7) and 2^k put into the exponent bits. */
static inline v16f exp16(v16f t) {
    const v16f lo = (v16f){0} - 87.0f, hi = (v16f){0} + 88.0f;
    v16i m = t < lo; /* lanes of -1 where true */
    t = (v16f)(((v16i)t & ~m) | ((v16i)lo & m));
    m = t > hi;
    t = (v16f)(((v16i)t & ~m) | ((v16i)hi & m));
    const v16f fk = t * 1.44269504088896341f + 0.5f;
    v16i k = __builtin_convertvector(fk, v16i);         /* truncates toward zero */
    k += (v16i)(__builtin_convertvector(k, v16f) > fk); /* floor: one less where truncation went up (true is -1) */
    const v16f kf = __builtin_convertvector(k, v16f);
    const v16f r = t - kf * 0.693359375f + kf * 2.12194440e-4f;
    v16f q = r * 1.9875691500e-4f + 1.3981999507e-3f;
    q = q * r + 8.3334519073e-3f;
    q = q * r + 4.1665795894e-2f;
    q = q * r + 1.6666665459e-1f;
    q = q * r + 5.0000001201e-1f;
    q = q * r * r + r + 1.0f;
    return q * (v16f)((k + 127) << 23);
}

static inline v16f silu16(const v16f x) { return x / (1.0f + exp16(-x)); }

/* y[0:n] = silu(y[0:n]): silu16 on each 16, the rest through libm. */
static inline void silu_array(float *y, int64_t n) {
    int64_t c = 0;
    for (; c + 16 <= n; c += 16) *(v16f *)(y + c) = silu16(*(const v16f *)(y + c));
    for (; c < n; c++) y[c] = silu(y[c]);
}

/* e[0:n] = exp(e[0:n]) */
static inline void exp_array(float *e, int64_t n) {
    int64_t c = 0;
    for (; c + 16 <= n; c += 16) *(v16f *)(e + c) = exp16(*(const v16f *)(e + c));
    for (; c < n; c++) e[c] = expf(e[c]);
}

#endif
