// mma_numerics_probe.cu: what a GPU's tensor cores do with crafted inputs (issue 47's numerics
// model for the emulator's <mma.h>, tiledmm/native/user/mma.h): one wmma mma_sync per case, A's
// row 0 and B's column 0 holding the case's k values, C(0,0) the case's c, every other element 0;
// prints D(0,0) in hex beside the case. Then the order of x[] in m8n32k16's fragments: each
// element's (row, col) for every lane, from matrices whose values are their own indices.
//
//   nvcc -std=c++17 -arch=sm_90 benchmarks/mma_numerics_probe.cu -o /tmp/mma_probe && /tmp/mma_probe
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cstdio>
#include <cstring>
#include <vector>

using namespace nvcuda;

struct Case {
    const char *name;
    float c;
    float a[16], b[16];
};

template <typename In, int K, typename Frag>
__global__ void one_mma(const float *a, const float *b, float c, float *d)
{
    __shared__ __align__(32) In As[16 * K];
    __shared__ __align__(32) In Bs[K * 16];
    __shared__ __align__(32) float Cs[16 * 16];
    for (int i = threadIdx.x; i < 16 * K; i += 32) {
        As[i] = (In)(i < K ? a[i] : 0.0f);   // row 0 of A (row-major, ldm K)
        Bs[i] = (In)(i % 16 == 0 ? b[i / 16] : 0.0f);   // column 0 of B (row-major, ldm 16)
    }
    for (int i = threadIdx.x; i < 256; i += 32)
        Cs[i] = i == 0 ? c : 0.0f;
    __syncwarp();
    wmma::fragment<wmma::matrix_a, 16, 16, K, Frag, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, K, Frag, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, K, float> fc;
    wmma::load_matrix_sync(fa, As, K);
    wmma::load_matrix_sync(fb, Bs, 16);
    wmma::load_matrix_sync(fc, Cs, 16, wmma::mem_row_major);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(Cs, fc, 16, wmma::mem_row_major);
    __syncwarp();
    if (threadIdx.x == 0) *d = Cs[0];
}

// x[]'s order for m8n32k16 (half inputs, float accumulator): element i of lane l holds the
// matrix element whose value is its row-major index.
__global__ void order_m8n32k16(float *out)
{
    __shared__ __align__(32) half As[8 * 16], Bs[16 * 32];
    __shared__ __align__(32) float Cs[8 * 32];
    for (int i = threadIdx.x; i < 8 * 16; i += 32)
        As[i] = (half)(float)i;
    for (int i = threadIdx.x; i < 16 * 32; i += 32)
        Bs[i] = (half)(float)i;
    for (int i = threadIdx.x; i < 8 * 32; i += 32)
        Cs[i] = (float)i;
    __syncwarp();
    wmma::fragment<wmma::matrix_a, 8, 32, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 8, 32, 16, half, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 8, 32, 16, float> fc;
    wmma::load_matrix_sync(fa, As, 16);
    wmma::load_matrix_sync(fb, Bs, 32);
    wmma::load_matrix_sync(fc, Cs, 32, wmma::mem_row_major);
    const int l = threadIdx.x;
    for (int i = 0; i < fa.num_elements; ++i)
        out[l * 96 + i] = (float)fa.x[i];
    for (int i = 0; i < fb.num_elements; ++i)
        out[l * 96 + 32 + i] = (float)fb.x[i];
    for (int i = 0; i < fc.num_elements; ++i)
        out[l * 96 + 64 + i] = fc.x[i];
}

static float p2(int e)
{
    return ldexpf(1.0f, e);
}

static unsigned bits(float f)
{
    unsigned u;
    std::memcpy(&u, &f, 4);
    return u;
}

enum Type { F16, BF16, TF32 };

static void run(Type type, const std::vector<Case> &cases)
{
    static const char *names[] = {"f16", "bf16", "tf32"};
    float *da, *db, *dd;
    cudaMalloc(&da, 64);
    cudaMalloc(&db, 64);
    cudaMalloc(&dd, 4);
    for (const Case &c : cases) {
        cudaMemcpy(da, c.a, 64, cudaMemcpyHostToDevice);
        cudaMemcpy(db, c.b, 64, cudaMemcpyHostToDevice);
        if (type == F16)
            one_mma<half, 16, half><<<1, 32>>>(da, db, c.c, dd);
        else if (type == BF16)
            one_mma<__nv_bfloat16, 16, __nv_bfloat16><<<1, 32>>>(da, db, c.c, dd);
        else
            one_mma<float, 8, wmma::precision::tf32><<<1, 32>>>(da, db, c.c, dd);
        float d = 0;
        if (cudaMemcpy(&d, dd, 4, cudaMemcpyDeviceToHost) != cudaSuccess) std::printf("error\n");
        std::printf("%-6s %-58s D = %-14.9g 0x%08X\n", names[type], c.name, d, bits(d));
    }
    cudaFree(da);
    cudaFree(db);
    cudaFree(dd);
}

// A case: c, then (k, a, b) triples; every other k has a = b = 0.
static Case make(const char *name, float c, std::initializer_list<std::initializer_list<float>> t)
{
    Case x{name, c, {}, {}};
    for (auto &e : t) {
        auto it = e.begin();
        const int k = (int)*it++;
        x.a[k] = *it++;
        x.b[k] = *it;
    }
    return x;
}

int main()
{
    // k-group size 16 (FP16/BF16): products in k 0..7 vs 8..15 (the tf32 list uses k < 8).
    std::vector<Case> f16;
    f16.push_back(
        make("c=1, p0=-2^-25: RZ with 2 extra bits -> 0x3F7FFFFF", 1, {{0, -p2(-12), p2(-13)}}));
    f16.push_back(
        make("c=1, p0=-2^-26: 2 extra bits -> 1.0, 3 -> 0x3F7FFFFF", 1, {{0, -p2(-13), p2(-13)}}));
    f16.push_back(make("c=0, p0=2^10 p1=-2^10, p8..15=2^-16: one group of 16 -> 0", 0,
                       {{0, p2(5), p2(5)},
                        {1, -p2(5), p2(5)},
                        {8, p2(-8), p2(-8)},
                        {9, p2(-8), p2(-8)},
                        {10, p2(-8), p2(-8)},
                        {11, p2(-8), p2(-8)},
                        {12, p2(-8), p2(-8)},
                        {13, p2(-8), p2(-8)},
                        {14, p2(-8), p2(-8)},
                        {15, p2(-8), p2(-8)}}));
    f16.push_back(make("c=0, p0=2^10 p1=-2^10, p4..7=2^-16: groups of 4 -> 2^-14", 0,
                       {{0, p2(5), p2(5)},
                        {1, -p2(5), p2(5)},
                        {4, p2(-8), p2(-8)},
                        {5, p2(-8), p2(-8)},
                        {6, p2(-8), p2(-8)},
                        {7, p2(-8), p2(-8)}}));
    f16.push_back(
        make("c=0, p0=2^10 p1=-2^10, p2..3=2^-16: groups of 2 -> 2^-15", 0,
             {{0, p2(5), p2(5)}, {1, -p2(5), p2(5)}, {2, p2(-8), p2(-8)}, {3, p2(-8), p2(-8)}}));
    f16.push_back(make("c=2^10, p0=-2^10, p8..9=2^-16: c in the group -> 0", p2(10),
                       {{0, -p2(5), p2(5)}, {8, p2(-8), p2(-8)}, {9, p2(-8), p2(-8)}}));
    f16.push_back(make("c=2^10, p15=-2^10, p0..1=2^-16: c with k 0? -> 0", p2(10),
                       {{15, -p2(5), p2(5)}, {0, p2(-8), p2(-8)}, {1, p2(-8), p2(-8)}}));
    f16.push_back(make("c=-2^10, p0=2^10 (exact cancel), p1=2^-16", -p2(10),
                       {{0, p2(5), p2(5)}, {1, p2(-8), p2(-8)}}));
    f16.push_back(make("c=0, p0=1.5*1.5=2.25, p1=-2^-25: emax unnormalised -> 2.25-ulp", 0,
                       {{0, 1.5f, 1.5f}, {1, -p2(-12), p2(-13)}}));
    f16.push_back(make("c=0, p0=1.0, p1=-2^-25: (reference) -> 1-2^-24?", 0,
                       {{0, 1.0f, 1.0f}, {1, -p2(-12), p2(-13)}}));
    f16.push_back(make("c=0, p0=1.0, p1=-2^-26", 0, {{0, 1.0f, 1.0f}, {1, -p2(-13), p2(-13)}}));
    f16.push_back(make("c=0, p0=1.5*1.5, p1=-2^-24", 0, {{0, 1.5f, 1.5f}, {1, -p2(-12), p2(-12)}}));
    f16.push_back(make("c=0, p0=1.5*1.5, p1=-2^-23", 0, {{0, 1.5f, 1.5f}, {1, -p2(-11), p2(-12)}}));
    f16.push_back(make("c=1.5, p0=-2^-25 (c's own exponent)", 1.5f, {{0, -p2(-12), p2(-13)}}));
    f16.push_back(
        make("c=1.75 p0=1.75*1 p1=-2^-24", 1.75f, {{0, 1.75f, 1.0f}, {1, -p2(-12), p2(-12)}}));
    f16.push_back(make("c=0, p0=2^-24*1 (subnormal a), p1=2^-24*1", 0,
                       {{0, p2(-24), 1.0f}, {1, p2(-24), 1.0f}}));
    f16.push_back(make("c=2^-149 (subnormal c), p0=0", p2(-149), {}));
    f16.push_back(make("c=1, p0..15 = 2^-27 each: -> 1.0", 1,
                       {{0, p2(-14), p2(-13)},
                        {1, p2(-14), p2(-13)},
                        {2, p2(-14), p2(-13)},
                        {3, p2(-14), p2(-13)},
                        {4, p2(-14), p2(-13)},
                        {5, p2(-14), p2(-13)},
                        {6, p2(-14), p2(-13)},
                        {7, p2(-14), p2(-13)},
                        {8, p2(-14), p2(-13)},
                        {9, p2(-14), p2(-13)},
                        {10, p2(-14), p2(-13)},
                        {11, p2(-14), p2(-13)},
                        {12, p2(-14), p2(-13)},
                        {13, p2(-14), p2(-13)},
                        {14, p2(-14), p2(-13)},
                        {15, p2(-14), p2(-13)}}));
    f16.push_back(
        make("c=0, p0=-1.0 p1=2^-25 (negative max)", 0, {{0, -1.0f, 1.0f}, {1, p2(-12), p2(-13)}}));
    f16.push_back(make("c=0, p0=3*3=9 p1=-2^-22", 0, {{0, 3.0f, 3.0f}, {1, -p2(-11), p2(-11)}}));
    f16.push_back(make("c=0, p0=3*3=9 p1=-2^-21", 0, {{0, 3.0f, 3.0f}, {1, -p2(-10), p2(-11)}}));
    run(F16, f16);
    run(BF16, f16);

    std::vector<Case> tf;
    tf.push_back(make("c=1, p0=-2^-25", 1, {{0, -p2(-12), p2(-13)}}));
    tf.push_back(make("c=1, p0=-2^-26", 1, {{0, -p2(-13), p2(-13)}}));
    tf.push_back(make("c=0, p0=2^10 p1=-2^10, p4..7=2^-16: groups of 4 -> 2^-14", 0,
                      {{0, p2(5), p2(5)},
                       {1, -p2(5), p2(5)},
                       {4, p2(-8), p2(-8)},
                       {5, p2(-8), p2(-8)},
                       {6, p2(-8), p2(-8)},
                       {7, p2(-8), p2(-8)}}));
    tf.push_back(
        make("c=0, p0=2^10 p1=-2^10, p2..3=2^-16: groups of 2 -> 2^-15", 0,
             {{0, p2(5), p2(5)}, {1, -p2(5), p2(5)}, {2, p2(-8), p2(-8)}, {3, p2(-8), p2(-8)}}));
    tf.push_back(make("c=2^10, p0=-2^10, p4..5=2^-16: c in group -> 0", p2(10),
                      {{0, -p2(5), p2(5)}, {4, p2(-8), p2(-8)}, {5, p2(-8), p2(-8)}}));
    tf.push_back(make("c=0, p0=1.5*1.5, p1=-2^-25: emax unnormalised", 0,
                      {{0, 1.5f, 1.5f}, {1, -p2(-12), p2(-13)}}));
    tf.push_back(make("c=0, p0=1.5*1.5, p1=-2^-24", 0, {{0, 1.5f, 1.5f}, {1, -p2(-12), p2(-12)}}));
    tf.push_back(make("c=0, a0=1+2^-11 (below TF32) b0=1: low bits dropped?", 0,
                      {{0, 1.0f + p2(-11), 1.0f}}));
    tf.push_back(make("c=0, a0=1+2^-10+2^-11 b0=1", 0, {{0, 1.0f + p2(-10) + p2(-11), 1.0f}}));
    run(TF32, tf);

    float *dout;
    cudaMalloc(&dout, 32 * 96 * 4);
    order_m8n32k16<<<1, 32>>>(dout);
    std::vector<float> h(32 * 96);
    cudaMemcpy(h.data(), dout, h.size() * 4, cudaMemcpyDeviceToHost);
    std::printf("m8n32k16 x[] (value = row-major index): lane: a[16] | b[16] | c[8]\n");
    for (int l = 0; l < 32; ++l) {
        std::printf("%2d:", l);
        for (int i = 0; i < 16; ++i)
            std::printf(" %d", (int)h[l * 96 + i]);
        std::printf(" |");
        for (int i = 0; i < 16; ++i)
            std::printf(" %d", (int)h[l * 96 + 32 + i]);
        std::printf(" |");
        for (int i = 0; i < 8; ++i)
            std::printf(" %d", (int)h[l * 96 + 64 + i]);
        std::printf("\n");
    }
    return 0;
}
