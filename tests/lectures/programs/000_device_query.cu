// lecture: 000_2a0a66598de58fa7.txt:462-486 (CS133, "Device Query")
// fixes: `int i` declared; `dev_prop.dev_prop.maxThreadsPerBlock` is `dev_prop.maxThreadsPerBlock`
//  and `Dev_prop.sharedMemoryPerBlock` is `dev_prop.sharedMemPerBlock`; a main that prints what
//  the loop would decide on. The output differs by backend by design (the device's properties).
#include <cuda_runtime.h>
#include <stdio.h>

int main(void)
{
    int dev_count;
    cudaGetDeviceCount( &dev_count);
    printf("%d device(s)\n", dev_count);

    cudaDeviceProp      dev_prop;
    int i;
    for (i = 0; i < dev_count; i++) {
        cudaGetDeviceProperties( &dev_prop, i);

        // decide if device has sufficient resources and capabilities
        printf("device %d: %s\n", i, dev_prop.name);
        printf("  compute capability %d.%d, %d SMs\n", dev_prop.major, dev_prop.minor,
               dev_prop.multiProcessorCount);
        printf("  maxThreadsPerBlock %d\n", dev_prop.maxThreadsPerBlock);
        printf("  sharedMemPerBlock %zu\n", dev_prop.sharedMemPerBlock);
        printf("  warpSize %d\n", dev_prop.warpSize);
        printf("  maxThreadsDim %d %d %d\n", dev_prop.maxThreadsDim[0], dev_prop.maxThreadsDim[1],
               dev_prop.maxThreadsDim[2]);
        printf("  maxGridSize %d %d %d\n", dev_prop.maxGridSize[0], dev_prop.maxGridSize[1],
               dev_prop.maxGridSize[2]);
    }
    return 0;
}
