// lecture: 001_b0bed8cdb5b583cc.txt:639 (CMU 15-418, "Optimization 2: Block-Level Shared Memory Tiling")
// kernel: mm
// defines: N=64, S=8, L=32, V=4
// fixes: the slice pseudo-code written as loops: the cooperative fetch the comment asks for (every
//  thread of the block copies elements t, t + blockDim.x*blockDim.y, ... of the S x L tiles),
//  a[] and b[] from sA/sB, and the V x V store of c; indices as the slide gives them (it reads
//  A[k..][yblock*L..], i.e. A as its own transpose: the result is not A @ B)
// launch: grid (N/L, N/L), block (L/V, L/V)

__global__ void mm(float A[N][N], float B[N][N], float C[N][N]) {
    __shared__ float sA[S][L], sB[S][L];
    float c[V][V] = {0};
    float a[V], b[V];
    int yblock = blockIdx.y;
    int xblock = blockIdx.x;

    for (int k = 0; k < N; k += S) {
        __syncthreads();
        // needs to be implemented by thread cooperative fetching
        for (int t = threadIdx.y * blockDim.x + threadIdx.x; t < S * L; t += blockDim.x * blockDim.y) {
            sA[t / L][t % L] = A[k + t / L][yblock * L + t % L];
            sB[t / L][t % L] = B[k + t / L][xblock * L + t % L];
        }
        __syncthreads();
        for (int ki = 0; ki < S; ++ki) {
            for (int v = 0; v < V; ++v) a[v] = sA[ki][threadIdx.y * V + v];
            for (int v = 0; v < V; ++v) b[v] = sB[ki][threadIdx.x * V + v];
            for (int y = 0; y < V; ++y) {
                for (int x = 0; x < V; ++x) {
                    c[x][y] += a[x] * b[y];
                }
            }
        }
    }
    int ybase = blockIdx.y * blockDim.y + threadIdx.y;
    int xbase = blockIdx.x * blockDim.x + threadIdx.x;
    for (int y = 0; y < V; ++y)
        for (int x = 0; x < V; ++x)
            C[ybase * V + y][xbase * V + x] = c[y][x];
}
