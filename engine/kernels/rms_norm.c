/* out[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * scale, float32: torch's rms_norm as one pass
 * a row instead of six ops (pow, mean, add, rsqrt, mul, mul) of a few microseconds each, which a
 * decode step pays twice a layer. */
#include <math.h>
#include <stdint.h>

int rms_norm(int64_t rows, int64_t dim, const float *x, int64_t ldx, const float *scale, float eps, float *out,
             int64_t ldo) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * ldx;
        float *o = out + r * ldo;
        float ss = 0.0f;
        for (int64_t i = 0; i < dim; i++) ss += xr[i] * xr[i];
        const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
        for (int64_t i = 0; i < dim; i++) o[i] = xr[i] * inv * scale[i];
    }
    return 0;
}
