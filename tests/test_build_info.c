/* nb_build_info: the build, CPU, BLAS core, oneDNN ISA and backends it reports, and the
   slow-BLAS warning. */
#define _POSIX_C_SOURCE 200809L /* strcasecmp */
#include "testutil.h"

#include "../src/ops/blas.h"
#include "../src/ops/build_info.h"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <strings.h>

static bool contains(const char *s, const char *part) { return strstr(s, part) != NULL; }

static void test_build_info_fields(void **state) {
  (void)state;
  const char *info = nb_build_info();
  assert_non_null(info);
  assert_true(strlen(info) > 0);
  assert_ptr_equal(nb_build_info(), info);
  char want[128];
  snprintf(want, sizeof want, "nabla %s;", nb_version());
  assert_true(contains(info, want));
  assert_true(contains(info, "blas OpenBLAS"));
  snprintf(want, sizeof want, "blas core %s (", openblas_get_corename());
  assert_true(contains(info, want));
  const dnnl_version_t *v = dnnl_version();
  snprintf(want, sizeof want, "onednn %d.%d.%d (openmp, isa %s)", v->major, v->minor, v->patch, nbop_onednn_isa_name());
  assert_true(contains(info, want));
  snprintf(want, sizeof want, "gemm_f32=oneDNN (%s) gemm_f64=OpenBLAS (%s) conv=oneDNN (f32), im2col+GEMM (f64)",
           nbop_onednn_isa_name(), openblas_get_corename());
  assert_true(contains(info, want));
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  assert_true(contains(info, __builtin_cpu_supports("avx2") ? "avx2=yes" : "avx2=no"));
  assert_true(contains(info, __builtin_cpu_supports("avx512f") ? "avx512f=yes" : "avx512f=no"));
#endif
}

/* oneDNN's ISA on an x86-64 CPU follows the CPU's own features (oneDNN needs SSE4.1 at
   least for its JIT kernels), or the cap ctest sets through ONEDNN_MAX_CPU_ISA. */
static void test_onednn_isa(void **state) {
  (void)state;
  const char *isa = nbop_onednn_isa_name(), *cap = getenv("ONEDNN_MAX_CPU_ISA");
  assert_non_null(isa);
  if (cap && strcasecmp(cap, "SSE41") == 0) {
    assert_string_equal(isa, "sse41");
    return;
  }
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f"))
    assert_true(strncmp(isa, "avx512", 6) == 0);
  else if (__builtin_cpu_supports("avx2"))
    assert_true(strncmp(isa, "avx2", 4) == 0);
  else if (__builtin_cpu_supports("sse4.1"))
    assert_string_not_equal(isa, "generic");
#endif
}

/* Threads racing on the first call all get the same, complete string. */
static void test_build_info_threads(void **state) {
  (void)state;
  const char *seen[8] = {0};
#pragma omp parallel for num_threads(8)
  for (int i = 0; i < 8; i++) seen[i] = nb_build_info();
  for (int i = 1; i < 8; i++) assert_ptr_equal(seen[i], seen[0]);
  assert_true(contains(seen[0], "protobuf-c "));
}

static void test_blas_warning(void **state) {
  (void)state;
  char msg[160] = "untouched";
  assert_false(nbop_build_info_blas_warning("Haswell", true, msg, sizeof msg));
  assert_false(nbop_build_info_blas_warning("Zen", true, msg, sizeof msg));
  assert_false(nbop_build_info_blas_warning("Prescott", false, msg, sizeof msg)); /* the CPU can do no better */
  assert_string_equal(msg, "untouched");
  assert_true(nbop_build_info_blas_warning("Prescott", true, msg, sizeof msg));
  assert_string_equal(msg, "OpenBLAS chose generic Prescott kernels on an AVX2 CPU: float64 GEMM runs far below peak");
  assert_true(nbop_build_info_blas_warning("CORE2", true, msg, sizeof msg));
  assert_true(contains(msg, "Core2"));
}

/* The report carries the warning exactly when its own core and CPU call for one (ctest
   also runs this under OPENBLAS_CORETYPE=Prescott, where an AVX2 CPU must show it). */
static void test_build_info_warning_matches(void **state) {
  (void)state;
  bool avx2 = false;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  avx2 = __builtin_cpu_supports("avx2");
#endif
  char msg[160];
  bool want = nbop_build_info_blas_warning(openblas_get_corename(), avx2, msg, sizeof msg);
  assert_int_equal(contains(nb_build_info(), "warning=\"OpenBLAS chose generic"), want);
  const char *forced = getenv("OPENBLAS_CORETYPE");
  if (forced && strcmp(forced, "Prescott") == 0) assert_int_equal(want, avx2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_build_info_fields),          cmocka_unit_test(test_onednn_isa),
      cmocka_unit_test(test_build_info_threads),         cmocka_unit_test(test_blas_warning),
      cmocka_unit_test(test_build_info_warning_matches),
  };
  return cmocka_run_group_tests_name("build_info", tests, NULL, NULL);
}
