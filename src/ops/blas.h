/* GEMM through OpenBLAS for op kernels (MatMul, BatchMatMulV2). Internal to the library. */
#ifndef NB_BLAS_H
#define NB_BLAS_H

#include "op.h"

#include <limits.h>

/* The largest m, n, k or leading dimension a GEMM takes (OpenBLAS's blasint is int). */
#define NB_GEMM_MAX_DIM INT_MAX

/* Row-major C = op(A) op(B) + beta C for t NB_F32 or NB_F64, where op(A) is m x k (A is
   stored k x m when ta), op(B) is k x n (B stored n x k when tb) and C is m x n. lda, ldb
   and ldc are the row strides of A, B and C in elements. m, n or k may be 0 (k == 0
   gives beta C); every dimension and stride must be <= NB_GEMM_MAX_DIM. */
void nb_gemm(nb_dtype t, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a,
             int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc);

/* Makes GEMMs called from this thread use n threads (a no-op when they already do).
   Call it outside parallel regions; inside one, OpenBLAS runs single-threaded. */
void nb_blas_set_threads(int n);

#endif
