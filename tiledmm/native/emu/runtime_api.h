/* runtime_api.h: the subset of the CUDA runtime API that tiledmm uses, for the CPU emulator.
 * Same names and enum values as CUDA 13's cuda_runtime_api.h / driver_types.h /
 * vector_types.h, so the C11 glue in csrc/ and the kernels in cuda/ (C++17 under TM_EMU) are
 * written once.
 * Plus a few emulator extras (tm_emu_*), all with C linkage. */
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUDART_VERSION 13000
#define TM_EMU_CUDART_VERSION 13000

/* ---- errors (values as in driver_types.h, CUDA 13) ---- */
enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorCudartUnloading = 4,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidPitchValue = 12,
    cudaErrorInvalidSymbol = 13,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInsufficientDriver = 35,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidKernelImage = 200,
    cudaErrorNoKernelImageForDevice = 209,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorLaunchTimeout = 702,
    cudaErrorAssert = 710,
    cudaErrorMisalignedAddress = 716,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotPermitted = 800,
    cudaErrorNotSupported = 801,
    cudaErrorUnknown = 999
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1,
    cudaDevAttrMaxBlockDimX = 2,
    cudaDevAttrMaxBlockDimY = 3,
    cudaDevAttrMaxBlockDimZ = 4,
    cudaDevAttrMaxGridDimX = 5,
    cudaDevAttrMaxGridDimY = 6,
    cudaDevAttrMaxGridDimZ = 7,
    cudaDevAttrMaxSharedMemoryPerBlock = 8,
    cudaDevAttrTotalConstantMemory = 9,
    cudaDevAttrWarpSize = 10,
    cudaDevAttrMaxRegistersPerBlock = 12,
    cudaDevAttrClockRate = 13,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrMemoryClockRate = 36,
    cudaDevAttrGlobalMemoryBusWidth = 37,
    cudaDevAttrL2CacheSize = 38,
    cudaDevAttrMaxThreadsPerMultiProcessor = 39,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
    cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
    cudaDevAttrMaxRegistersPerMultiprocessor = 82,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
    cudaDevAttrMaxBlocksPerMultiprocessor = 106
};

enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
    cudaFuncAttributePreferredSharedMemoryCarveout = 9,
    cudaFuncAttributeMax
};

#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;

/* ---- vector types (vector_types.h); C structs, constructors only in C++ ---- */
struct uint3 { unsigned int x, y, z; };
typedef struct uint3 uint3;

struct dim3 {
    unsigned int x, y, z;
#ifdef __cplusplus
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
#endif
};
typedef struct dim3 dim3;

#define TM_EMU_VEC2(T, N, A) struct __attribute__((aligned(A))) N { T x, y; }; typedef struct N N; \
    static inline N make_##N(T x, T y) { N v; v.x = x; v.y = y; return v; }
#define TM_EMU_VEC3(T, N) struct N { T x, y, z; }; typedef struct N N; \
    static inline N make_##N(T x, T y, T z) { N v; v.x = x; v.y = y; v.z = z; return v; }
#define TM_EMU_VEC4(T, N, A) struct __attribute__((aligned(A))) N { T x, y, z, w; }; typedef struct N N; \
    static inline N make_##N(T x, T y, T z, T w) { N v; v.x = x; v.y = y; v.z = z; v.w = w; return v; }

TM_EMU_VEC2(float, float2, 8)
TM_EMU_VEC3(float, float3)
TM_EMU_VEC4(float, float4, 16)
TM_EMU_VEC2(double, double2, 16)
TM_EMU_VEC3(double, double3)
TM_EMU_VEC4(double, double4, 16)
TM_EMU_VEC2(int, int2, 8)
TM_EMU_VEC3(int, int3)
TM_EMU_VEC4(int, int4, 16)
TM_EMU_VEC2(unsigned int, uint2, 8)
TM_EMU_VEC4(unsigned int, uint4, 16)
TM_EMU_VEC2(long long, longlong2, 16)
TM_EMU_VEC2(unsigned long long, ulonglong2, 16)
TM_EMU_VEC4(signed char, char4, 4)
TM_EMU_VEC4(unsigned char, uchar4, 4)
static inline uint3 make_uint3(unsigned int x, unsigned int y, unsigned int z) { uint3 v; v.x = x; v.y = y; v.z = z; return v; }

/* ---- device and function properties ---- */
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int regsPerBlock;
    int warpSize;
    size_t memPitch;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    size_t totalConstMem;
    int major;
    int minor;
    size_t textureAlignment;
    int multiProcessorCount;
    int integrated;
    int canMapHostMemory;
    int concurrentKernels;
    int ECCEnabled;
    int pciBusID;
    int pciDeviceID;
    int pciDomainID;
    int asyncEngineCount;
    int unifiedAddressing;
    int memoryBusWidth;
    int l2CacheSize;
    int persistingL2CacheMaxSize;
    int maxThreadsPerMultiProcessor;
    int globalL1CacheSupported;
    int localL1CacheSupported;
    size_t sharedMemPerMultiprocessor;
    int regsPerMultiprocessor;
    int managedMemory;
    int isMultiGpuBoard;
    int multiGpuBoardGroupID;
    int cooperativeLaunch;
    size_t sharedMemPerBlockOptin;
    int maxBlocksPerMultiProcessor;
    size_t reservedSharedMemPerBlock;
    int reserved[64];
};

struct cudaFuncAttributes {
    size_t sharedSizeBytes;
    size_t constSizeBytes;
    size_t localSizeBytes;
    int maxThreadsPerBlock;
    int numRegs;
    int ptxVersion;
    int binaryVersion;
    int cacheModeCA;
    int maxDynamicSharedSizeBytes;
    int preferredShmemCarveout;
    int reserved[16];
};

/* ---- the API ---- */
cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemset(void *devPtr, int value, size_t count);
cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream);
cudaError_t cudaMemGetInfo(size_t *free, size_t *total);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceReset(void);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorName(cudaError_t error);
const char *cudaGetErrorString(cudaError_t error);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device);
cudaError_t cudaDriverGetVersion(int *driverVersion);
cudaError_t cudaRuntimeGetVersion(int *runtimeVersion);

cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t event);

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func);
cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value);
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, const void *func,
                                                          int blockSize, size_t dynamicSMemSize);

/* ---- emulator extras ---- */
/* Human-readable detail of the last failed launch on this host thread ("" if none). */
const char *tm_emu_last_error_detail(void);
/* How the last launch on this host thread ran its blocks: "thread loops" (a kernel split at
 * its barriers, tiledmm/toolchain/split/transform.py), "fibers" (one per CUDA thread), "" before
 * any launch. For Launch.path. */
const char *tm_emu_last_launch_path(void);
/* Why the last launch on this host thread kept the fibers although its kernel has a split
 * (tm_emu_launch_pair, emu/cuda_emu.h); "" otherwise. For Launch.path_reason. */
const char *tm_emu_last_launch_reason(void);
void tm_emu_note_launch_reason(const char *why);
/* OS worker threads that run blocks (default: env TILEDMM_EMU_THREADS, else the CPUs this
 * process may run on). tm_emu_set_threads(n <= 0) restores the default. */
int tm_emu_threads(void);
void tm_emu_set_threads(int n);
/* Fiber stack size in bytes (env TILEDMM_EMU_STACK_KB; default 64 KiB, 256 KiB under ASan). */
size_t tm_emu_stack_bytes(void);
/* 1 when the emulator reports an error for threads that exit while others of their block wait
 * at a __syncthreads() (the default; undefined behaviour in CUDA), 0 when such exited threads
 * simply leave the barrier's count as on current hardware. Env TILEDMM_EMU_STRICT_EXIT=0|1. */
int tm_emu_strict_exit(void);
void tm_emu_set_strict_exit(int strict);
/* The emulated device-memory limit and what cudaMalloc has handed out, in bytes. */
size_t tm_emu_memory_limit(void);
size_t tm_emu_memory_used(void);
/* "x86-64 asm" or "ucontext": how fibers switch in this build. */
const char *tm_emu_switch_kind(void);

#ifdef __cplusplus
}
#endif
