// emu/program_textures.h: texture objects in whole programs on the emulator (issue 43), included
// by emu/program_runtime.h: cudaArray (1-D and 2-D, cudaMallocArray, cudaMemcpyToArray,
// cudaMemcpy2DToArray), cudaCreateChannelDesc, cudaCreateTextureObject over an array, linear or
// pitched 2-D memory, and in kernels tex1Dfetch, tex1D and tex2D with point and linear filtering,
// normalised coordinates, the four address modes and both read modes.
//
// Linear filtering weighs texels as the GPU's texture unit does: the fraction in 1.8 fixed point
// (9 bits, 8 of them fraction), so results match a GPU's to its rounding, not to float's.
#pragma once
#include <math.h>

struct cudaArray {
    cudaChannelFormatDesc desc;
    size_t width, height;   // height 1 for a 1-D array
    size_t elem;            // bytes per texel
    std::vector<unsigned char> data;
};

namespace tm_prog {
struct Texture {
    const unsigned char *base;   // the texels: an array's, or device memory
    size_t width, height, pitch, elem;
    cudaChannelFormatDesc desc;
    cudaTextureDesc tex;
};

inline size_t texel_bytes(const cudaChannelFormatDesc &d)
{
    return (size_t)(d.x + d.y + d.z + d.w) / 8;
}

// one component of a texel: as stored (ElementType) or mapped to [0, 1] / [-1, 1]
inline double texel_component(const unsigned char *p, int bits, cudaChannelFormatKind kind,
                              bool normalized)
{
    if (kind == cudaChannelFormatKindFloat) return *(const float *)p;   // 32-bit (creation)
    const bool sign = kind == cudaChannelFormatKindSigned;
    double v = 0.0, top = 1.0;
    switch (bits) {
    case 8:
        v = sign ? *(const signed char *)p : *(const unsigned char *)p;
        top = sign ? 127 : 255;
        break;
    case 16:
        v = sign ? *(const short *)p : *(const unsigned short *)p;
        top = sign ? 32767 : 65535;
        break;
    default:
        v = sign ? *(const int *)p : *(const unsigned *)p;
        top = 1.0;
        break;
    }
    if (!normalized || bits == 32) return v;
    return sign ? fmax(v / top, -1.0) : v / top;
}

// texel (i, j) into c[4]; outside the texture (only the border mode leaves i, j there), the
// border colour
inline void fetch(const Texture &t, long i, long j, double c[4])
{
    const bool border = i < 0 || j < 0 || i >= (long)t.width || j >= (long)t.height;
    if (border) {
        for (int k = 0; k < 4; ++k)
            c[k] = t.tex.borderColor[k];
        return;
    }
    const unsigned char *p = t.base + (size_t)j * t.pitch + (size_t)i * t.elem;
    const int bits[4] = {t.desc.x, t.desc.y, t.desc.z, t.desc.w};
    const bool norm = t.tex.readMode == cudaReadModeNormalizedFloat;
    for (int k = 0; k < 4; ++k) {
        c[k] = bits[k] ? texel_component(p, bits[k], t.desc.f, norm) : 0.0;
        p += bits[k] / 8;
    }
}

// an integer texel coordinate mapped in by the address mode (border: left out, fetch's border)
inline long address(long i, long n, cudaTextureAddressMode mode)
{
    switch (mode) {
    case cudaAddressModeWrap: return ((i % n) + n) % n;
    case cudaAddressModeMirror: {
        const long m = ((i % (2 * n)) + 2 * n) % (2 * n);
        return m < n ? m : 2 * n - 1 - m;
    }
    case cudaAddressModeBorder: return i;
    default: return i < 0 ? 0 : (i >= n ? n - 1 : i);
    }
}

inline void sample(cudaTextureObject_t obj, float x, float y, bool two_d, double c[4])
{
    const Texture &t = *reinterpret_cast<const Texture *>(obj);
    double u = x, v = y;
    if (t.tex.normalizedCoords) {
        u *= (double)t.width;
        v *= (double)t.height;
    }
    const cudaTextureAddressMode mu = t.tex.addressMode[0],
                                 mv = two_d ? t.tex.addressMode[1] : cudaAddressModeClamp;
    if (t.tex.filterMode == cudaFilterModePoint) {
        fetch(t, address((long)floor(u), (long)t.width, mu),
              two_d ? address((long)floor(v), (long)t.height, mv) : 0, c);
        return;
    }
    const double ub = u - 0.5, vb = two_d ? v - 0.5 : 0.0;
    const long i0 = (long)floor(ub), j0 = (long)floor(vb);
    // the texture unit's weights: 8 fraction bits
    const double a = round((ub - (double)i0) * 256.0) / 256.0,
                 b = two_d ? round((vb - (double)j0) * 256.0) / 256.0 : 0.0;
    double t00[4], t10[4], t01[4], t11[4];
    const long i1 = address(i0 + 1, (long)t.width, mu), ia = address(i0, (long)t.width, mu);
    const long ja = two_d ? address(j0, (long)t.height, mv) : 0,
               j1 = two_d ? address(j0 + 1, (long)t.height, mv) : 0;
    fetch(t, ia, ja, t00);
    fetch(t, i1, ja, t10);
    fetch(t, ia, j1, t01);
    fetch(t, i1, j1, t11);
    for (int k = 0; k < 4; ++k)
        c[k] = (1 - a) * (1 - b) * t00[k] + a * (1 - b) * t10[k] + (1 - a) * b * t01[k] +
               a * b * t11[k];
}

// a texel's components as the type a kernel reads
template <typename T>
struct texel_as {
    static T make(const double c[4]) { return (T)c[0]; }
};
#define TM_TEXEL2(V, S)                  \
    template <>                          \
    struct texel_as<V> {                 \
        static V make(const double c[4]) \
        {                                \
            return V{(S)c[0], (S)c[1]};  \
        }                                \
    };
#define TM_TEXEL4(V, S)                                   \
    template <>                                           \
    struct texel_as<V> {                                  \
        static V make(const double c[4])                  \
        {                                                 \
            return V{(S)c[0], (S)c[1], (S)c[2], (S)c[3]}; \
        }                                                 \
    };
TM_TEXEL2(float2, float)
TM_TEXEL4(float4, float)
TM_TEXEL2(int2, int)
TM_TEXEL4(int4, int)
TM_TEXEL2(uint2, unsigned)
TM_TEXEL4(uint4, unsigned)
TM_TEXEL4(uchar4, unsigned char)
TM_TEXEL4(char4, signed char)
#undef TM_TEXEL2
#undef TM_TEXEL4
}   // namespace tm_prog

// ---- in kernels ----
template <typename T>
inline T tex2D(cudaTextureObject_t t, float x, float y)
{
    double c[4];
    tm_prog::sample(t, x, y, true, c);
    return tm_prog::texel_as<T>::make(c);
}
template <typename T>
inline void tex2D(T *out, cudaTextureObject_t t, float x, float y)
{
    *out = tex2D<T>(t, x, y);
}
template <typename T>
inline T tex1D(cudaTextureObject_t t, float x)
{
    double c[4];
    tm_prog::sample(t, x, 0.0f, false, c);
    return tm_prog::texel_as<T>::make(c);
}
template <typename T>
inline T tex1Dfetch(cudaTextureObject_t obj, int i)
{
    const tm_prog::Texture &t = *reinterpret_cast<const tm_prog::Texture *>(obj);
    double c[4];
    if (i < 0 || (size_t)i >= t.width)
        for (int k = 0; k < 4; ++k)
            c[k] = 0.0;   // out of range reads zero
    else
        tm_prog::fetch(t, i, 0, c);
    return tm_prog::texel_as<T>::make(c);
}

// ---- on the host ----
inline cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w,
                                                   cudaChannelFormatKind f)
{
    return cudaChannelFormatDesc{x, y, z, w, f};
}
template <typename T>
inline cudaChannelFormatDesc cudaCreateChannelDesc();
#define TM_CHANNEL(T, X, Y, Z, W, K)                                        \
    template <>                                                             \
    inline cudaChannelFormatDesc cudaCreateChannelDesc<T>()                 \
    {                                                                       \
        return cudaChannelFormatDesc{X, Y, Z, W, cudaChannelFormatKind##K}; \
    }
TM_CHANNEL(float, 32, 0, 0, 0, Float)
TM_CHANNEL(float2, 32, 32, 0, 0, Float)
TM_CHANNEL(float4, 32, 32, 32, 32, Float)
TM_CHANNEL(int, 32, 0, 0, 0, Signed)
TM_CHANNEL(unsigned int, 32, 0, 0, 0, Unsigned)
TM_CHANNEL(char, 8, 0, 0, 0, Signed)
TM_CHANNEL(signed char, 8, 0, 0, 0, Signed)
TM_CHANNEL(unsigned char, 8, 0, 0, 0, Unsigned)
TM_CHANNEL(short, 16, 0, 0, 0, Signed)
TM_CHANNEL(unsigned short, 16, 0, 0, 0, Unsigned)
TM_CHANNEL(uchar4, 8, 8, 8, 8, Unsigned)
TM_CHANNEL(char4, 8, 8, 8, 8, Signed)
TM_CHANNEL(int2, 32, 32, 0, 0, Signed)
TM_CHANNEL(int4, 32, 32, 32, 32, Signed)
TM_CHANNEL(uint2, 32, 32, 0, 0, Unsigned)
TM_CHANNEL(uint4, 32, 32, 32, 32, Unsigned)
#undef TM_CHANNEL

inline cudaError_t cudaMallocArray(cudaArray_t *array, const cudaChannelFormatDesc *desc,
                                   size_t width, size_t height = 0, unsigned int flags = 0)
{
    TM_PROG_STICKY();
    if (!array || !desc || !width || flags) return tm_emu::set_error(cudaErrorInvalidValue);
    const size_t elem = tm_prog::texel_bytes(*desc);
    if (!elem) return tm_emu::set_error(cudaErrorInvalidChannelDescriptor);
    cudaArray *a = new cudaArray{*desc, width, height ? height : 1, elem, {}};
    a->data.assign(a->width * a->height * elem, 0);
    *array = a;
    return cudaSuccess;
}

inline cudaError_t cudaFreeArray(cudaArray_t array)
{
    delete array;
    return cudaSuccess;
}

// rows of `width` bytes from src (device or host memory, as kind says) into the array at
// (w_offset bytes, h_offset rows)
inline cudaError_t tm_prog_to_array(cudaArray_t dst, size_t w_offset, size_t h_offset,
                                    const void *src, size_t spitch, size_t width, size_t height,
                                    cudaMemcpyKind kind)
{
    TM_PROG_STICKY();
    const size_t row = dst ? dst->width * dst->elem : 0;
    if (!dst || !src || w_offset + width > row || h_offset + height > dst->height)
        return tm_emu::set_error(cudaErrorInvalidValue);
    const int k = tm_prog::range_kind(src, spitch * (height - 1) + width);
    if (k < 0 || (kind == cudaMemcpyDeviceToDevice && k != tm_prog::DEVICE) ||
        (kind == cudaMemcpyHostToDevice && k == tm_prog::DEVICE))
        return tm_emu::set_error(cudaErrorInvalidValue,
                                 "a copy into a cudaArray: the source is not the memory its "
                                 "kind names, or too short");
    std::lock_guard<std::recursive_mutex> g(tm_prog::st().mu);
    for (size_t y = 0; y < height; ++y)
        memcpy(&dst->data[(h_offset + y) * row + w_offset],
               tm_prog::rt_view((const char *)src + y * spitch), width);
    return cudaSuccess;
}

inline cudaError_t cudaMemcpy2DToArray(cudaArray_t dst, size_t w_offset, size_t h_offset,
                                       const void *src, size_t spitch, size_t width, size_t height,
                                       cudaMemcpyKind kind)
{
    return tm_prog_to_array(dst, w_offset, h_offset, src, spitch, width, height, kind);
}

// the deprecated linear form: count bytes from (w_offset, h_offset) on, row after row
inline cudaError_t cudaMemcpyToArray(cudaArray_t dst, size_t w_offset, size_t h_offset,
                                     const void *src, size_t count, cudaMemcpyKind kind)
{
    const size_t row = dst ? dst->width * dst->elem : 0;
    if (!dst || w_offset != 0 || count % row)
        return w_offset || !dst ? tm_emu::set_error(cudaErrorInvalidValue)
                                : tm_prog_to_array(dst, 0, h_offset, src, count, count, 1, kind);
    return tm_prog_to_array(dst, 0, h_offset, src, row, row, count / row, kind);
}

inline cudaError_t cudaCreateTextureObject(cudaTextureObject_t *obj, const cudaResourceDesc *res,
                                           const cudaTextureDesc *tex,
                                           const cudaResourceViewDesc *view)
{
    TM_PROG_STICKY();
    if (!obj || !res || !tex || view) return tm_emu::set_error(cudaErrorInvalidValue);
    tm_prog::Texture t{};
    t.tex = *tex;
    switch (res->resType) {
    case cudaResourceTypeArray: {
        const cudaArray_t a = res->res.array.array;
        if (!a) return tm_emu::set_error(cudaErrorInvalidValue);
        t.base = a->data.data();
        t.width = a->width;
        t.height = a->height;
        t.elem = a->elem;
        t.pitch = a->width * a->elem;
        t.desc = a->desc;
        break;
    }
    case cudaResourceTypeLinear:
        t.desc = res->res.linear.desc;
        t.elem = tm_prog::texel_bytes(t.desc);
        if (!t.elem || !res->res.linear.devPtr) return tm_emu::set_error(cudaErrorInvalidValue);
        t.base = (const unsigned char *)res->res.linear.devPtr;
        t.width = res->res.linear.sizeInBytes / t.elem;
        t.height = 1;
        t.pitch = res->res.linear.sizeInBytes;
        break;
    case cudaResourceTypePitch2D:
        t.desc = res->res.pitch2D.desc;
        t.elem = tm_prog::texel_bytes(t.desc);
        if (!t.elem || !res->res.pitch2D.devPtr) return tm_emu::set_error(cudaErrorInvalidValue);
        t.base = (const unsigned char *)res->res.pitch2D.devPtr;
        t.width = res->res.pitch2D.width;
        t.height = res->res.pitch2D.height;
        t.pitch = res->res.pitch2D.pitchInBytes;
        break;
    default:
        return tm_emu::set_error(cudaErrorNotSupported,
                                 "cudaCreateTextureObject: mipmapped arrays are not emulated");
    }
    if (t.desc.f == cudaChannelFormatKindFloat && (t.desc.x % 32 || t.desc.y % 32))
        return tm_emu::set_error(cudaErrorNotSupported,
                                 "cudaCreateTextureObject: 16-bit float texels are not emulated");
    if (t.tex.filterMode == cudaFilterModeLinear && t.desc.f != cudaChannelFormatKindFloat &&
        t.tex.readMode != cudaReadModeNormalizedFloat)
        return tm_emu::set_error(cudaErrorInvalidValue, "linear filtering of integer texels "
                                                        "needs cudaReadModeNormalizedFloat");
    *obj = (cudaTextureObject_t) new tm_prog::Texture(t);
    return cudaSuccess;
}

inline cudaError_t cudaDestroyTextureObject(cudaTextureObject_t obj)
{
    delete reinterpret_cast<tm_prog::Texture *>(obj);
    return cudaSuccess;
}
