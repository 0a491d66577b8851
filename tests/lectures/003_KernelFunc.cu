// lecture: 003_3afaee5c710a3655.txt:303 (Matrix-matrix product, "Variable Type Restrictions")
// kernel: KernelFunc
// defines: none
// fixes: the slide shows a signature only: an empty body `{ }` added (as printed, tiledmm says the
//  kernel is declared but has no body)
// as printed: as_printed/003_KernelFunc.cu
// launch: any (it does nothing)

__global__ void KernelFunc(float*
ptr)
{
}
