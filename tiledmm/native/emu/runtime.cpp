// runtime.cpp: the CUDA runtime API subset on the CPU emulator: errors, device memory with an
// emulated limit, device properties, events, function attributes and occupancy.
#include "cuda_emu.h"
#include "emu_internal.h"
#include "host_memory.h"

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

struct CUevent_st {
    std::chrono::steady_clock::time_point t;
    bool recorded;
    unsigned flags;
};

namespace tm_emu {
namespace {

thread_local cudaError_t tl_last_error = cudaSuccess;
thread_local std::string tl_detail;

std::mutex g_mem_mu;
std::unordered_map<void *, size_t> g_allocs;
size_t g_mem_used = 0;
size_t g_mem_limit = 0;

// Allocations below this are not compared with the host memory available now (a few file
// reads each; allocations this small do not push a process over its limit).
constexpr size_t kCheckAvailableFrom = (size_t)64 << 20;

size_t mem_limit_locked()
{
    if (!g_mem_limit) {
        const char *e = getenv("TILEDMM_EMU_MEMORY_MB");
        long long mb = e && *e ? atoll(e) : 0;
        if (mb > 0) {
            g_mem_limit = (size_t)mb * 1024 * 1024;
        } else {
            // Half of what the process can ever have: physical memory, or a container's lower
            // cgroup limit (host_memory.h), since emulated device memory is host memory.
            const tm_host_memory_limits *host = tm_host_memory_limits_get();
            g_mem_limit = host && host->limit ? (size_t)(host->limit / 2) : (size_t)4 << 30;
        }
    }
    return g_mem_limit;
}

std::mutex g_func_mu;
std::unordered_map<const void *, size_t> g_func_max_dyn;

std::mutex g_event_mu;
std::set<cudaEvent_t> g_events;

bool event_valid(cudaEvent_t e)
{
    std::lock_guard<std::mutex> g(g_event_mu);
    return e && g_events.count(e);
}

std::string cpu_model()
{
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line)) {
        if (line.compare(0, 10, "model name") == 0 || line.compare(0, 9, "Processor") == 0 ||
            line.compare(0, 8, "cpu model") == 0) {
            size_t c = line.find(':');
            if (c != std::string::npos) {
                size_t s = line.find_first_not_of(" \t", c + 1);
                if (s != std::string::npos) return line.substr(s);
            }
        }
    }
    return "unknown CPU";
}

}   // namespace

cudaError_t set_error(cudaError_t err, const std::string &detail)
{
    if (err != cudaSuccess) {
        tl_last_error = err;
        tl_detail = detail;
    }
    return err;
}

size_t max_dynamic_shared(const void *func)
{
    std::lock_guard<std::mutex> g(g_func_mu);
    auto it = g_func_max_dyn.find(func);
    return it == g_func_max_dyn.end() ? kSharedPerBlock : it->second;
}

}   // namespace tm_emu

using namespace tm_emu;

extern "C" {

const char *tm_emu_last_error_detail(void)
{
    return tl_detail.c_str();
}

size_t tm_emu_memory_limit(void)
{
    std::lock_guard<std::mutex> g(g_mem_mu);
    return mem_limit_locked();
}

size_t tm_emu_memory_used(void)
{
    std::lock_guard<std::mutex> g(g_mem_mu);
    return g_mem_used;
}

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    if (!devPtr) return set_error(cudaErrorInvalidValue, "cudaMalloc: devPtr is NULL");
    *devPtr = nullptr;
    if (size == 0) return cudaSuccess;
    if (size >= kCheckAvailableFrom) {
        // Host memory that Linux hands out but cannot back ends with the OOM killer, not
        // with a failed allocation: refuse what the process cannot get now (host_memory.h).
        char why[TM_HM_PATH + 160];
        const unsigned long long available = tm_host_memory_available(why, sizeof why);
        if (size > available) {
            char buf[TM_HM_PATH + 400];
            snprintf(buf, sizeof buf,
                     "cudaMalloc: %zu bytes requested, but the emulated device's memory is host "
                     "memory and only %llu bytes are available now (%s)",
                     size, available, why);
            return set_error(cudaErrorMemoryAllocation, buf);
        }
    }
    {
        std::lock_guard<std::mutex> g(g_mem_mu);
        size_t limit = mem_limit_locked();
        if (size > limit - g_mem_used) {
            char buf[256];
            snprintf(
                buf, sizeof buf,
                "cudaMalloc: %zu bytes requested, %zu of the emulated device's %zu bytes are free "
                "(TILEDMM_EMU_MEMORY_MB sets the limit)",
                size, limit - g_mem_used, limit);
            return set_error(cudaErrorMemoryAllocation, buf);
        }
        g_mem_used += size;   // reserve before allocating
    }
    void *p = nullptr;
    if (posix_memalign(&p, 256, size) != 0 || !p) {
        std::lock_guard<std::mutex> g(g_mem_mu);
        g_mem_used -= size;
        return set_error(cudaErrorMemoryAllocation, "cudaMalloc: the host allocation failed");
    }
    {
        std::lock_guard<std::mutex> g(g_mem_mu);
        g_allocs[p] = size;
    }
    *devPtr = p;
    return cudaSuccess;
}

cudaError_t cudaFree(void *devPtr)
{
    if (!devPtr) return cudaSuccess;
    {
        std::lock_guard<std::mutex> g(g_mem_mu);
        auto it = g_allocs.find(devPtr);
        if (it == g_allocs.end())
            return set_error(cudaErrorInvalidValue,
                             "cudaFree: pointer was not returned by cudaMalloc (or freed twice)");
        g_mem_used -= it->second;
        g_allocs.erase(it);
    }
    free(devPtr);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    if ((int)kind < 0 || (int)kind > 4) return set_error(cudaErrorInvalidMemcpyDirection);
    if (count == 0) return cudaSuccess;
    if (!dst || !src) return set_error(cudaErrorInvalidValue, "cudaMemcpy: NULL pointer");
    memmove(dst, src, count);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t)
{
    return cudaMemcpy(dst, src, count, kind);
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
    if (count == 0) return cudaSuccess;
    if (!devPtr) return set_error(cudaErrorInvalidValue, "cudaMemset: NULL pointer");
    memset(devPtr, value, count);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t)
{
    return cudaMemset(devPtr, value, count);
}

cudaError_t cudaMemGetInfo(size_t *freeb, size_t *total)
{
    if (!freeb || !total) return set_error(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> g(g_mem_mu);
    *total = mem_limit_locked();
    *freeb = *total - g_mem_used;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    return cudaSuccess;
}
cudaError_t cudaDeviceReset(void)
{
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t)
{
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = tl_last_error;
    tl_last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    return tl_last_error;
}

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
#define TM_E(n) \
    case n: return #n;
        // clang-format off
    TM_E(cudaSuccess) TM_E(cudaErrorInvalidValue) TM_E(cudaErrorMemoryAllocation)
    TM_E(cudaErrorInitializationError) TM_E(cudaErrorCudartUnloading) TM_E(cudaErrorProfilerDisabled)
    TM_E(cudaErrorProfilerNotInitialized) TM_E(cudaErrorProfilerAlreadyStarted)
    TM_E(cudaErrorProfilerAlreadyStopped) TM_E(cudaErrorInvalidConfiguration) TM_E(cudaErrorInvalidPitchValue)
    TM_E(cudaErrorInvalidSymbol) TM_E(cudaErrorInvalidHostPointer) TM_E(cudaErrorInvalidDevicePointer)
    TM_E(cudaErrorInvalidTexture) TM_E(cudaErrorInvalidTextureBinding) TM_E(cudaErrorInvalidChannelDescriptor)
    TM_E(cudaErrorInvalidMemcpyDirection) TM_E(cudaErrorAddressOfConstant) TM_E(cudaErrorTextureFetchFailed)
    TM_E(cudaErrorTextureNotBound) TM_E(cudaErrorSynchronizationError) TM_E(cudaErrorInvalidFilterSetting)
    TM_E(cudaErrorInvalidNormSetting) TM_E(cudaErrorMixedDeviceExecution) TM_E(cudaErrorNotYetImplemented)
    TM_E(cudaErrorMemoryValueTooLarge) TM_E(cudaErrorStubLibrary) TM_E(cudaErrorInsufficientDriver)
    TM_E(cudaErrorCallRequiresNewerDriver) TM_E(cudaErrorInvalidSurface) TM_E(cudaErrorDuplicateVariableName)
    TM_E(cudaErrorDuplicateTextureName) TM_E(cudaErrorDuplicateSurfaceName) TM_E(cudaErrorDevicesUnavailable)
    TM_E(cudaErrorIncompatibleDriverContext) TM_E(cudaErrorMissingConfiguration)
    TM_E(cudaErrorPriorLaunchFailure) TM_E(cudaErrorLaunchMaxDepthExceeded) TM_E(cudaErrorLaunchFileScopedTex)
    TM_E(cudaErrorLaunchFileScopedSurf) TM_E(cudaErrorSyncDepthExceeded)
    TM_E(cudaErrorLaunchPendingCountExceeded) TM_E(cudaErrorInvalidDeviceFunction) TM_E(cudaErrorNoDevice)
    TM_E(cudaErrorInvalidDevice) TM_E(cudaErrorDeviceNotLicensed)
    TM_E(cudaErrorSoftwareValidityNotEstablished) TM_E(cudaErrorStartupFailure)
    TM_E(cudaErrorInvalidKernelImage) TM_E(cudaErrorDeviceUninitialized) TM_E(cudaErrorMapBufferObjectFailed)
    TM_E(cudaErrorUnmapBufferObjectFailed) TM_E(cudaErrorArrayIsMapped) TM_E(cudaErrorAlreadyMapped)
    TM_E(cudaErrorNoKernelImageForDevice) TM_E(cudaErrorAlreadyAcquired) TM_E(cudaErrorNotMapped)
    TM_E(cudaErrorNotMappedAsArray) TM_E(cudaErrorNotMappedAsPointer) TM_E(cudaErrorECCUncorrectable)
    TM_E(cudaErrorUnsupportedLimit) TM_E(cudaErrorDeviceAlreadyInUse) TM_E(cudaErrorPeerAccessUnsupported)
    TM_E(cudaErrorInvalidPtx) TM_E(cudaErrorInvalidGraphicsContext) TM_E(cudaErrorNvlinkUncorrectable)
    TM_E(cudaErrorJitCompilerNotFound) TM_E(cudaErrorUnsupportedPtxVersion)
    TM_E(cudaErrorJitCompilationDisabled) TM_E(cudaErrorUnsupportedExecAffinity)
    TM_E(cudaErrorUnsupportedDevSideSync) TM_E(cudaErrorContained) TM_E(cudaErrorInvalidSource)
    TM_E(cudaErrorFileNotFound) TM_E(cudaErrorSharedObjectSymbolNotFound)
    TM_E(cudaErrorSharedObjectInitFailed) TM_E(cudaErrorOperatingSystem) TM_E(cudaErrorInvalidResourceHandle)
    TM_E(cudaErrorIllegalState) TM_E(cudaErrorLossyQuery) TM_E(cudaErrorSymbolNotFound)
    TM_E(cudaErrorNotReady) TM_E(cudaErrorIllegalAddress) TM_E(cudaErrorLaunchOutOfResources)
    TM_E(cudaErrorLaunchTimeout) TM_E(cudaErrorLaunchIncompatibleTexturing)
    TM_E(cudaErrorPeerAccessAlreadyEnabled) TM_E(cudaErrorPeerAccessNotEnabled)
    TM_E(cudaErrorSetOnActiveProcess) TM_E(cudaErrorContextIsDestroyed) TM_E(cudaErrorAssert)
    TM_E(cudaErrorTooManyPeers) TM_E(cudaErrorHostMemoryAlreadyRegistered)
    TM_E(cudaErrorHostMemoryNotRegistered) TM_E(cudaErrorHardwareStackError) TM_E(cudaErrorIllegalInstruction)
    TM_E(cudaErrorMisalignedAddress) TM_E(cudaErrorInvalidAddressSpace) TM_E(cudaErrorInvalidPc)
    TM_E(cudaErrorLaunchFailure) TM_E(cudaErrorCooperativeLaunchTooLarge) TM_E(cudaErrorTensorMemoryLeak)
    TM_E(cudaErrorNotPermitted) TM_E(cudaErrorNotSupported) TM_E(cudaErrorSystemNotReady)
    TM_E(cudaErrorSystemDriverMismatch) TM_E(cudaErrorCompatNotSupportedOnDevice)
    TM_E(cudaErrorMpsConnectionFailed) TM_E(cudaErrorMpsRpcFailure) TM_E(cudaErrorMpsServerNotReady)
    TM_E(cudaErrorMpsMaxClientsReached) TM_E(cudaErrorMpsMaxConnectionsReached)
    TM_E(cudaErrorMpsClientTerminated) TM_E(cudaErrorCdpNotSupported) TM_E(cudaErrorCdpVersionMismatch)
    TM_E(cudaErrorStreamCaptureUnsupported) TM_E(cudaErrorStreamCaptureInvalidated)
    TM_E(cudaErrorStreamCaptureMerge) TM_E(cudaErrorStreamCaptureUnmatched)
    TM_E(cudaErrorStreamCaptureUnjoined) TM_E(cudaErrorStreamCaptureIsolation)
    TM_E(cudaErrorStreamCaptureImplicit) TM_E(cudaErrorCapturedEvent) TM_E(cudaErrorStreamCaptureWrongThread)
    TM_E(cudaErrorTimeout) TM_E(cudaErrorGraphExecUpdateFailure) TM_E(cudaErrorExternalDevice)
    TM_E(cudaErrorInvalidClusterSize) TM_E(cudaErrorFunctionNotLoaded) TM_E(cudaErrorInvalidResourceType)
    TM_E(cudaErrorInvalidResourceConfiguration) TM_E(cudaErrorUnknown)
        // clang-format on
#undef TM_E
    }
    return "unrecognized error code";
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorHostMemoryAlreadyRegistered:
        return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered:
        return "pointer does not correspond to a registered memory region";
    case cudaErrorPeerAccessNotEnabled: return "peer access has not been enabled";
    case cudaErrorUnsupportedLimit: return "limit is not supported on this architecture";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorCudartUnloading: return "driver shutting down";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidPitchValue: return "invalid pitch argument";
    case cudaErrorInvalidSymbol: return "invalid device symbol";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver:
        return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidKernelImage: return "device kernel image is invalid";
    case cudaErrorNoKernelImageForDevice:
        return "no kernel image is available for execution on the device";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchTimeout: return "the launch timed out and was terminated";
    case cudaErrorAssert: return "device-side assert triggered";
    case cudaErrorMisalignedAddress: return "misaligned address";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotPermitted: return "operation not permitted";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorUnknown: return "unknown error";
    }
    return "unrecognized error code";
}

cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count) return set_error(cudaErrorInvalidValue);
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    if (!device) return set_error(cudaErrorInvalidValue);
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    if (device != 0) return set_error(cudaErrorInvalidDevice, "the emulator has one device, 0");
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device)
{
    if (!p) return set_error(cudaErrorInvalidValue);
    if (device != 0) return set_error(cudaErrorInvalidDevice, "the emulator has one device, 0");
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "tiledmm CPU emulator (%s)", cpu_model().c_str());
    p->totalGlobalMem = tm_emu_memory_limit();
    p->sharedMemPerBlock = kSharedPerBlock;
    p->sharedMemPerBlockOptin = kSharedPerBlockOptin;
    p->sharedMemPerMultiprocessor = kSharedPerSM;
    p->reservedSharedMemPerBlock = kSharedReservedPerBlock;
    p->regsPerBlock = kRegsPerBlock;
    p->regsPerMultiprocessor = kRegsPerSM;
    p->warpSize = 32;
    p->memPitch = (size_t)INT_MAX;
    p->maxThreadsPerBlock = kMaxThreadsPerBlock;
    for (int i = 0; i < 3; ++i) {
        p->maxThreadsDim[i] = kMaxBlockDim[i];
        p->maxGridSize[i] = (int)kMaxGrid[i];
    }
    p->totalConstMem = kConstMem;
    p->major = 0;
    p->minor = 0;
    p->multiProcessorCount = tm_emu_threads();
    p->maxThreadsPerMultiProcessor = kMaxThreadsPerSM;
    p->maxBlocksPerMultiProcessor = kMaxBlocksPerSM;
    p->l2CacheSize = 0;   // unknown
    p->memoryBusWidth = 0;   // unknown
    p->integrated = 1;   // shares host memory
    p->canMapHostMemory = 1;
    p->unifiedAddressing = 1;
    p->concurrentKernels = 0;
    p->asyncEngineCount = 0;
    // the limits a GPU of compute capability 9.0 reports (deviceQuery prints them)
    p->textureAlignment = 512;
    p->texturePitchAlignment = 32;
    p->surfaceAlignment = 512;
    p->maxTexture1D = 131072;
    p->maxTexture2D[0] = 131072;
    p->maxTexture2D[1] = 65536;
    p->maxTexture3D[0] = p->maxTexture3D[1] = p->maxTexture3D[2] = 16384;
    p->maxTexture1DLayered[0] = 32768;
    p->maxTexture1DLayered[1] = 2048;
    p->maxTexture2DLayered[0] = p->maxTexture2DLayered[1] = 32768;
    p->maxTexture2DLayered[2] = 2048;
    p->computePreemptionSupported = 1;
    p->hostRegisterSupported = 1;
    p->memoryPoolsSupported = 1;
    p->concurrentManagedAccess = 1;
    p->managedMemory = 1;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    if (!value) return set_error(cudaErrorInvalidValue);
    if (device != 0) return set_error(cudaErrorInvalidDevice, "the emulator has one device, 0");
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = kMaxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *value = kMaxBlockDim[0]; break;
    case cudaDevAttrMaxBlockDimY: *value = kMaxBlockDim[1]; break;
    case cudaDevAttrMaxBlockDimZ: *value = kMaxBlockDim[2]; break;
    case cudaDevAttrMaxGridDimX: *value = (int)kMaxGrid[0]; break;
    case cudaDevAttrMaxGridDimY: *value = (int)kMaxGrid[1]; break;
    case cudaDevAttrMaxGridDimZ: *value = (int)kMaxGrid[2]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = (int)kSharedPerBlock; break;
    case cudaDevAttrTotalConstantMemory: *value = (int)kConstMem; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMaxRegistersPerBlock: *value = kRegsPerBlock; break;
    case cudaDevAttrClockRate: *value = 0; break;   // unknown
    case cudaDevAttrMultiProcessorCount: *value = tm_emu_threads(); break;
    case cudaDevAttrMemoryClockRate: *value = 0; break;   // unknown
    case cudaDevAttrGlobalMemoryBusWidth: *value = 0; break;
    case cudaDevAttrL2CacheSize: *value = 0; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = kMaxThreadsPerSM; break;
    case cudaDevAttrComputeCapabilityMajor: *value = 0; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = (int)kSharedPerSM; break;
    case cudaDevAttrMaxRegistersPerMultiprocessor: *value = kRegsPerSM; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)kSharedPerBlockOptin; break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: *value = kMaxBlocksPerSM; break;
    default: {
        // every other attribute CUDA 13 names: as the properties give it, 0 for a feature the
        // emulator does not have; only a value no CUDA version names is invalid
        if ((int)attr <= 0 || attr >= cudaDevAttrMax)
            return set_error(cudaErrorInvalidValue,
                             "cudaDeviceGetAttribute: not a device attribute");
        struct cudaDeviceProp p;
        cudaGetDeviceProperties(&p, 0);
        int known;
        *value = tm_emu_attr_from_prop(&p, attr, &known);
        break;
    }
    }
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
    if (!v) return set_error(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    if (!v) return set_error(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    if (!event) return set_error(cudaErrorInvalidValue);
    cudaEvent_t e =
        new (std::nothrow) CUevent_st{std::chrono::steady_clock::time_point(), false, flags};
    if (!e) return set_error(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> g(g_event_mu);
    g_events.insert(e);
    *event = e;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t)
{
    if (!event_valid(event)) return set_error(cudaErrorInvalidResourceHandle);
    event->t = std::chrono::steady_clock::now();
    event->recorded = true;
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    if (!event_valid(event)) return set_error(cudaErrorInvalidResourceHandle);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
    if (!event_valid(event)) return set_error(cudaErrorInvalidResourceHandle);
    return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    if (!ms) return set_error(cudaErrorInvalidValue);
    if (!event_valid(start) || !event_valid(end)) return set_error(cudaErrorInvalidResourceHandle);
    if ((start->flags | end->flags) & cudaEventDisableTiming)
        return set_error(cudaErrorInvalidResourceHandle);
    if (!start->recorded || !end->recorded) return set_error(cudaErrorInvalidResourceHandle);
    *ms = std::chrono::duration<float, std::milli>(end->t - start->t).count();
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    {
        std::lock_guard<std::mutex> g(g_event_mu);
        if (!event || !g_events.erase(event)) return set_error(cudaErrorInvalidResourceHandle);
    }
    delete event;
    return cudaSuccess;
}

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
    if (!attr) return set_error(cudaErrorInvalidValue);
    if (!func) return set_error(cudaErrorInvalidDeviceFunction);
    memset(attr, 0, sizeof *attr);
    attr->sharedSizeBytes = 0;   // static shared memory is not known to the emulator
    attr->maxThreadsPerBlock = kMaxThreadsPerBlock;
    attr->numRegs = 0;   // unknown
    attr->maxDynamicSharedSizeBytes = (int)max_dynamic_shared(func);
    attr->preferredShmemCarveout = -1;
    return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    if (!func) return set_error(cudaErrorInvalidDeviceFunction);
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value > kSharedPerBlockOptin)
            return set_error(cudaErrorInvalidValue,
                             "cudaFuncSetAttribute: dynamic shared memory above the opt-in "
                             "limit of the emulated device (227 KiB)");
        std::lock_guard<std::mutex> g(g_func_mu);
        g_func_max_dyn[func] = (size_t)value;
        return cudaSuccess;
    }
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) {
        if (value < -1 || value > 100) return set_error(cudaErrorInvalidValue);
        return cudaSuccess;
    }
    return set_error(cudaErrorInvalidValue, "cudaFuncSetAttribute: attribute not emulated");
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, const void *func,
                                                          int blockSize, size_t dyn)
{
    if (!numBlocks) return set_error(cudaErrorInvalidValue);
    if (!func) return set_error(cudaErrorInvalidDeviceFunction);
    if (blockSize <= 0) return set_error(cudaErrorInvalidValue);
    *numBlocks = 0;
    if (blockSize > kMaxThreadsPerBlock || dyn > max_dynamic_shared(func)) return cudaSuccess;
    int warps = (blockSize + 31) / 32;
    int by_threads = kMaxThreadsPerSM / (warps * 32);
    int n = by_threads < kMaxBlocksPerSM ? by_threads : kMaxBlocksPerSM;
    size_t smem = dyn + kSharedReservedPerBlock;   // static shared memory is unknown: counted as 0
    int by_smem = (int)(kSharedPerSM / smem);
    if (by_smem < n) n = by_smem;
    *numBlocks = n;
    return cudaSuccess;
}

}   // extern "C"
