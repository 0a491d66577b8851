// lecture: 001_b0bed8cdb5b583cc.txt:601 (CMU 15-418, "Optimization 1: Thread-Level Register Tiling")
// kernel: mm
// defines: N=64, V=4
// fixes: the slide's array-slice pseudo-code (a[:] = A[xbase*V : xbase*V + V, k], C[...] = c[:]) is
//  not C: written as loops over V, indices as the slide gives them
// launch: grid (N/V/8, N/V/8), block (8, 8)

__global__ void mm(float A[N][N], float B[N][N], float C[N][N]) {
    int ybase = blockIdx.y * blockDim.y + threadIdx.y;
    int xbase = blockIdx.x * blockDim.x + threadIdx.x;

    float c[V][V] = {0};
    float a[V], b[V];
    for (int k = 0; k < N; ++k) {
        for (int v = 0; v < V; ++v) a[v] = A[xbase*V + v][k];
        for (int v = 0; v < V; ++v) b[v] = B[k][ybase*V + v];
        for (int y = 0; y < V; ++y) {
            for (int x = 0; x < V; ++x) {
                c[x][y] += a[x] * b[y];
            }
        }
    }
    for (int x = 0; x < V; ++x)
        for (int y = 0; y < V; ++y)
            C[xbase * V + x][ybase*V + y] = c[x][y];
}
