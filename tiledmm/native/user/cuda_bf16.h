// cuda_bf16.h: tiledmm's stand-in for the CUDA toolkit's header of this name, on the emulator
// (NVIDIA's bf16TensorCoreGemm includes it): __nv_bfloat16 (nv_bfloat16) as tm_half_types.h
// defines it, storage and conversions (__float2bfloat16{,_rn}, __bfloat162float,
// __ushort_as_bfloat16, __bfloat16_as_ushort, construction from float, double and int, rounding
// to nearest even), arithmetic through float. Like the toolkit's, it includes cuda_fp16.h. Without
// it, a compiler that finds the toolkit's own header (/usr/local/include) reads the real
// vector types and __half over the emulator's.
#pragma once
#ifndef __CUDA_BF16_H__
#define __CUDA_BF16_H__
#endif
#ifndef __CUDA_BF16_HPP__
#define __CUDA_BF16_HPP__
#endif
#include "cuda_fp16.h"
#include "tm_half_types.h"
