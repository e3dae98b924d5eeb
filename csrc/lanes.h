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

AOE_INLINE double to_d(int64_t x) { return double(x); }
AOE_INLINE int64_t to_i(double x) { return int64_t(x); }
template <class I>
AOE_INLINE auto to_d(I x) {
    typedef double D __attribute__((vector_size(sizeof(I))));
    return __builtin_convertvector(x, D);
}
template <class D>
AOE_INLINE auto to_i(D x) {
    typedef int64_t I __attribute__((vector_size(sizeof(D))));
    return __builtin_convertvector(x, I);
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
    const D t = to_d(to_i(x));
    return t + sel(t < x, splat<D>(1.0), splat<D>(0.0));
}
template <class I>
AOE_INLINE I ceil_div(I a, I b) { return to_i(ceil_pos(to_d(a) / to_d(b))); }
template <class I>
AOE_INLINE I fdiv(I a, I b) {
    I q = to_i(to_d(a) / to_d(b));
    q = sel(q * b > a, q - 1, q);
    q = sel((q + 1) * b <= a, q + 1, q);
    return q;
}
template <class I>
AOE_INLINE I fmod_i(I a, I b) { return a - fdiv(a, b) * b; }
template <class I>
AOE_INLINE I align_up(I a, I b) { return ceil_div(a, b) * b; }
template <class I>
AOE_INLINE I align_pow2(I a, int64_t b) { return (a + (b - 1)) & ~(b - 1); }  // b a power of two
