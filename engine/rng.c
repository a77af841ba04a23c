/* rng.c — the engine's one random stream: xoshiro256** (Blackman & Vigna
 * 2018) seeded through splitmix64. Every random choice draws from here, so
 * vn_manual_seed() makes runs repeatable. */
#include "internal.h"

#include <pthread.h>

static uint64_t rng_state[4];
static bool rng_seeded;
static pthread_mutex_t rng_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void seed_locked(uint64_t seed)
{
    for (int i = 0; i < 4; i++) rng_state[i] = splitmix64(&seed);
    rng_seeded = true;
}

void vn_manual_seed(uint64_t seed)
{
    pthread_mutex_lock(&rng_lock);
    seed_locked(seed);
    pthread_mutex_unlock(&rng_lock);
}

vn_status vn_rng_get_state(uint64_t state[4])
{
    if (!state) return vn__err(VN_ERR_ARG, "rng_get_state: state is NULL");
    pthread_mutex_lock(&rng_lock);
    if (!rng_seeded) seed_locked(0);
    memcpy(state, rng_state, sizeof rng_state);
    pthread_mutex_unlock(&rng_lock);
    return VN_OK;
}

vn_status vn_rng_set_state(const uint64_t state[4])
{
    if (!state) return vn__err(VN_ERR_ARG, "rng_set_state: state is NULL");
    /* xoshiro's all-zero state is a fixed point: every draw would be 0. */
    if (!(state[0] | state[1] | state[2] | state[3]))
        return vn__err(VN_ERR_ARG, "rng_set_state: the state is all zeros (not a state "
                                   "xoshiro256** can reach; use one from rng_get_state)");
    pthread_mutex_lock(&rng_lock);
    memcpy(rng_state, state, sizeof rng_state);
    rng_seeded = true;
    pthread_mutex_unlock(&rng_lock);
    return VN_OK;
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t vn__rng_next(void)
{
    pthread_mutex_lock(&rng_lock);
    if (!rng_seeded) seed_locked(0);
    uint64_t *s = rng_state;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    pthread_mutex_unlock(&rng_lock);
    return result;
}

/* Uniform on [0, 1) with 53 random bits. */
double vn__rng_uniform(void) { return (double)(vn__rng_next() >> 11) * 0x1.0p-53; }

float vn__rng_uniform_f32(void)
{
    /* A double just below 1 rounds to 1.0f (about one draw in 2^25): keep
     * [0, 1) by taking the largest float below 1 instead. */
    float u = (float)vn__rng_uniform();
    return u < 1.0f ? u : 0x1.fffffep-1f;
}

static vn_tensor *fill_random(int ndim, const int64_t *shape, bool normal)
{
    vn_tensor *t = vn_empty(VN_F32, ndim, shape);
    if (!t) return NULL;
    float *p = t->storage->data;
    int64_t n = vn_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        if (!normal) {
            p[i] = vn__rng_uniform_f32();
            continue;
        }
        /* Box–Muller: two uniforms give two independent normals. */
        double u1 = 1.0 - vn__rng_uniform(), u2 = vn__rng_uniform();
        double r = sqrt(-2.0 * log(u1)), th = 2.0 * M_PI * u2;
        p[i] = (float)(r * cos(th));
        if (i + 1 < n) p[++i] = (float)(r * sin(th));
    }
    return t;
}

vn_tensor *vn_rand(int ndim, const int64_t *shape) { return fill_random(ndim, shape, false); }
vn_tensor *vn_randn(int ndim, const int64_t *shape) { return fill_random(ndim, shape, true); }

/* On the GPU: one key from the engine stream, then a counter-based
 * generator (kernels/random.cu) computes element i from (key, i). */
static vn_tensor *random_on(vn_device device, int ndim, const int64_t *shape, bool normal)
{
    if (device == VN_CPU) return fill_random(ndim, shape, normal);
    vn_tensor *t = vn_empty_on(device, VN_F32, ndim, shape);
    if (t && vnk_random(vn__ptr(t), vn_tensor_numel(t), vn__rng_next(), normal)) {
        vn_tensor_release(t);
        return vn__cuda_errp(normal ? "randn" : "rand");
    }
    return t;
}

vn_tensor *vn_rand_on(vn_device device, int ndim, const int64_t *shape)
{
    return random_on(device, ndim, shape, false);
}

vn_tensor *vn_randn_on(vn_device device, int ndim, const int64_t *shape)
{
    return random_on(device, ndim, shape, true);
}

vn_tensor *vn_randperm(int64_t n)
{
    if (n < 0) return vn__errp(VN_ERR_ARG, "randperm: n must be >= 0, got %lld", (long long)n);
    vn_tensor *t = vn_empty(VN_I64, 1, &n);
    if (!t) return NULL;
    int64_t *p = t->storage->data;
    for (int64_t i = 0; i < n; i++) p[i] = i;
    for (int64_t i = n - 1; i > 0; i--) { /* Fisher–Yates */
        int64_t j = (int64_t)(vn__rng_next() % (uint64_t)(i + 1));
        int64_t tmp = p[i];
        p[i] = p[j];
        p[j] = tmp;
    }
    return t;
}

/* Whether [low, high) fits dtype: each integer in it is an exact element. */
static bool randint_fits(vn_dtype dtype, int64_t low, int64_t high)
{
    switch (dtype) {
    case VN_I32: return low >= INT32_MIN && high - 1 <= INT32_MAX;
    case VN_U8: return low >= 0 && high <= 256;
    case VN_F32: return low >= -(1 << 24) && high - 1 <= (1 << 24);
    default: return true; /* i64 holds any; vn_empty refuses unknown dtypes */
    }
}

vn_tensor *vn_randint(int64_t low, int64_t high, vn_dtype dtype, int ndim, const int64_t *shape)
{
    if (dtype == VN_BF16 || dtype == VN_F16)
        return vn__errp(VN_ERR_DTYPE, "randint: expected dtype i64, i32, u8 or f32, got %s",
                        vn_dtype_name(dtype));
    if (low >= high)
        return vn__errp(VN_ERR_ARG, "randint: expected low < high, got low = %lld, high = %lld",
                        (long long)low, (long long)high);
    if (!randint_fits(dtype, low, high))
        return vn__errp(VN_ERR_ARG, "randint: [%lld, %lld) does not fit in %s", (long long)low,
                        (long long)high, vn_dtype_name(dtype));
    vn_tensor *t = vn_empty(dtype, ndim, shape);
    if (!t) return NULL;
    /* x % range is uniform only over whole multiples of range: draws among
     * the last 2^64 mod range values are redrawn (at most half of them, so
     * a draw is kept with probability above 1/2 whatever the range). */
    uint64_t range = (uint64_t)high - (uint64_t)low, rem = (UINT64_MAX % range + 1) % range;
    int64_t n = vn_tensor_numel(t);
    void *p = t->storage->data;
    for (int64_t i = 0; i < n; i++) {
        uint64_t x;
        do x = vn__rng_next();
        while (x > UINT64_MAX - rem);
        int64_t v = (int64_t)((uint64_t)low + x % range); /* in [low, high): no overflow */
        VN_DTYPE_SWITCH(dtype, T, ((T *)p)[i] = (T)v);
    }
    return t;
}
