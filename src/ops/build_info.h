/* Pieces of nb_build_info exposed for the tests. Internal to the library. */
#ifndef NBOP_BUILD_INFO_H
#define NBOP_BUILD_INFO_H

#include <stdbool.h>
#include <stddef.h>

/* The warning nb_build_info appends when OpenBLAS (float64 GEMM) picked a core without
   AVX2 kernels (Prescott, Core2, Sandybridge, ...) although the CPU has AVX2: true with
   the message in out (size bytes, truncated to fit), false and out untouched when there
   is none. */
bool nbop_build_info_blas_warning(const char *corename, bool cpu_has_avx2, char *out, size_t size);

/* The library or method that runs Conv2D and its gradients (nb_build_info's conv=). */
const char *nbop_conv_backend_name(void);

#endif
