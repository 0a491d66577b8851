// lecture: 000_2a0a66598de58fa7.txt:99 (CS133, "Example: Vector Addition Kernel")
// kernel: vecAddKernel
// defines: none
// fixes: none (the host line `<<<ceil(n/256.0), 256>>>>` has a fourth '>', not part of the kernel)
// launch: grid ceil(n / 256.0), block 256

// Compute vector sum C = A+B
// Each thread performs one pair-wise addition

__global__
void vecAddKernel(float* A_d, float* B_d, float* C_d, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x ;
    if(i < n) C_d[i] = A_d[i] + B_d[i];
}
