/* csr_cuda.c — vn_csr_spmm on the CUDA device through cuSPARSE (kernels/csr.cu). */
#include "csr_internal.h"

vn_tensor *csr__cuda_spmm(const vn_csr *a, const vn_tensor *values, const vn_tensor *x)
{
    return vn__errp(VN_ERR_DEVICE, "csr_spmm: not on CUDA yet");
}
