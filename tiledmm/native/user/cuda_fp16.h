// cuda_fp16.h: tiledmm's stand-in for the CUDA toolkit's header of this name, on the emulator
// (issue 43): __half and __half2 (half, half2) held as IEEE binary16 (the compiler's binary16, tm_f16_t:
// each operation rounds to half, as the GPU's half arithmetic does), their conversions
// (__float2half{,_rn,_rz}, __half2float, __float2half2_rn, __floats2half2_rn, __low2float,
// __high2float, ...), arithmetic (__hadd, __hmul, __hfma and their ...2 forms, operators),
// comparisons, and shuffles (the warp intrinsics take any type of 8 bytes or less).
#pragma once
#ifndef __CUDA_FP16_H__
#define __CUDA_FP16_H__
#endif
#ifndef __CUDA_FP16_HPP__
#define __CUDA_FP16_HPP__
#endif
#include "tiledmm_kernel.h"

// The host compiler's binary16: _Float16 where C++ has it (x86-64), __fp16 on 64-bit Arm, where
// GCC 12's C++ has no _Float16 (arithmetic on __fp16 is done in float and rounded once to half).
#if defined(__aarch64__)
typedef __fp16 tm_f16_t;
#else
typedef _Float16 tm_f16_t;
#endif

// plain C++ (also what the program parse reads: tiledmm/programs/build.py)
struct __half_raw {
    unsigned short x;
};

struct __half {
    tm_f16_t tm_v;
    __half() = default;
    constexpr __half(tm_f16_t v) : tm_v(v) {}
    __half(float f) : tm_v((tm_f16_t)f) {}
    __half(double d) : tm_v((tm_f16_t)d) {}
    __half(int i) : tm_v((tm_f16_t)i) {}
    __half(unsigned i) : tm_v((tm_f16_t)i) {}
    __half(long long i) : tm_v((tm_f16_t)i) {}
    __half(const __half_raw &r) { __builtin_memcpy(&tm_v, &r.x, 2); }
    operator float() const { return (float)tm_v; }
    operator __half_raw() const
    {
        __half_raw r;
        __builtin_memcpy(&r.x, &tm_v, 2);
        return r;
    }
    __half &operator+=(const __half &o)
    {
        tm_v += o.tm_v;
        return *this;
    }
    __half &operator-=(const __half &o)
    {
        tm_v -= o.tm_v;
        return *this;
    }
    __half &operator*=(const __half &o)
    {
        tm_v *= o.tm_v;
        return *this;
    }
    __half &operator/=(const __half &o)
    {
        tm_v /= o.tm_v;
        return *this;
    }
};
static_assert(sizeof(__half) == 2, "__half is 2 bytes");
typedef __half half;

static inline __half operator+(const __half &a, const __half &b)
{
    return __half((tm_f16_t)(a.tm_v + b.tm_v));
}
static inline __half operator-(const __half &a, const __half &b)
{
    return __half((tm_f16_t)(a.tm_v - b.tm_v));
}
static inline __half operator*(const __half &a, const __half &b)
{
    return __half((tm_f16_t)(a.tm_v * b.tm_v));
}
static inline __half operator/(const __half &a, const __half &b)
{
    return __half((tm_f16_t)(a.tm_v / b.tm_v));
}
static inline __half operator-(const __half &a)
{
    return __half((tm_f16_t)(-a.tm_v));
}
static inline bool operator==(const __half &a, const __half &b)
{
    return a.tm_v == b.tm_v;
}
static inline bool operator!=(const __half &a, const __half &b)
{
    return a.tm_v != b.tm_v;
}
static inline bool operator<(const __half &a, const __half &b)
{
    return a.tm_v < b.tm_v;
}
static inline bool operator>(const __half &a, const __half &b)
{
    return a.tm_v > b.tm_v;
}
static inline bool operator<=(const __half &a, const __half &b)
{
    return a.tm_v <= b.tm_v;
}
static inline bool operator>=(const __half &a, const __half &b)
{
    return a.tm_v >= b.tm_v;
}

struct __align__(4) __half2
{
    __half x, y;
    __half2() = default;
    __half2(const __half &a, const __half &b) : x(a), y(b) {}
    __half2 &operator+=(const __half2 &o)
    {
        x += o.x;
        y += o.y;
        return *this;
    }
    __half2 &operator-=(const __half2 &o)
    {
        x -= o.x;
        y -= o.y;
        return *this;
    }
    __half2 &operator*=(const __half2 &o)
    {
        x *= o.x;
        y *= o.y;
        return *this;
    }
    __half2 &operator/=(const __half2 &o)
    {
        x /= o.x;
        y /= o.y;
        return *this;
    }
};
static_assert(sizeof(__half2) == 4, "__half2 is 4 bytes");
typedef __half2 half2;

static inline __half2 operator+(const __half2 &a, const __half2 &b)
{
    return __half2(a.x + b.x, a.y + b.y);
}
static inline __half2 operator-(const __half2 &a, const __half2 &b)
{
    return __half2(a.x - b.x, a.y - b.y);
}
static inline __half2 operator*(const __half2 &a, const __half2 &b)
{
    return __half2(a.x * b.x, a.y * b.y);
}
static inline __half2 operator/(const __half2 &a, const __half2 &b)
{
    return __half2(a.x / b.x, a.y / b.y);
}
static inline __half2 operator-(const __half2 &a)
{
    return __half2(-a.x, -a.y);
}

// conversions
static inline __half __float2half(float f)
{
    return __half(f);
}
static inline __half __float2half_rn(float f)
{
    return __half(f);
}
static inline __half __double2half(double d)
{
    return __half(d);
}
static inline float __half2float(__half h)
{
    return (float)h;
}
static inline __half __int2half_rn(int i)
{
    return __half(i);
}
static inline int __half2int_rn(__half h)
{
    return (int)nearbyintf((float)h);
}
static inline int __half2int_rz(__half h)
{
    return (int)(float)h;
}
static inline __half2 __float2half2_rn(float f)
{
    return __half2(__half(f), __half(f));
}
static inline __half2 __floats2half2_rn(float a, float b)
{
    return __half2(__half(a), __half(b));
}
static inline __half2 __halves2half2(__half a, __half b)
{
    return __half2(a, b);
}
static inline __half2 __half2half2(__half a)
{
    return __half2(a, a);
}
static inline __half2 make_half2(__half a, __half b)
{
    return __half2(a, b);
}
static inline float2 __half22float2(__half2 h)
{
    return make_float2((float)h.x, (float)h.y);
}
static inline __half2 __float22half2_rn(float2 f)
{
    return __half2(__half(f.x), __half(f.y));
}
static inline float __low2float(__half2 h)
{
    return (float)h.x;
}
static inline float __high2float(__half2 h)
{
    return (float)h.y;
}
static inline __half __low2half(__half2 h)
{
    return h.x;
}
static inline __half __high2half(__half2 h)
{
    return h.y;
}
static inline __half2 __lows2half2(__half2 a, __half2 b)
{
    return __half2(a.x, b.x);
}
static inline __half2 __highs2half2(__half2 a, __half2 b)
{
    return __half2(a.y, b.y);
}
static inline __half2 __low2half2(__half2 h)
{
    return __half2(h.x, h.x);
}
static inline __half2 __high2half2(__half2 h)
{
    return __half2(h.y, h.y);
}
static inline short __half_as_short(__half h)
{
    short s;
    __builtin_memcpy(&s, &h, 2);
    return s;
}
static inline unsigned short __half_as_ushort(__half h)
{
    unsigned short s;
    __builtin_memcpy(&s, &h, 2);
    return s;
}
static inline __half __short_as_half(short s)
{
    __half h;
    __builtin_memcpy(&h, &s, 2);
    return h;
}
static inline __half __ushort_as_half(unsigned short s)
{
    __half h;
    __builtin_memcpy(&h, &s, 2);
    return h;
}

// arithmetic: each result rounded to half
static inline __half __hadd(__half a, __half b)
{
    return a + b;
}
static inline __half __hsub(__half a, __half b)
{
    return a - b;
}
static inline __half __hmul(__half a, __half b)
{
    return a * b;
}
static inline __half __hdiv(__half a, __half b)
{
    return a / b;
}
static inline __half __hneg(__half a)
{
    return -a;
}
static inline __half __habs(__half a)
{
    return a < __half(0.0f) ? -a : a;
}
static inline __half __hfma(__half a, __half b, __half c)
{
    return __half(fmaf((float)a, (float)b, (float)c));
}
static inline __half __hmax(__half a, __half b)
{
    return a < b ? b : a;
}
static inline __half __hmin(__half a, __half b)
{
    return b < a ? b : a;
}
static inline __half2 __hadd2(__half2 a, __half2 b)
{
    return a + b;
}
static inline __half2 __hsub2(__half2 a, __half2 b)
{
    return a - b;
}
static inline __half2 __hmul2(__half2 a, __half2 b)
{
    return a * b;
}
static inline __half2 __h2div(__half2 a, __half2 b)
{
    return a / b;
}
static inline __half2 __hneg2(__half2 a)
{
    return -a;
}
static inline __half2 __habs2(__half2 a)
{
    return __half2(__habs(a.x), __habs(a.y));
}
static inline __half2 __hfma2(__half2 a, __half2 b, __half2 c)
{
    return __half2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y));
}
static inline __half2 __hmax2(__half2 a, __half2 b)
{
    return __half2(__hmax(a.x, b.x), __hmax(a.y, b.y));
}
static inline __half2 __hmin2(__half2 a, __half2 b)
{
    return __half2(__hmin(a.x, b.x), __hmin(a.y, b.y));
}
static inline bool __heq(__half a, __half b)
{
    return a == b;
}
static inline bool __hne(__half a, __half b)
{
    return a != b;
}
static inline bool __hlt(__half a, __half b)
{
    return a < b;
}
static inline bool __hle(__half a, __half b)
{
    return a <= b;
}
static inline bool __hgt(__half a, __half b)
{
    return a > b;
}
static inline bool __hge(__half a, __half b)
{
    return a >= b;
}
static inline bool __hisnan(__half a)
{
    return a.tm_v != a.tm_v;
}
static inline __half hsqrt(__half a)
{
    return __half(sqrtf((float)a));
}
static inline __half hrsqrt(__half a)
{
    return __half(1.0f / sqrtf((float)a));
}
static inline __half hexp(__half a)
{
    return __half(expf((float)a));
}
static inline __half hlog(__half a)
{
    return __half(logf((float)a));
}
static inline __half2 h2sqrt(__half2 a)
{
    return __half2(hsqrt(a.x), hsqrt(a.y));
}
