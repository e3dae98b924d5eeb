// Lanes: the Cube model is written once over "lane" types, and instantiated for one row (plain
// int64_t / double / bool, early returns) and for N rows at once (GCC vector types, one SIMD lane
// per row, masks instead of branches). Every helper does per lane exactly what the one-row version
// does, so both give the same bits.
//
// Included only from kernels.inc, inside a per-ISA namespace (aoesim::k_base, k_v3, k_v4): each copy
// is compiled for its own instruction set, and nothing here may become a shared out-of-line symbol
// (the linker could hand an AVX-512 copy to a baseline caller). Hence no #pragma once, and every
// function is always inlined.
//
// Floating point: the kernel files are compiled with -ffp-contract=off, and the multiply-adds the
// model fuses are written as fma() below: fused where the target has FMA (the x86-64-v3/v4 builds,
// aarch64), two roundings on baseline x86-64. The fused sites are the ones GCC chose when it
// contracted the x86-64-v3 build freely, so x86-64 figures are those of the earlier builds, bit for
// bit (a CPU with FMA now gives the x86-64-v3 figures whatever the compiler would have contracted).

#if defined(__FMA__) || defined(__FP_FAST_FMA)
#define AOE_FUSED 1
#else
#define AOE_FUSED 0
#endif

// One row: plain scalars; a failed rule returns at once.
struct One {
    using I = int64_t;
    using D = double;
    using M = bool;
    static constexpr int W = 1;
};

// N rows, one per SIMD lane (N * 8 bytes: a ymm or zmm register).
template <int N>
struct Lanes {
    typedef int64_t I __attribute__((vector_size(8 * N)));
    typedef double D __attribute__((vector_size(8 * N)));
    using M = I;  // a comparison gives -1 (true) or 0 per lane
    static constexpr int W = N;
};

AOE_INLINE int64_t sel(bool m, int64_t a, int64_t b) { return m ? a : b; }
AOE_INLINE double sel(bool m, double a, double b) { return m ? a : b; }
template <class M, class T>
AOE_INLINE T sel(M m, T a, T b) { return m ? a : b; }

// A value in every lane.
template <class T, class S>
AOE_INLINE T splat(S x) {
    if constexpr (std::is_arithmetic_v<T>) {
        return T(x);
    } else {
        T r;
        for (unsigned i = 0; i < sizeof(T) / 8; ++i) r[i] = x;
        return r;
    }
}

AOE_INLINE bool any(bool m) { return m; }
AOE_INLINE bool all(bool m) { return m; }
AOE_INLINE bool mnot(bool m) { return !m; }
// The lanes' sign bits as an integer (a mask lane is -1 or 0): one instruction where there is one.
template <class M>
AOE_INLINE unsigned lane_bits(M m) {
#if defined(__AVX512DQ__)
    if constexpr (sizeof(M) == 64) return _mm512_movepi64_mask((__m512i)m);
#endif
#if defined(__AVX__)
    if constexpr (sizeof(M) == 32) return unsigned(_mm256_movemask_pd((__m256d)m));
#endif
    unsigned r = 0;
    for (unsigned i = 0; i < sizeof(M) / 8; ++i) r |= unsigned(m[i] < 0) << i;
    return r;
}
template <class M>
AOE_INLINE bool any(M m) { return lane_bits(m) != 0; }
template <class M>
AOE_INLINE bool all(M m) { return lane_bits(m) == (1u << (sizeof(M) / 8)) - 1; }
template <class M>
AOE_INLINE M mnot(M m) { return ~m; }
// No lane of `alive` is left once `cond` fails: one vptest on AVX2.
template <class M>
AOE_INLINE bool none_left(M alive, M cond) {
#if defined(__AVX__) && !defined(__AVX512F__)
    if constexpr (sizeof(M) == 32) return _mm256_testc_si256((__m256i)cond, (__m256i)alive);  // (alive & ~cond) == 0
#endif
    return !any(alive & ~cond);
}

AOE_INLINE double to_d(int64_t x) { return double(x); }
AOE_INLINE int64_t to_i(double x) { return int64_t(x); }
#if defined(__AVX2__) && !defined(__AVX512DQ__)
// AVX2 has no int64 <-> double conversion (GCC would convert lane by lane through scalar registers).
// Where every lane is below 2^51 in magnitude, adding 2^52 + 2^51 puts the integer in the mantissa,
// exactly, both ways; otherwise (rare: the model's values are far smaller) the lanes go one by one as
// before, so the bits are always those of cvtsi2sd / cvttsd2si.
constexpr int64_t kMagicBits = 0x4338000000000000;  // the bits of 2^52 + 2^51
constexpr double kMagic = 6755399441055744.0;       // 2^52 + 2^51
#endif
template <class I>
AOE_INLINE auto to_d(I x) {
    typedef double D __attribute__((vector_size(sizeof(I))));
#if defined(__AVX2__) && !defined(__AVX512DQ__)
    if constexpr (sizeof(I) == 32) {
        const __m256i v = (__m256i)x;
        const __m256i biased = _mm256_add_epi64(v, _mm256_set1_epi64x(int64_t(1) << 51));  // in [0, 2^52)?
        if (__builtin_expect(_mm256_testz_si256(biased, _mm256_set1_epi64x(~((int64_t(1) << 52) - 1))), 1))
            return (D)_mm256_sub_pd(_mm256_castsi256_pd(_mm256_add_epi64(v, _mm256_set1_epi64x(kMagicBits))),
                                    _mm256_set1_pd(kMagic));
    }
#endif
    return __builtin_convertvector(x, D);
}
template <class D>
AOE_INLINE auto to_i(D x) {
    typedef int64_t I __attribute__((vector_size(sizeof(D))));
#if defined(__AVX2__) && !defined(__AVX512DQ__)
    if constexpr (sizeof(D) == 32) {
        const __m256d v = (__m256d)x;
        const __m256d mag = _mm256_andnot_pd(_mm256_set1_pd(-0.0), v);
        // NaN compares false and goes the slow way too
        if (__builtin_expect(_mm256_movemask_pd(_mm256_cmp_pd(mag, _mm256_set1_pd(2251799813685248.0), _CMP_LT_OQ)) == 15,
                             1)) {
            const __m256d t = _mm256_round_pd(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            return (I)_mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(t, _mm256_set1_pd(kMagic))),
                                       _mm256_set1_epi64x(kMagicBits));
        }
    }
#endif
    return __builtin_convertvector(x, I);
}
// to_d(to_i(x)): truncation where x fits an int64, else int64's minimum (what cvttsd2si gives).
AOE_INLINE double trunc_i(double x) { return to_d(to_i(x)); }
template <class D>
AOE_INLINE D trunc_i(D x) {
#if defined(__AVX2__) && !defined(__AVX512DQ__)
    if constexpr (sizeof(D) == 32) {
        const __m256d v = (__m256d)x;
        const __m256d mag = _mm256_andnot_pd(_mm256_set1_pd(-0.0), v);
        const __m256d fits = _mm256_cmp_pd(mag, _mm256_set1_pd(9223372036854775808.0), _CMP_LT_OQ);
        return (D)_mm256_blendv_pd(_mm256_set1_pd(-9223372036854775808.0),
                                   _mm256_round_pd(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC), fits);
    }
#endif
    return to_d(to_i(x));
}

// a * b of int64 lanes (wrapping, as vector lanes do). AVX2 has no 64-bit multiply: GCC builds one
// from three 32-bit ones; where every lane of both is below 2^32 (the model's sizes) one is exact.
AOE_INLINE int64_t mul(int64_t a, int64_t b) { return a * b; }
template <class I>
AOE_INLINE I mul(I a, I b) {
#if defined(__AVX2__) && !defined(__AVX512DQ__)
    if constexpr (sizeof(I) == 32) {
        if (__builtin_expect(_mm256_testz_si256(_mm256_or_si256((__m256i)a, (__m256i)b),
                                                _mm256_set1_epi64x(int64_t(0xFFFFFFFF00000000ULL))),
                             1))
            return (I)_mm256_mul_epu32((__m256i)a, (__m256i)b);
    }
#endif
    return a * b;
}
template <class I>
AOE_INLINE I mul(I a, int64_t b) { return mul(a, splat<I>(b)); }
template <class I>
AOE_INLINE I mul(int64_t a, I b) { return mul(splat<I>(a), b); }
template <class A, class B, class C, class... R>
AOE_INLINE auto mul(A a, B b, C c, R... r) { return mul(mul(a, b), c, r...); }
// a * 2^k, wrapping as mul does (a shift of the unsigned bits: defined for every a), k in [0, 63]: one
// instruction where mul checks its operands and may take the long way.
AOE_INLINE int64_t shl(int64_t a, int64_t k) { return int64_t(uint64_t(a) << k); }
template <class I, class K>
AOE_INLINE I shl(I a, K k) {
    typedef uint64_t U __attribute__((vector_size(sizeof(I))));
    if constexpr (std::is_integral_v<K>) return (I)((U)a << k);
    else return (I)((U)a << (U)k);
}

// std::min / std::max, lane by lane (the same operand order, so NaNs pass the same way).
template <class T>
AOE_INLINE T vmin(T a, T b) { return sel(b < a, b, a); }
template <class T>
AOE_INLINE T vmax(T a, T b) { return sel(a < b, b, a); }

// a * b + c, fused where the build fuses (see the top of this file).
AOE_INLINE double fma(double a, double b, double c) {
#if AOE_FUSED
    return __builtin_fma(a, b, c);
#else
    return a * b + c;
#endif
}
template <class D>
AOE_INLINE D fma(D a, D b, D c) {
#if AOE_FUSED && defined(__AVX512F__)
    if constexpr (sizeof(D) == 64) return (D)_mm512_fmadd_pd((__m512d)a, (__m512d)b, (__m512d)c);
#endif
#if AOE_FUSED && defined(__AVX2__)
    if constexpr (sizeof(D) == 32) return (D)_mm256_fmadd_pd((__m256d)a, (__m256d)b, (__m256d)c);
#endif
#if AOE_FUSED
    D r;
    for (unsigned i = 0; i < sizeof(D) / 8; ++i) r[i] = __builtin_fma(a[i], b[i], c[i]);
    return r;
#else
    return a * b + c;
#endif
}

// The integer helpers of sim.h, lane by lane: through double (a 64-bit integer divide costs tens of
// cycles), exact for the operands the model meets (< 2^50).
template <class D>
AOE_INLINE D ceil_pos(D x) {
    const D t = trunc_i(x);
    return t + sel(t < x, splat<D>(1.0), splat<D>(0.0));
}
#if defined(__AVX2__) && !defined(__AVX512DQ__)
// Whether every lane has 0 <= a < 2^51 and 1 <= b <= 2^51: then a, b and their quotient's floor and
// ceiling go through the mantissa exactly, and the rounded double quotient never crosses an integer
// (a / b is at least 1 / b from the next integer, more than its rounding error a / b * 2^-53), so
// fdiv's correction steps change nothing. The model's divisions meet such operands once its rules
// hold; other lanes take the general path, bit for bit as before.
AOE_INLINE bool small_quotient(__m256i a, __m256i b) {
    const __m256i bm1 = _mm256_sub_epi64(b, _mm256_set1_epi64x(1));
    return _mm256_testz_si256(_mm256_or_si256(a, bm1), _mm256_set1_epi64x(~((int64_t(1) << 51) - 1)));
}
AOE_INLINE __m256d small_to_d(__m256i x) {  // 0 <= x <= 2^51
    return _mm256_sub_pd(_mm256_castsi256_pd(_mm256_add_epi64(x, _mm256_set1_epi64x(kMagicBits))), _mm256_set1_pd(kMagic));
}
AOE_INLINE __m256i small_to_i(__m256d t) {  // t a whole number, 0 <= t <= 2^51
    return _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(t, _mm256_set1_pd(kMagic))), _mm256_set1_epi64x(kMagicBits));
}
#endif
template <class I>
AOE_INLINE I ceil_div(I a, I b) {
#if defined(__AVX2__) && !defined(__AVX512DQ__)
    if constexpr (sizeof(I) == 32) {
        if (__builtin_expect(small_quotient((__m256i)a, (__m256i)b), 1)) {
            const __m256d q = _mm256_div_pd(small_to_d((__m256i)a), small_to_d((__m256i)b));
            return (I)small_to_i(_mm256_round_pd(q, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC));  // = ceil_pos
        }
    }
#endif
    return to_i(ceil_pos(to_d(a) / to_d(b)));
}
template <class I>
AOE_INLINE I fdiv(I a, I b) {
#if defined(__AVX2__) && !defined(__AVX512DQ__)
    if constexpr (sizeof(I) == 32) {
        if (__builtin_expect(small_quotient((__m256i)a, (__m256i)b), 1)) {
            const __m256d q = _mm256_div_pd(small_to_d((__m256i)a), small_to_d((__m256i)b));
            return (I)small_to_i(_mm256_round_pd(q, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC));
        }
    }
#endif
    I q = to_i(to_d(a) / to_d(b));
    q = sel(q * b > a, q - 1, q);
    q = sel((q + 1) * b <= a, q + 1, q);
    return q;
}
template <class I>
AOE_INLINE I fmod_i(I a, I b) { return a - mul(fdiv(a, b), b); }
template <class I>
AOE_INLINE I align_up(I a, I b) { return mul(ceil_div(a, b), b); }
template <class I>
AOE_INLINE I align_pow2(I a, int64_t b) { return (a + (b - 1)) & ~(b - 1); }  // b a power of two
