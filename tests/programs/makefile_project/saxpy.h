// The project's own header: the kernel's launcher, defined in saxpy.cu.
#pragma once
void saxpy(int n, float a, const float *x, float *y);
