/* nb_build_info: what this build runs on, so a slow path (a generic BLAS core, a baseline
   kernel clone, oneDNN's ISA below the CPU's) shows in a benchmark's log, and which
   library runs each kind of kernel. It lives in src/ops because ops is the lowest layer
   that links OpenBLAS and oneDNN (core must not); protobuf-c is an external library
   here, not a use of src/io. Computed once, on first call. */
#define _POSIX_C_SOURCE 200809L /* strcasecmp */
#include "build_info.h"
#include "blas.h"
#include "onednn.h"
#include "op.h"

#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <protobuf-c/protobuf-c.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define BUILD_INFO_X86 1
#endif

#ifndef NBOP_BUILD_TYPE
#define NBOP_BUILD_TYPE "unknown"
#endif
#ifndef NBOP_BUILD_SANITIZE
#define NBOP_BUILD_SANITIZE 0
#endif

/* OpenBLAS cores whose kernels stop short of AVX2 (SSE-only ones, and Sandybridge's AVX). */
static const char *const pre_avx2_cores[] = {
    "Katmai",       "Coppermine", "Northwood", "Prescott",  "Banias",     "Core2",
    "Penryn",       "Dunnington", "Nehalem",   "Atom",      "Athlon",     "Opteron",
    "Opteron_SSE3", "Barcelona",  "Bobcat",    "Bulldozer", "Piledriver", "Sandybridge",
};

bool nbop_build_info_blas_warning(const char *corename, bool cpu_has_avx2, char *out, size_t size) {
  if (!cpu_has_avx2 || !corename) return false;
  for (size_t i = 0; i < sizeof pre_avx2_cores / sizeof *pre_avx2_cores; i++) {
    if (strcasecmp(corename, pre_avx2_cores[i]) == 0) {
      snprintf(out, size, "OpenBLAS chose generic %s kernels on an AVX2 CPU: float64 GEMM runs far below peak",
               pre_avx2_cores[i]);
      return true;
    }
  }
  return false;
}

static char info[1536];
static pthread_once_t info_once = PTHREAD_ONCE_INIT;

/* Appends printf-style text to info at *len, truncating at the buffer's end. */
static void info_add(size_t *len, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void info_add(size_t *len, const char *fmt, ...) {
  if (*len >= sizeof info - 1) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(info + *len, sizeof info - *len, fmt, ap);
  va_end(ap);
  if (n > 0) *len = *len + (size_t)n < sizeof info ? *len + (size_t)n : sizeof info - 1;
}

#ifdef BUILD_INFO_X86
/* The CPU's brand string (cpuid leaves 0x80000002..4), spaces trimmed; "" without one. */
static void cpu_brand(char out[49]) {
  unsigned regs[12] = {0}, max = 0, b, c, d;
  out[0] = '\0';
  if (!__get_cpuid(0x80000000u, &max, &b, &c, &d) || max < 0x80000004u) return;
  for (unsigned i = 0; i < 3; i++)
    __get_cpuid(0x80000002u + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2], &regs[4 * i + 3]);
  memcpy(out, regs, 48);
  out[48] = '\0';
  char *s = out;
  while (*s == ' ') s++;
  size_t n = strlen(s);
  while (n > 0 && s[n - 1] == ' ') n--;
  memmove(out, s, n);
  out[n] = '\0';
}

/* The clone gcc's resolver runs for NBOP_SIMD_CLONES loops, from the features that define
   x86-64-v4 (AVX-512 F/BW/CD/DQ/VL) and x86-64-v3 (AVX2, FMA, BMI1/2). */
static const char *running_clone(void) {
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512cd") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return "x86-64-v4";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
      __builtin_cpu_supports("bmi2"))
    return "x86-64-v3";
  return "default";
}

static void add_cpu(size_t *len) {
  char brand[49];
  cpu_brand(brand);
  __builtin_cpu_init();
  info_add(len, "; cpu \"%s\"; isa avx2=%s fma=%s avx512f=%s avx512bw=%s avx512vl=%s sse4.2=%s", brand,
           __builtin_cpu_supports("avx2") ? "yes" : "no", __builtin_cpu_supports("fma") ? "yes" : "no",
           __builtin_cpu_supports("avx512f") ? "yes" : "no", __builtin_cpu_supports("avx512bw") ? "yes" : "no",
           __builtin_cpu_supports("avx512vl") ? "yes" : "no", __builtin_cpu_supports("sse4.2") ? "yes" : "no");
#ifdef NBOP_SIMD_CLONE_NAMES
  info_add(len, "; elementwise target_clones %s, running %s", NBOP_SIMD_CLONE_NAMES, running_clone());
#else
  info_add(len, "; elementwise baseline only (no target_clones in this build)");
#endif
}
static bool cpu_has_avx2(void) { return __builtin_cpu_supports("avx2"); }
#else
static void add_cpu(size_t *len) { info_add(len, "; cpu unknown (not x86); elementwise baseline only"); }
static bool cpu_has_avx2(void) { return false; }
#endif

/* The one place naming the convolution backend: oneDNN's convolutions for Conv2D and its
   backprops in float32; float64, and any case oneDNN refuses, stay on im2col + GEMM. */
const char *nbop_conv_backend_name(void) {
  return nbop_onednn_enabled() ? "oneDNN (f32), im2col+GEMM (f64)" : "im2col+GEMM";
}

static const char *onednn_runtime_name(unsigned r) {
  return r == DNNL_RUNTIME_OMP   ? "openmp"
         : r == DNNL_RUNTIME_SEQ ? "sequential"
         : r == DNNL_RUNTIME_TBB ? "tbb"
                                 : "other";
}

/* oneDNN's version and the ISA its JIT kernels use here, then which library runs what. */
static void add_backends(size_t *len) {
  const dnnl_version_t *v = dnnl_version();
  info_add(len, "; onednn %d.%d.%d (%s, isa %s)", v->major, v->minor, v->patch, onednn_runtime_name(v->cpu_runtime),
           nbop_onednn_isa_name());
  info_add(len, "; backends gemm_f32=%s (%s) gemm_f64=%s (%s) conv=%s", nbop_gemm_backend_name(NB_F32),
           nbop_gemm_kernel_name(NB_F32), nbop_gemm_backend_name(NB_F64), nbop_gemm_kernel_name(NB_F64),
           nbop_conv_backend_name());
}

static const char *blas_parallel_name(int p) {
  return p == OPENBLAS_SEQUENTIAL ? "sequential" : p == OPENBLAS_THREAD ? "pthreads" : "openmp";
}

/* __VERSION__ names clang ("Debian Clang 14.0.6") but is only a number for gcc. */
#if defined(__GNUC__) && !defined(__clang__)
#define BUILD_INFO_COMPILER "gcc " __VERSION__
#else
#define BUILD_INFO_COMPILER __VERSION__
#endif

static void build_info_init(void) {
  size_t len = 0;
  info_add(&len, "nabla %s; compiler %s; build %s%s", nb_version(), BUILD_INFO_COMPILER, NBOP_BUILD_TYPE,
           NBOP_BUILD_SANITIZE ? " asan+ubsan" : "");
  add_cpu(&len);
  const char *core = openblas_get_corename();
  info_add(&len, "; blas %s; blas core %s (%s, threads=%d)", openblas_get_config(), core,
           blas_parallel_name(openblas_get_parallel()), openblas_get_num_threads());
  add_backends(&len);
  info_add(&len, "; openmp %d, %d procs; protobuf-c %s", _OPENMP, omp_get_num_procs(), protobuf_c_version());
  char warning[160];
  if (nbop_build_info_blas_warning(core, cpu_has_avx2(), warning, sizeof warning))
    info_add(&len, "; warning=\"%s\"", warning);
}

const char *nb_build_info(void) {
  pthread_once(&info_once, build_info_init);
  return info;
}
