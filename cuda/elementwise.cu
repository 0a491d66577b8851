// elementwise.cu: the lectures' first kernels. vec_add: one thread per element, a 1-D grid
// (CS133 lecture 000, "Vector Addition Kernel"). mat_add: one thread per element of a matrix
// with 2-D thread and block indices (CMU 15-418 lecture 001, "matrix add").
// Global traffic: two loads and one store per element, the fewest possible.
#include "common.h"

template <typename T>
__global__ void vec_add_kernel(const T *__restrict__ a, const T *__restrict__ b, T *__restrict__ c,
                               long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

template <typename T>
__global__ void mat_add_kernel(const T *__restrict__ a, const T *__restrict__ b, T *__restrict__ c,
                               long long rows, long long cols, unsigned first_block_y)
{
    const long long row = (long long)(blockIdx.y + first_block_y) * blockDim.y + threadIdx.y;
    const long long col = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (row < rows && col < cols) c[row * cols + col] = a[row * cols + col] + b[row * cols + col];
}

template <typename T>
static int launch_vec_add(const tm_problem *p, tm_launch_facts *facts)
{
    const long long n = p->M * p->N;
    const dim3 block((unsigned)p->params[0]);
    const dim3 grid(tm_ceil_div(n, block.x));
    auto kernel = vec_add_kernel<T>;
    tm_facts_set(facts, (const void *)kernel, grid, block, 0, 0, 1);
    return tm_launch(kernel, grid, block, 0, (const T *)p->in0, (const T *)p->in1, (T *)p->out, n);
}

template <typename T>
static int launch_mat_add(const tm_problem *p, tm_launch_facts *facts)
{
    const unsigned edge = (unsigned)p->params[0];
    const dim3 block(edge, edge);
    const dim3 grid(tm_ceil_div(p->N, edge), tm_ceil_div(p->M, edge));
    auto kernel = mat_add_kernel<T>;
    return tm_launch_row_chunks((const void *)kernel, grid, block, 0, facts,
                                [&](dim3 chunk, unsigned first_block_y) {
        return tm_launch(kernel, chunk, block, 0, (const T *)p->in0, (const T *)p->in1, (T *)p->out,
                         p->M, p->N, first_block_y);
    });
}

int tm_vec_add_launch(const tm_problem *p, tm_launch_facts *facts)
{
    return p->dtype == TM_F32 ? launch_vec_add<float>(p, facts) : launch_vec_add<double>(p, facts);
}

int tm_mat_add_launch(const tm_problem *p, tm_launch_facts *facts)
{
    return p->dtype == TM_F32 ? launch_mat_add<float>(p, facts) : launch_mat_add<double>(p, facts);
}

// Two loads and one store per element.
double tm_elementwise_bytes(const tm_problem *p)
{
    return (p->dtype == TM_F32 ? 4.0 : 8.0) * 3.0 * (double)p->M * p->N;
}
