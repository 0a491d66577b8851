// emu_internal.h: what emu/*.cpp share. Not for kernels or glue.
#pragma once
#include <stddef.h>
#include <string>
#include "runtime_api.h"
#include "tm_limits.h"

namespace tm_emu {
// Emulated device limits (sm_90-like where a number is needed).
constexpr int kMaxThreadsPerBlock = 1024;
constexpr int kMaxBlockDim[3] = {1024, 1024, 64};
constexpr unsigned kMaxGrid[3] = {2147483647u, 65535u, 65535u};
constexpr size_t kSharedPerBlock = TM_SHARED_DEFAULT_BYTES;          // without opt-in
constexpr size_t kSharedPerBlockOptin = 227 * 1024;    // with cudaFuncSetAttribute
constexpr size_t kSharedPerSM = 228 * 1024;
constexpr size_t kSharedReservedPerBlock = 1024;
constexpr int kMaxThreadsPerSM = 2048;
constexpr int kMaxBlocksPerSM = 32;
constexpr int kRegsPerBlock = 65536;
constexpr int kRegsPerSM = 65536;
constexpr size_t kConstMem = 64 * 1024;

// Records err as this host thread's last error (and the detail, "" to clear it); returns err.
cudaError_t set_error(cudaError_t err, const std::string &detail = std::string());
// Largest dynamic shared memory a launch of func may ask for.
size_t max_dynamic_shared(const void *func);
}  // namespace tm_emu
