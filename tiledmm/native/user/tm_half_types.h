// tm_half_types.h: the emulator's 16-bit floating-point types for <mma.h> (nvcuda::wmma; issue
// 47): __half is cuda_fp16.h's (one definition: a program may include both), __nv_bfloat16 is
// here, storage and conversions only: its constructors and __float2bfloat16 round to nearest
// even; its conversion to float is exact; arithmetic goes through float.
#pragma once
#ifndef TM_HALF_TYPES_H
#define TM_HALF_TYPES_H

#include <cmath>
#include <cstdint>
#include <cstring>

#include "cuda_fp16.h"

namespace tm_half {

// The binary16 bits nearest to x (ties to even), from a double so that float and double
// sources round once.
static inline unsigned short half_bits(double x)
{
    unsigned short sign = std::signbit(x) ? 0x8000u : 0u;
    if (std::isnan(x)) return (unsigned short)(sign | 0x7e00u);
    double a = std::fabs(x);
    if (a == 0.0) return sign;
    if (std::isinf(a) || a >= 65520.0) return (unsigned short)(sign | 0x7c00u);
    int e = std::ilogb(a);
    if (e < -14) {   // subnormal: a multiple of 2^-24
        double m = std::nearbyint(std::ldexp(a, 24));
        return (unsigned short)(sign | (unsigned short)m);   // m == 1024 is the least normal's bits
    }
    double m = std::nearbyint(std::ldexp(a, 10 - e));   // in [1024, 2048]
    if (m >= 2048.0) {
        m = 1024.0;
        ++e;
    }
    if (e > 15) return (unsigned short)(sign | 0x7c00u);
    return (unsigned short)(sign | ((unsigned)(e + 15) << 10) | ((unsigned)m - 1024u));
}

static inline float half_to_float(unsigned short h)
{
    // on the bits, without a branch (the tensor-core emulation converts every operand): a
    // normal half's exponent and fraction, shifted into a float's, times 2^112 rebias it; a
    // subnormal's fraction m is m 2^-24 (both exact); Inf and NaN keep their fraction
    const uint32_t em = h & 0x7fffu;
    uint32_t u = em << 13;
    float f;
    std::memcpy(&f, &u, 4);
    f = em < 0x400u ? (float)(int)em * 0x1p-24f : f * 0x1p112f;
    std::memcpy(&u, &f, 4);
    u |= em >= 0x7c00u ? 0x7f800000u : 0u;
    u |= (uint32_t)(h & 0x8000u) << 16;
    std::memcpy(&f, &u, 4);
    return f;
}

static inline unsigned short bf16_bits(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (std::isnan(f)) return (unsigned short)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

static inline unsigned short bf16_bits(double x)
{
    // round once: a double's nearest bf16 (8-bit significand) via its exact float truncation
    // would round twice, so round the double directly
    if (std::isnan(x)) return 0x7fc0u;
    unsigned short sign = std::signbit(x) ? 0x8000u : 0u;
    double a = std::fabs(x);
    if (a == 0.0) return sign;
    if (std::isinf(a)) return (unsigned short)(sign | 0x7f80u);
    int e = std::ilogb(a);
    if (e < -126) e = -126;   // subnormal: a multiple of 2^-133
    double m = std::nearbyint(std::ldexp(a, 7 - e));
    double r = std::ldexp(m, e - 7);
    float f = (float)r;   // exact unless it overflows
    if (std::isinf(f)) return (unsigned short)(sign | 0x7f80u);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return (unsigned short)(sign | (u >> 16));
}

static inline float bf16_to_float(unsigned short h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

}   // namespace tm_half

struct __nv_bfloat16_raw {
    unsigned short x;
};

struct __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(const __nv_bfloat16_raw &r) : __x(r.x) {}
    __nv_bfloat16(float f) : __x(tm_half::bf16_bits(f)) {}
    __nv_bfloat16(double d) : __x(tm_half::bf16_bits(d)) {}
    __nv_bfloat16(int i) : __x(tm_half::bf16_bits((double)i)) {}
    operator float() const { return tm_half::bf16_to_float(__x); }
    operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
    __nv_bfloat16 &operator=(float f)
    {
        __x = tm_half::bf16_bits(f);
        return *this;
    }
};

typedef __nv_bfloat16 nv_bfloat16;

static inline __nv_bfloat16 __float2bfloat16(float f)
{
    return __nv_bfloat16(f);
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    return __nv_bfloat16(f);
}
static inline float __bfloat162float(__nv_bfloat16 h)
{
    return (float)h;
}
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u)
{
    return __nv_bfloat16(__nv_bfloat16_raw{u});
}
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h)
{
    return h.__x;
}

#endif   // TM_HALF_TYPES_H
