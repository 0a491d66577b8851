// lecture: 001_b0bed8cdb5b583cc.txt:288 (CMU 15-418, "CUDA Example 3: Reduction", "This kernel is not correct")
// kernel: reduce
// defines: none
// fixes: none to compile. As printed, `d <= 1` (meant `d <<= 1`) never changes d: g++ and nvcc warn
//  "for increment expression has no effect"; `i % (d < 1)` is i % 0. Launched, it divides by zero
//  (a fault on the emulator) or never ends. The slide says the kernel is wrong anyway (no barrier)
// launch: not launched as printed (the loop never ends)

__global__ void reduce(float * A, int length) {
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    for (int d=1; d < length; d <= 1) {
        if(i < length && i % (d < 1) == 0) {
            A[i] += A[i+d];
        }
    }
}
