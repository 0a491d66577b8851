// mma.h: tiledmm's stand-in for the CUDA toolkit's header of this name on the emulator
// (tm.compile kernels, tm.run programs, the registry's `wmma` rung): nvcuda::wmma, the warp
// matrix functions of the CUDA Programming Guide (issue 47).
//
//   fragment<matrix_a | matrix_b | accumulator, M, N, K, T, row_major | col_major>
//     __half, __nv_bfloat16 -> float or __half   m16n16k16, m32n8k16, m8n32k16
//     precision::tf32 -> float                   m16n16k8 (with __float_to_tf32)
//     double -> double                           m8n8k4
//     signed char, unsigned char -> int          m16n16k16, m32n8k16, m8n32k16
//   load_matrix_sync, store_matrix_sync (ldm; mem_row_major / mem_col_major for accumulators),
//   fill_fragment, mma_sync, num_elements, x[].
//
// Warp-collective: load, store and mma are warp operations (emu/cuda_emu.h's __syncwarp), so a
// kernel that calls them runs on fibers, and a warp whose lanes do not all reach one is reported
// as a stuck warp barrier at the caller's line, as shuffles are. mma_sync publishes each lane's
// fragments, the warp meets, lane 0 computes the whole product, the warp meets again and each
// lane takes its elements.
//
// x[] order: the PTX ISA's mma.m16n8k* fragment layouts (groupID = lane >> 2,
// threadID_in_group = lane % 4), tiled over the wmma shape, so that a lane holds the elements the
// GPU's lane holds (tm_wmma::coord). The half fragments of matrix_a/matrix_b have 16 elements for
// every shape (as nvcc's mma.h declares) although a lane owns M*K/32 (K*N/32) of them: the
// extra elements repeat the first ones (x[i] is element i mod M*K/32).
//
// Numerics (DESIGN.md, "Tensor cores: what the H200 does"; Khattak & Mikaitis's Hopper model):
// products exact; the products of one k-group (16 for FP16/BF16, 4 for TF32) and C aligned to
// the largest exponent among them (a product's: its inputs' exponents summed, the significand
// product in [1, 4) not renormalised), each truncated toward zero to 2 bits below FP32's 24-bit
// significand at that exponent, summed exactly, the sum rounded toward zero (FP32 output) or to
// nearest even (FP16 output). TF32 inputs not converted by __float_to_tf32 lose their low 13
// bits (truncation); __float_to_tf32 rounds to nearest, ties away (cvt.rna). Subnormal inputs
// are kept. double: a chain of IEEE fused multiply-adds from C along k. char: exact int32.
#pragma once
#include "tiledmm_kernel.h"
#include "tm_half_types.h"

#include <algorithm>

#ifdef TM_EMU
namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};
}  // namespace precision

}  // namespace wmma
}  // namespace nvcuda

namespace tm_wmma {
using namespace nvcuda::wmma;

template <typename TmT_>
struct storage {
    typedef TmT_ type;
};
template <>
struct storage<precision::tf32> {
    typedef float type;
};

// The kind of an input element type: 0 16-bit float, 1 TF32, 2 double, 3 8-bit integer.
template <typename TmT_>
struct kind {
    static constexpr int value = -1;
};
template <>
struct kind<__half> {
    static constexpr int value = 0;
};
template <>
struct kind<__nv_bfloat16> {
    static constexpr int value = 0;
};
template <>
struct kind<precision::tf32> {
    static constexpr int value = 1;
};
template <>
struct kind<double> {
    static constexpr int value = 2;
};
template <>
struct kind<signed char> {
    static constexpr int value = 3;
};
template <>
struct kind<unsigned char> {
    static constexpr int value = 3;
};

// Rows and columns of the matrix a fragment of `Use` holds.
template <typename TmUse_, int TmM_, int TmN_, int TmK_>
struct dims;
template <int TmM_, int TmN_, int TmK_>
struct dims<matrix_a, TmM_, TmN_, TmK_> {
    static constexpr int rows = TmM_, cols = TmK_;
};
template <int TmM_, int TmN_, int TmK_>
struct dims<matrix_b, TmM_, TmN_, TmK_> {
    static constexpr int rows = TmK_, cols = TmN_;
};
template <int TmM_, int TmN_, int TmK_>
struct dims<accumulator, TmM_, TmN_, TmK_> {
    static constexpr int rows = TmM_, cols = TmN_;
};

template <int TmM_, int TmN_, int TmK_, typename TmT_>
struct valid_shape {
    static constexpr int k = kind<TmT_>::value;
    static constexpr bool value =
        ((k == 0 || k == 3) && TmK_ == 16 &&
         ((TmM_ == 16 && TmN_ == 16) || (TmM_ == 32 && TmN_ == 8) || (TmM_ == 8 && TmN_ == 32))) ||
        (k == 1 && TmM_ == 16 && TmN_ == 16 && TmK_ == 8) ||
        (k == 2 && TmM_ == 8 && TmN_ == 8 && TmK_ == 4) ||
        (k == -1);   // accumulators: checked by mma_sync against the inputs
};

// Elements per lane: the matrix's elements over 32 lanes; __half's matrix_a and matrix_b
// fragments have 16 whatever the shape (nvcc's mma.h).
template <typename TmUse_, int TmM_, int TmN_, int TmK_, typename TmT_>
struct count {
    static constexpr int unique =
        dims<TmUse_, TmM_, TmN_, TmK_>::rows * dims<TmUse_, TmM_, TmN_, TmK_>::cols / 32;
    static constexpr int value =
        std::is_same<TmUse_, accumulator>::value || !std::is_same<TmT_, __half>::value ? unique
                                                                                       : 16;
};

// The (row, col) in its matrix of element j (0 <= j < M*K/32...) of lane `l`'s fragment: the
// PTX ISA's mma.m16n8k16 (16- and 8-bit inputs), mma.m16n8k8 (TF32) and mma.m8n8k4 (FP64)
// fragment layouts, tiled over the wmma shape.
// `use`: 0 matrix_a, 1 matrix_b, 2 accumulator; `k`: kind (accumulators: any).
static constexpr inline void coord(int use, int k, int TmM_, int TmN_, int TmK_, int l, int j,
                                   int *r, int *c)
{
    const int g = l >> 2, t = l & 3;
    if (TmM_ == 8 && TmN_ == 32) {
        // m8n32k16 is computed as the transposed m32n8k16 product, D^T = B^T A^T: B is the mma's
        // A operand and A its B, each element at its transposed place (measured on the H200:
        // benchmarks/mma_numerics_probe.cu).
        coord(use == 2 ? 2 : 1 - use, k, 32, 8, TmK_, l, j, c, r);
        return;
    }
    if (use == 0) {
        if (k == 0) {
            const int tile = j / 8, q = j % 8;
            *r = tile * 16 + g + 8 * ((q >> 1) & 1);
            *c = t * 2 + (q & 1) + 8 * (q >> 2);
        } else if (k == 3) {
            const int tile = j / 8, q = j % 8;
            *r = tile * 16 + g + 8 * (q >> 2);
            *c = t * 4 + (q & 3);
        } else if (k == 1) {
            *r = g + 8 * (j & 1);
            *c = t + 4 * (j >> 1);
        } else {
            *r = g;
            *c = t;
        }
    } else if (use == 1) {
        if (k == 0) {
            const int tile = j / 4, q = j % 4;
            *r = t * 2 + (q & 1) + 8 * (q >> 1);
            *c = tile * 8 + g;
        } else if (k == 3) {
            const int tile = j / 4, q = j % 4;
            *r = t * 4 + q;
            *c = tile * 8 + g;
        } else if (k == 1) {
            const int tile = j / 2, q = j % 2;
            *r = t + 4 * q;
            *c = tile * 8 + g;
        } else {
            *r = t;
            *c = g;
        }
    } else {
        if (TmM_ == 8) {   // m8n8k4 (FP64): two elements each
            *r = g;
            *c = t * 2 + (j & 1);
            return;
        }
        const int tiles_n = TmN_ / 8, tile = j / 4, q = j % 4;
        *r = (tile / tiles_n) * 16 + g + 8 * (q >> 1);
        *c = (tile % tiles_n) * 8 + t * 2 + (q & 1);
    }
}

template <typename TmUse_>
struct use_index;
template <>
struct use_index<matrix_a> {
    static constexpr int value = 0;
};
template <>
struct use_index<matrix_b> {
    static constexpr int value = 1;
};
template <>
struct use_index<accumulator> {
    static constexpr int value = 2;
};

// Where element j of lane l's fragment sits in its matrix (row * cols + col): coord's layouts
// tabled when the program compiles, for mma_sync's gather and scatter of the warp's 32 lanes
// (coord called per element was a tenth of a 16x16x16 product's time).
template <int TmUse_, int TmKind_, int TmM_, int TmN_, int TmK_, int TmCols_, int TmCount_>
struct places {
    int at[32][TmCount_];
    constexpr places() : at()
    {
        for (int l = 0; l < 32; ++l)
            for (int j = 0; j < TmCount_; ++j) {
                int r = 0, c = 0;
                coord(TmUse_, TmKind_, TmM_, TmN_, TmK_, l, j, &r, &c);
                at[l][j] = r * TmCols_ + c;
            }
    }
};
template <int TmUse_, int TmKind_, int TmM_, int TmN_, int TmK_, int TmCols_, int TmCount_>
inline constexpr places<TmUse_, TmKind_, TmM_, TmN_, TmK_, TmCols_, TmCount_> places_v{};

// A lane's element as a double, exactly (TF32 fragments hold floats; their truncation is
// mma_sync's).
template <typename TmS_>
static inline double value(const TmS_ &v)
{
    return (double)(float)v;
}
static inline double value(const __half &v)
{
    // on the bits: the host compiler's _Float16 conversion is a library call without F16C
    unsigned short h;
    std::memcpy(&h, &v, 2);
    return tm_half::half_to_float(h);
}
static inline double value(const float &v)
{
    return v;
}
static inline double value(const double &v)
{
    return v;
}
static inline double value(const int &v)
{
    return v;
}
static inline double value(const signed char &v)
{
    return v;
}
static inline double value(const unsigned char &v)
{
    return v;
}

template <typename TmS_>
static inline TmS_ from_double(double v)
{
    return TmS_(v);
}
template <>
inline float from_double<float>(double v)
{
    return (float)v;
}
template <>
inline int from_double<int>(double v)
{
    return (int)(long long)v;
}

// FP32 input to the TF32 datapath: the low 13 bits dropped.
static inline double tf32_truncate(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (!std::isnan(f)) u &= ~0x1fffu;
    float g;
    std::memcpy(&g, &u, 4);
    return g;
}

// x rounded toward zero to FP32: the nearest float, stepped one unit toward zero (its bits
// less one) where it rounded away.
static inline float round_toward_zero(double x)
{
    float f = (float)x;
    if (std::isnan(x) || std::isinf(x)) return f;
    if (std::isinf(f)) return std::copysign(FLT_MAX, f);
    if (std::fabs((double)f) > std::fabs(x)) {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        --u;
        std::memcpy(&f, &u, 4);
    }
    return f;
}

// A power of two as a double from its biased exponent field (1 <= field <= 2046).
static inline double pow2_field(int field)
{
    const uint64_t u = (uint64_t)field << 52;
    double d;
    std::memcpy(&d, &u, 8);
    return d;
}

// The biased exponent field of a double.
static inline int field_of(double x)
{
    uint64_t u;
    std::memcpy(&u, &x, 8);
    return (int)((u >> 52) & 0x7ff);
}

// One k-group of the tensor core: c + sum of n exact products, aligned to the largest exponent
// among them (c included), each truncated toward zero 2 bits below FP32's significand (a
// multiple of 2^(E-25)), summed exactly. The result before the output's rounding. A product's
// exponent is its inputs' exponents summed (`pfield`, biased): its significand, in [1, 4), is not
// renormalised before the alignment (measured on the H200: 1.5 * 1.5 - 2^-25 gives
// 2.25 - 2^-22, where a renormalised 2.25 would align the -2^-25 away).
//
// Every term is a normal double or zero (FP16, BF16 and TF32 products and FP32 or FP16 C are
// far inside double's range), so with E from the largest exponent, t * 2^(25-E) is exact and
// below 2^27 in magnitude, the conversion to an integer truncates it toward zero, and the 17
// integers add exactly: one multiply and one conversion a term (the exact-integer model at a
// fraction of the shifts' cost).
static inline double block_sum(double c, const double *prod, const int *pfield, int n)
{
    int emax = field_of(c);
    bool special = emax == 0x7ff;
    for (int i = 0; i < n; ++i) {
        special = special || field_of(prod[i]) == 0x7ff;
        if (prod[i] != 0.0) emax = pfield[i] > emax ? pfield[i] : emax;
    }
    if (special) {   // Inf or NaN among them: IEEE arithmetic says what comes out
        double s = c;
        for (int i = 0; i < n; ++i)
            s += prod[i];
        return s;
    }
    if (emax == 0) return c + 0.0;   // all zero
    // 2^(25-E) and 2^(E-25) as exponent fields: 1023 + 25 - (emax - 1023) and emax - 25, both
    // in range for every exponent these terms can have (emax from 26 to 2070 - 26).
    const double scale = pow2_field(2071 - emax), unit = pow2_field(emax - 25);
    int64_t sum = (int64_t)(c * scale);
    for (int i = 0; i < n; ++i)
        sum += (int64_t)(prod[i] * scale);
    return (double)sum * unit;
}

// An input's power of two (a product's exponent is its inputs' summed), at least
// 2^(emin_field - 1023) (the inputs' smallest normal exponent: subnormal inputs align as the
// smallest normal), zero for a zero input.
static inline double input_power(double x, int emin_field)
{
    const double p = pow2_field(field_of(x)), emin = pow2_field(emin_field);
    return x == 0.0 ? 0.0 : p < emin ? emin : p;
}

// input_power of each of B's elements: once per product, for every row of C.
template <int TmN_, int TmK_>
static inline void b_powers(const double *b, double *pb, int emin_field)
{
    for (int i = 0; i < TmK_ * TmN_; ++i)
        pb[i] = input_power(b[i], emin_field);
}

// block_sum for a row of C at once, on finite inputs: sum[j] = block_sum(c[j],
// {a[k] * b[k * N + j]}, G) for the N columns j, two columns at a time as vectors of two doubles
// (GCC's vector extensions: SSE2 or NEON, which every target has; the largest exponent is kept as
// a power of two in a double, as SSE2 has no 64-bit integer compare, and wider vectors spilled).
// Each term times 2^(25-E) converted to int32 truncates as block_sum's int64 does (below 2^27 in
// magnitude) and back to double, where the 17 integers add exactly. A column without a nonzero
// term takes E = 2^-997, which gives +0.0 as block_sum's c + 0.0 does.
template <int TmN_, int TmG_>
static inline void row_block_sums(const double *a, const double *b, const double *pb,
                                  const double *c, double *sum, int emin_field)
{
    typedef double vd __attribute__((vector_size(16)));
    typedef long long vl __attribute__((vector_size(16)));
    typedef int vi __attribute__((vector_size(8)));
    const vl exponent = (vl){} + 0x7ff0000000000000ll;
    const double floor = pow2_field(26);
    double pa[TmG_];
    for (int k = 0; k < TmG_; ++k)
        pa[k] = input_power(a[k], emin_field);
    for (int j = 0; j < TmN_; j += 2) {
        vd cv, top;
        std::memcpy(&cv, c + j, sizeof cv);
        top = (vd)((vl)cv & exponent);
        for (int k = 0; k < TmG_; ++k) {
            vd p;
            std::memcpy(&p, pb + k * TmN_ + j, sizeof p);
            p *= pa[k];
            top = p > top ? p : top;
        }
        top = top < floor ? (vd){} + floor : top;
        const vd scale = (vd)(((vl){} + (2071ll << 52)) - (vl)top),
                 unit = (vd)((vl)top - (25ll << 52));
        vd s = __builtin_convertvector(__builtin_convertvector(cv * scale, vi), vd);
        for (int k = 0; k < TmG_; ++k) {
            vd bk;
            std::memcpy(&bk, b + k * TmN_ + j, sizeof bk);
            s += __builtin_convertvector(__builtin_convertvector(a[k] * bk * scale, vi), vd);
        }
        const vd r = s * unit;
        std::memcpy(sum + j, &r, sizeof r);
    }
}

// False where one of the n values is Inf or NaN.
static inline bool all_finite(const double *x, int n)
{
    double z = 0.0;
    for (int i = 0; i < n; ++i)
        z += x[i] * 0.0;
    return z == 0.0;
}

// Per OS thread (a block's fibers share one): each lane's fragment pointers for mma_sync, and
// each warp's product.
struct warp_scratch {
    const void *a[1024], *b[1024], *c[1024];
    double d[32][256];
    double TmA_[32 * 16], TmB_[16 * 32],
        TmC_[32 * 32];   // lane 0's gathered operands (fibers do not
    // switch while it computes)
};
static inline warp_scratch &scratch()
{
    static thread_local warp_scratch *s = nullptr;
    if (!s) s = new warp_scratch();
    return *s;
}

static inline int lane_index()
{
    const int t = tm_emu_tls.linear_tid;
    if (t < 0) {
        fprintf(stderr, "tiledmm emulator: nvcuda::wmma called in a kernel run as thread loops "
                        "(a bug of tiledmm's split: wmma kernels must run on fibers)\n");
        abort();
    }
    return t;
}

static inline int lanes_in_warp(int t)
{
    const int n = (int)(blockDim.x * blockDim.y * blockDim.z), base = t & ~31;
    return n - base >= 32 ? 32 : n - base;
}

}   // namespace tm_wmma

namespace nvcuda {
namespace wmma {

template <typename TmUse_, int TmM_, int TmN_, int TmK_, typename TmT_, typename Layout = void>
class fragment {
    static_assert(tm_wmma::valid_shape<TmM_, TmN_, TmK_, TmT_>::value ||
                      std::is_same<TmUse_, accumulator>::value,
                  "nvcuda::wmma::fragment: this shape and element type are not a documented "
                  "combination (half/bf16/char at m16n16k16, m32n8k16, m8n32k16; tf32 at "
                  "m16n16k8; double at m8n8k4)");

  public:
    typedef TmT_ element_type;
    typedef typename tm_wmma::storage<TmT_>::type storage_element_type;
    enum { num_elements = tm_wmma::count<TmUse_, TmM_, TmN_, TmK_, TmT_>::value };
    storage_element_type x[num_elements];
};

template <typename TmUse_, int TmM_, int TmN_, int TmK_, typename TmT_, typename TmL_>
static inline void fill_fragment(
    fragment<TmUse_, TmM_, TmN_, TmK_, TmT_, TmL_> &f,
    const typename fragment<TmUse_, TmM_, TmN_, TmK_, TmT_, TmL_>::storage_element_type &v)
{
    for (int i = 0; i < fragment<TmUse_, TmM_, TmN_, TmK_, TmT_, TmL_>::num_elements; ++i)
        f.x[i] = v;
}

// __float_to_tf32: f rounded to TF32 (10 fraction bits), ties away from zero (cvt.rna.tf32.f32),
// as a float with its low 13 bits zero.
static inline float __float_to_tf32(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) {   // not Inf or NaN
        u += 0x1000u;
        u &= ~0x1fffu;
    }
    float g;
    std::memcpy(&g, &u, 4);
    return g;
}

// matrix_a / matrix_b: element (r, c) of the fragment's matrix is p[r * ldm + c] (row_major)
// or p[c * ldm + r] (col_major). `P`: a pointer, or check mode's bounds-checked pointer.
template <typename TmUse_, int TmM_, int TmN_, int TmK_, typename TmT_, typename TmL_,
          typename TmP_>
static inline void load_matrix_sync(fragment<TmUse_, TmM_, TmN_, TmK_, TmT_, TmL_> &f, TmP_ p,
                                    unsigned ldm, const char *file = __builtin_FILE(),
                                    int line = __builtin_LINE())
{
    static_assert(
        !std::is_same<TmUse_, accumulator>::value,
        "load_matrix_sync of an accumulator takes a layout_t (mem_row_major or mem_col_major)");
    static_assert(std::is_same<TmL_, row_major>::value || std::is_same<TmL_, col_major>::value,
                  "matrix_a and matrix_b fragments take row_major or col_major");
    const int t = tm_wmma::lane_index(), l = t & 31;
    __syncwarp(0xffffffffu, file, line);
    typedef fragment<TmUse_, TmM_, TmN_, TmK_, TmT_, TmL_> TmF_;
    const int u = tm_wmma::count<TmUse_, TmM_, TmN_, TmK_, TmT_>::unique;
    for (int i = 0; i < TmF_::num_elements; ++i) {
        int r, c;
        tm_wmma::coord(tm_wmma::use_index<TmUse_>::value, tm_wmma::kind<TmT_>::value, TmM_, TmN_,
                       TmK_, l, i % u, &r, &c);
        const size_t off =
            std::is_same<TmL_, row_major>::value ? (size_t)r * ldm + c : (size_t)c * ldm + r;
        f.x[i] = p[off];
    }
}

template <int TmM_, int TmN_, int TmK_, typename TmT_, typename TmP_>
static inline void load_matrix_sync(fragment<accumulator, TmM_, TmN_, TmK_, TmT_> &f, TmP_ p,
                                    unsigned ldm, layout_t layout,
                                    const char *file = __builtin_FILE(),
                                    int line = __builtin_LINE())
{
    const int t = tm_wmma::lane_index(), l = t & 31;
    __syncwarp(0xffffffffu, file, line);
    for (int i = 0; i < fragment<accumulator, TmM_, TmN_, TmK_, TmT_>::num_elements; ++i) {
        int r, c;
        tm_wmma::coord(2, 0, TmM_, TmN_, TmK_, l, i, &r, &c);
        f.x[i] = p[layout == mem_row_major ? (size_t)r * ldm + c : (size_t)c * ldm + r];
    }
}

template <int TmM_, int TmN_, int TmK_, typename TmT_, typename TmP_>
static inline void store_matrix_sync(TmP_ p, const fragment<accumulator, TmM_, TmN_, TmK_, TmT_> &f,
                                     unsigned ldm, layout_t layout,
                                     const char *file = __builtin_FILE(),
                                     int line = __builtin_LINE())
{
    const int t = tm_wmma::lane_index(), l = t & 31;
    __syncwarp(0xffffffffu, file, line);
    for (int i = 0; i < fragment<accumulator, TmM_, TmN_, TmK_, TmT_>::num_elements; ++i) {
        int r, c;
        tm_wmma::coord(2, 0, TmM_, TmN_, TmK_, l, i, &r, &c);
        p[layout == mem_row_major ? (size_t)r * ldm + c : (size_t)c * ldm + r] = f.x[i];
    }
}

// d = a * b + c for the warp. d and c may be the same fragment.
template <int TmM_, int TmN_, int TmK_, typename TmTA_, typename TmLA_, typename TmTB_,
          typename TmLB_, typename TmTC_, typename TmTD_>
static inline void mma_sync(fragment<accumulator, TmM_, TmN_, TmK_, TmTD_> &d,
                            const fragment<matrix_a, TmM_, TmN_, TmK_, TmTA_, TmLA_> &a,
                            const fragment<matrix_b, TmM_, TmN_, TmK_, TmTB_, TmLB_> &b,
                            const fragment<accumulator, TmM_, TmN_, TmK_, TmTC_> &c,
                            bool satf = false, const char *file = __builtin_FILE(),
                            int line = __builtin_LINE())
{
    static_assert(std::is_same<TmTA_, TmTB_>::value,
                  "mma_sync: matrix_a and matrix_b hold the same type");
    constexpr int kd = tm_wmma::kind<TmTA_>::value;
    static_assert(kd != 0 ||
                      ((std::is_same<TmTC_, float>::value || std::is_same<TmTC_, __half>::value) &&
                       (std::is_same<TmTD_, float>::value || std::is_same<TmTD_, __half>::value) &&
                       (std::is_same<TmTA_, __half>::value ||
                        (std::is_same<TmTC_, float>::value && std::is_same<TmTD_, float>::value))),
                  "mma_sync: half inputs accumulate in float or __half, bf16 inputs in float");
    static_assert(kd != 1 ||
                      (std::is_same<TmTC_, float>::value && std::is_same<TmTD_, float>::value),
                  "mma_sync: tf32 inputs accumulate in float");
    static_assert(kd != 2 ||
                      (std::is_same<TmTC_, double>::value && std::is_same<TmTD_, double>::value),
                  "mma_sync: double inputs accumulate in double");
    static_assert(kd != 3 || (std::is_same<TmTC_, int>::value && std::is_same<TmTD_, int>::value),
                  "mma_sync: char inputs accumulate in int");
    typedef fragment<matrix_a, TmM_, TmN_, TmK_, TmTA_, TmLA_> TmFA_;
    typedef fragment<matrix_b, TmM_, TmN_, TmK_, TmTB_, TmLB_> TmFB_;
    typedef fragment<accumulator, TmM_, TmN_, TmK_, TmTC_> TmFC_;
    const int t = tm_wmma::lane_index(), l = t & 31, base = t - l, w = t >> 5;
    tm_wmma::warp_scratch &s = tm_wmma::scratch();
    s.a[t] = &a;
    s.b[t] = &b;
    s.c[t] = &c;
    __syncwarp(0xffffffffu, file, line);
    if (l == 0) {   // the warp's product, computed once
        double(&TmA_)[TmM_][TmK_] = *reinterpret_cast<double(*)[TmM_][TmK_]>(s.TmA_);
        double(&TmB_)[TmK_][TmN_] = *reinterpret_cast<double(*)[TmK_][TmN_]>(s.TmB_);
        double(&TmC_)[TmM_][TmN_] = *reinterpret_cast<double(*)[TmM_][TmN_]>(s.TmC_);
        constexpr int ua = tm_wmma::count<matrix_a, TmM_, TmN_, TmK_, TmTA_>::unique,
                      ub = tm_wmma::count<matrix_b, TmM_, TmN_, TmK_, TmTB_>::unique,
                      uc = TmFC_::num_elements;
        constexpr const auto &at_a = tm_wmma::places_v<0, kd, TmM_, TmN_, TmK_, TmK_, ua>.at,
                             &at_b = tm_wmma::places_v<1, kd, TmM_, TmN_, TmK_, TmN_, ub>.at,
                             &at_c = tm_wmma::places_v<2, kd, TmM_, TmN_, TmK_, TmN_, uc>.at;
        const int lanes = tm_wmma::lanes_in_warp(t);
        if (lanes < 32) {   // a partial warp: the missing lanes' elements are zero
            std::memset(s.TmA_, 0, sizeof TmA_);
            std::memset(s.TmB_, 0, sizeof TmB_);
            std::memset(s.TmC_, 0, sizeof TmC_);
        }
        for (int q = 0; q < lanes; ++q) {
            const TmFA_ &fa = *static_cast<const TmFA_ *>(s.a[base + q]);
            const TmFB_ &fb = *static_cast<const TmFB_ *>(s.b[base + q]);
            const TmFC_ &fc = *static_cast<const TmFC_ *>(s.c[base + q]);
            for (int j = 0; j < ua; ++j)
                s.TmA_[at_a[q][j]] =
                    kd == 1 ? tm_wmma::tf32_truncate((float)fa.x[j]) : tm_wmma::value(fa.x[j]);
            for (int j = 0; j < ub; ++j)
                s.TmB_[at_b[q][j]] =
                    kd == 1 ? tm_wmma::tf32_truncate((float)fb.x[j]) : tm_wmma::value(fb.x[j]);
            for (int j = 0; j < uc; ++j)
                s.TmC_[at_c[q][j]] = tm_wmma::value(fc.x[j]);
        }
        if (kd == 2 || kd == 3) {
            for (int r = 0; r < TmM_; ++r)
                for (int cc = 0; cc < TmN_; ++cc) {
                    double v;
                    if (kd == 2) {   // FP64: IEEE fused multiply-adds along k
                        v = TmC_[r][cc];
                        for (int k = 0; k < TmK_; ++k)
                            v = std::fma(TmA_[r][k], TmB_[k][cc], v);
                    } else {   // integers: exact, wrapping to int32
                        long long acc = (long long)TmC_[r][cc];
                        for (int k = 0; k < TmK_; ++k)
                            acc += (long long)TmA_[r][k] * (long long)TmB_[k][cc];
                        v = (double)(int)(unsigned)(unsigned long long)acc;
                    }
                    s.d[w][r * TmN_ + cc] = v;
                }
        } else {   // FP16/BF16 (k-group 16) and TF32 (k-groups of 4, measured on the H200): the
            // block FMA model, by rows
            constexpr int group = kd == 1 ? 4 : 16;
            // the inputs' smallest normal exponent, biased: FP16's -14, BF16's and TF32's -126
            constexpr int emin_field = std::is_same<TmTA_, __half>::value ? 1009 : 897;
            // Inf or NaN among the inputs: term by term (block_sum), where IEEE arithmetic says
            // what comes out
            const bool finite = tm_wmma::all_finite(s.TmA_, TmM_ * TmK_) &&
                                tm_wmma::all_finite(s.TmB_, TmK_ * TmN_) &&
                                tm_wmma::all_finite(s.TmC_, TmM_ * TmN_);
            double pb[TmK_ * TmN_];
            if (finite) tm_wmma::b_powers<TmN_, TmK_>(s.TmB_, pb, emin_field);
            for (int r = 0; r < TmM_; ++r) {
                double v[TmN_], sum[TmN_];
                for (int cc = 0; cc < TmN_; ++cc)
                    v[cc] = TmC_[r][cc];
                for (int k0 = 0; k0 < TmK_; k0 += group) {
                    if (finite)
                        tm_wmma::row_block_sums<TmN_, group>(&TmA_[r][k0], &TmB_[k0][0],
                                                             &pb[k0 * TmN_], v, sum, emin_field);
                    else
                        for (int cc = 0; cc < TmN_; ++cc) {
                            double prod[group];
                            int pfield[group];
                            for (int k = 0; k < group; ++k) {
                                const double x = TmA_[r][k0 + k], y = TmB_[k0 + k][cc];
                                prod[k] = x * y;
                                pfield[k] = std::max(tm_wmma::field_of(x), emin_field) +
                                            std::max(tm_wmma::field_of(y), emin_field) - 1023;
                            }
                            sum[cc] = tm_wmma::block_sum(v[cc], prod, pfield, group);
                        }
                    for (int cc = 0; cc < TmN_; ++cc) {
                        if (std::is_same<TmTD_, __half>::value && k0 + group >= TmK_) {
                            v[cc] = (float)__half(sum[cc]);   // round to nearest even to FP16
                        } else {
                            v[cc] = tm_wmma::round_toward_zero(sum[cc]);
                            if (satf && std::isinf(v[cc])) v[cc] = std::copysign(FLT_MAX, v[cc]);
                        }
                    }
                }
                for (int cc = 0; cc < TmN_; ++cc)
                    s.d[w][r * TmN_ + cc] = satf && std::isnan(v[cc]) ? 0.0 : v[cc];
            }
        }
    }
    __syncwarp(0xffffffffu, file, line);
    constexpr int ud = fragment<accumulator, TmM_, TmN_, TmK_, TmTD_>::num_elements;
    constexpr const auto &at_d = tm_wmma::places_v<2, kd, TmM_, TmN_, TmK_, TmN_, ud>.at;
    for (int i = 0; i < ud; ++i)
        d.x[i] = tm_wmma::from_double<TmTD_>(s.d[w][at_d[l][i]]);
}

}   // namespace wmma
}   // namespace nvcuda

#endif   // TM_EMU
