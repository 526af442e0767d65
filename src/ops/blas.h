/* GEMM for op kernels (MatMul, BatchMatMulV2, _MatMulAdd, im2col convolution): float32
   through oneDNN's sgemm, which picks its JIT kernels for the CPU at run time (OpenBLAS
   may fall back to generic SSE kernels on a CPU it does not know), float64 through
   OpenBLAS. Internal to the library. */
#ifndef NBOP_BLAS_H
#define NBOP_BLAS_H

#include "op.h"

#include <limits.h>

/* The largest m, n, k or leading dimension a GEMM takes (OpenBLAS's blasint is int; the
   float32 backend can be switched to OpenBLAS, so both keep its limit). */
#define NBOP_GEMM_MAX_DIM INT_MAX

/* Row-major C = op(A) op(B) + beta C for t NB_F32 or NB_F64, where op(A) is m x k (A is
   stored k x m when ta), op(B) is k x n (B stored n x k when tb) and C is m x n. lda, ldb
   and ldc are the row strides of A, B and C in elements. m, n or k may be 0 (k == 0
   gives beta C); every dimension and stride must be <= NBOP_GEMM_MAX_DIM. */
void nbop_gemm(nb_dtype t, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda, const void *b,
               int64_t ldb, double beta, void *c, int64_t ldc);

/* Makes GEMMs called from this thread use n threads, on both backends (a no-op when they
   already do). Call it outside parallel regions; inside one, a GEMM runs single-threaded. */
void nbop_blas_set_threads(int n);

/* Which library runs float32 GEMMs. oneDNN unless a test switches it: the switch lets a
   test run the same float32 op on both and compare. Process-wide; not public API. */
typedef enum nbop_gemm_backend { NBOP_GEMM_ONEDNN, NBOP_GEMM_OPENBLAS } nbop_gemm_backend;
void nbop_gemm_set_f32_backend(nbop_gemm_backend b);

/* The library that runs GEMMs of dtype t now ("oneDNN" or "OpenBLAS"), and its kernels
   on this CPU (oneDNN's ISA, or OpenBLAS's core such as "Zen" or "Prescott"). */
const char *nbop_gemm_backend_name(nb_dtype t);
const char *nbop_gemm_kernel_name(nb_dtype t);

/* How nbop_gemm runs an m x n product of dtype t with these transposes and strides: "sgemm"
   (oneDNN's, on the operands as they are), "sgemm+copy_a", "sgemm+copy_b" or
   "sgemm+copy_ab" (those operands copied to a stride oneDNN reads at full speed first),
   or "gemm" (OpenBLAS's). Benchmarks print it. */
const char *nbop_gemm_path_name(nb_dtype t, bool ta, bool tb, int64_t m, int64_t n, int64_t lda, int64_t ldb);

/* The instruction set oneDNN's kernels use on this CPU (its effective ISA, e.g. "avx2",
   "avx512_core", "avx512_core_amx"). */
const char *nbop_onednn_isa_name(void);

#endif
