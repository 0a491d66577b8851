// Texture objects on the emulator (issue 43): a 2-D float cudaArray sampled with point and
// linear filtering, normalised and unnormalised coordinates and the four address modes; an
// unsigned char array read as normalised floats; tex1Dfetch over linear memory; tex2D over
// pitched memory. Prints each sample: mode x y value.
#include <cstdio>
#include <cstring>

#define W 5
#define H 4
#define P 12   // sample points

__global__ void sample2d(cudaTextureObject_t t, const float *xs, const float *ys, float *out)
{
    const int i = threadIdx.x;
    out[i] = tex2D<float>(t, xs[i], ys[i]);
}

__global__ void fetch1d(cudaTextureObject_t t, float *out)
{
    out[threadIdx.x] = tex1Dfetch<float>(t, (int)threadIdx.x - 1);
}

static cudaTextureObject_t make(cudaResourceDesc &res, cudaTextureFilterMode filter,
                                cudaTextureAddressMode mode, int normalized,
                                cudaTextureReadMode read = cudaReadModeElementType)
{
    cudaTextureDesc td;
    memset(&td, 0, sizeof td);
    td.addressMode[0] = td.addressMode[1] = mode;
    td.filterMode = filter;
    td.readMode = read;
    td.normalizedCoords = normalized;
    td.borderColor[0] = -7.0f;
    cudaTextureObject_t t = 0;
    if (cudaCreateTextureObject(&t, &res, &td, NULL) != cudaSuccess) printf("create failed\n");
    return t;
}

int main()
{
    float img[H][W];
    unsigned char bytes[H][W];
    for (int j = 0; j < H; ++j)
        for (int i = 0; i < W; ++i) {
            img[j][i] = (float)((i * 7 + j * 13) % 11) - 3.0f;
            bytes[j][i] = (unsigned char)((i * 53 + j * 97) % 256);
        }
    cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
    cudaChannelFormatDesc bd = cudaCreateChannelDesc(8, 0, 0, 0, cudaChannelFormatKindUnsigned);
    cudaArray *fa, *ba;
    cudaMallocArray(&fa, &fd, W, H);
    cudaMallocArray(&ba, &bd, W, H);
    cudaMemcpyToArray(fa, 0, 0, img, sizeof img, cudaMemcpyHostToDevice);
    cudaMemcpy2DToArray(ba, 0, 0, bytes, W, W, H, cudaMemcpyHostToDevice);
    cudaResourceDesc fr, br;
    memset(&fr, 0, sizeof fr);
    fr.resType = cudaResourceTypeArray;
    fr.res.array.array = fa;
    br = fr;
    br.res.array.array = ba;

    const float xs[P] = {0.0f, 1.3f,  2.5f,  4.9f,  -0.7f, 5.6f,
                         2.2f, 3.77f, 0.51f, -1.2f, 6.3f,  9.9f};
    const float ys[P] = {0.0f, 0.7f,  1.5f,  3.2f,  2.3f, -0.4f,
                         4.6f, 1.01f, 2.49f, -2.2f, 7.1f, 1.5f};
    float *dx, *dy, *dout, out[P];
    cudaMalloc(&dx, sizeof xs);
    cudaMalloc(&dy, sizeof ys);
    cudaMalloc(&dout, sizeof out);
    cudaMemcpy(dx, xs, sizeof xs, cudaMemcpyHostToDevice);
    cudaMemcpy(dy, ys, sizeof ys, cudaMemcpyHostToDevice);

    struct Mode {
        const char *name;
        cudaResourceDesc *res;
        cudaTextureFilterMode filter;
        cudaTextureAddressMode address;
        int normalized;
        cudaTextureReadMode read;
    } modes[] = {
        {"point-clamp", &fr, cudaFilterModePoint, cudaAddressModeClamp, 0, cudaReadModeElementType},
        {"linear-clamp", &fr, cudaFilterModeLinear, cudaAddressModeClamp, 0,
         cudaReadModeElementType},
        {"linear-wrap-norm", &fr, cudaFilterModeLinear, cudaAddressModeWrap, 1,
         cudaReadModeElementType},
        {"point-wrap-norm", &fr, cudaFilterModePoint, cudaAddressModeWrap, 1,
         cudaReadModeElementType},
        {"linear-mirror-norm", &fr, cudaFilterModeLinear, cudaAddressModeMirror, 1,
         cudaReadModeElementType},
        {"point-border", &fr, cudaFilterModePoint, cudaAddressModeBorder, 0,
         cudaReadModeElementType},
        {"linear-border", &fr, cudaFilterModeLinear, cudaAddressModeBorder, 0,
         cudaReadModeElementType},
        {"bytes-linear-clamp", &br, cudaFilterModeLinear, cudaAddressModeClamp, 0,
         cudaReadModeNormalizedFloat},
    };
    for (const Mode &m : modes) {
        cudaTextureObject_t t = make(*m.res, m.filter, m.address, m.normalized, m.read);
        // normalised coordinates: the same points over the texture's size
        float nx[P], ny[P];
        for (int i = 0; i < P; ++i) {
            nx[i] = m.normalized ? xs[i] / W : xs[i];
            ny[i] = m.normalized ? ys[i] / H : ys[i];
        }
        cudaMemcpy(dx, nx, sizeof nx, cudaMemcpyHostToDevice);
        cudaMemcpy(dy, ny, sizeof ny, cudaMemcpyHostToDevice);
        sample2d<<<1, P>>>(t, dx, dy, dout);
        cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost);
        for (int i = 0; i < P; ++i)
            printf("%s %.9g %.9g %.9g\n", m.name, nx[i], ny[i], out[i]);
        cudaDestroyTextureObject(t);
    }

    // tex1Dfetch over linear memory: index -1 and W*H read zero
    float *lin;
    cudaMalloc(&lin, sizeof img);
    cudaMemcpy(lin, img, sizeof img, cudaMemcpyHostToDevice);
    cudaResourceDesc lr;
    memset(&lr, 0, sizeof lr);
    lr.resType = cudaResourceTypeLinear;
    lr.res.linear.devPtr = lin;
    lr.res.linear.desc = fd;
    lr.res.linear.sizeInBytes = sizeof img;
    cudaTextureObject_t lt = make(lr, cudaFilterModePoint, cudaAddressModeClamp, 0);
    float fetched[W * H + 2], *dfetched;
    cudaMalloc(&dfetched, sizeof fetched);
    fetch1d<<<1, W * H + 2>>>(lt, dfetched);
    cudaMemcpy(fetched, dfetched, sizeof fetched, cudaMemcpyDeviceToHost);
    for (int i = 0; i < W * H + 2; ++i)
        printf("fetch %d 0 %.9g\n", i - 1, fetched[i]);

    // pitched 2-D memory, point sampling at texel centres
    float *pitched;
    size_t pitch;
    cudaMallocPitch(&pitched, &pitch, W * sizeof(float), H);
    cudaMemcpy2D(pitched, pitch, img, W * sizeof(float), W * sizeof(float), H,
                 cudaMemcpyHostToDevice);
    cudaResourceDesc pr;
    memset(&pr, 0, sizeof pr);
    pr.resType = cudaResourceTypePitch2D;
    pr.res.pitch2D.devPtr = pitched;
    pr.res.pitch2D.desc = fd;
    pr.res.pitch2D.width = W;
    pr.res.pitch2D.height = H;
    pr.res.pitch2D.pitchInBytes = pitch;
    cudaTextureObject_t pt = make(pr, cudaFilterModePoint, cudaAddressModeClamp, 0);
    cudaMemcpy(dx, xs, sizeof xs, cudaMemcpyHostToDevice);
    cudaMemcpy(dy, ys, sizeof ys, cudaMemcpyHostToDevice);
    sample2d<<<1, P>>>(pt, dx, dy, dout);
    cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost);
    for (int i = 0; i < P; ++i)
        printf("pitched %.9g %.9g %.9g\n", xs[i], ys[i], out[i]);
    for (int j = 0; j < H; ++j)
        for (int i = 0; i < W; ++i)
            printf("texel %d %d %.9g %d\n", i, j, img[j][i], bytes[j][i]);
    cudaFreeArray(fa);
    cudaFreeArray(ba);
    return cudaGetLastError() != cudaSuccess;
}
