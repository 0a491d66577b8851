__global__ void KernelFunc(float*
ptr)
