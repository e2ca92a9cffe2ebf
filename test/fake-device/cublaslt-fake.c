/*
 * A stand-in for libcublasLt beside cudnn-fake.c's driver, so the naive backend's matmul path (handle,
 * descriptors, layouts, heuristic, matmuls) runs on a machine without a GPU. A matmul does no arithmetic:
 * it launches one kernel through the stand-in driver (cuLaunchKernel of ATTNLAB_LIBCUDA), as cuBLASLt's
 * matmuls do, so a stream capture records it into the graph and a plain call counts as a launch there.
 * fake_call_counts() says the calls of this library as JSON, like the driver's.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_COUNTED 32
static const char *counted_names[MAX_COUNTED];
static long counted_calls[MAX_COUNTED];
static int counted;
static void count_call(const char *name) {
  for (int i = 0; i < counted; i++)
    if (counted_names[i] == name) { counted_calls[i]++; return; }
  if (counted < MAX_COUNTED) { counted_names[counted] = name; counted_calls[counted++] = 1; }
}
#define COUNT count_call(__func__)
const char *fake_call_counts(void) {
  static char text[2048];
  size_t len = snprintf(text, sizeof text, "{");
  for (int i = 0; i < counted && len < sizeof text; i++)
    len += snprintf(text + len, sizeof text - len, "%s\"%s\":%ld", i ? "," : "", counted_names[i], counted_calls[i]);
  if (len < sizeof text) snprintf(text + len, sizeof text - len, "}");
  return text;
}

size_t cublasLtGetVersion(void) { return 130100; }
const char *cublasLtGetStatusName(int s) { return s == 0 ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_INVALID_VALUE"; }
const char *cublasLtGetStatusString(int s) { return s == 0 ? "success" : "an invalid value"; }

static void *made(void) { return calloc(1, 64); }
int cublasLtCreate(void **h) { COUNT; *h = made(); return 0; }
int cublasLtMatmulDescCreate(void **d, int compute, int scale) { COUNT; (void)compute; (void)scale; *d = made(); return 0; }
int cublasLtMatmulDescSetAttribute(void *d, int a, const void *v, size_t n) { COUNT; (void)a; (void)v; return d && n ? 0 : 7; }
int cublasLtMatrixLayoutCreate(void **l, int type, uint64_t rows, uint64_t cols, int64_t ld) { COUNT;
  (void)type;
  if (ld < (int64_t)rows || cols == 0) return 7; /* column-major: ld at least the rows */
  *l = made();
  return 0;
}
int cublasLtMatrixLayoutSetAttribute(void *l, int a, const void *v, size_t n) { COUNT; (void)a; (void)v; return l && n ? 0 : 7; }
int cublasLtMatmulPreferenceCreate(void **p) { COUNT; *p = made(); return 0; }
int cublasLtMatmulPreferenceSetAttribute(void *p, int a, const void *v, size_t n) { COUNT; (void)a; (void)v; return p && n ? 0 : 7; }
int cublasLtMatmulPreferenceDestroy(void *p) { COUNT; free(p); return 0; }
/* One algorithm, no workspace: cublasLtMatmulHeuristicResult_t is the 64-byte algo, then the workspace size. */
int cublasLtMatmulAlgoGetHeuristic(void *h, void *op, void *a, void *b, void *c, void *d, void *pref, int requested,
                                   unsigned char *results, int *returned) { COUNT;
  (void)h; (void)op; (void)a; (void)b; (void)c; (void)d; (void)pref;
  memset(results, 0, 96);
  *returned = requested > 0 ? 1 : 0;
  return 0;
}

typedef int (*LaunchFn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
static LaunchFn driver_launch(void) {
  static LaunchFn launch;
  if (!launch) {
    const char *path = getenv("ATTNLAB_LIBCUDA");
    void *driver = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    launch = driver ? (LaunchFn)dlsym(driver, "cuLaunchKernel") : NULL;
  }
  return launch;
}
static char matmul_kernel[] = "cublasLt_matmul";
int cublasLtMatmul(void *h, void *op, const void *alpha, uint64_t A, void *ad, uint64_t B, void *bd, const void *beta,
                   uint64_t C, void *cd, uint64_t D, void *dd, const void *algo, uint64_t ws, size_t wsBytes, void *stream) { COUNT;
  (void)op; (void)alpha; (void)ad; (void)bd; (void)beta; (void)C; (void)cd; (void)dd; (void)algo; (void)ws; (void)wsBytes;
  if (!h || !A || !B || !D) return 7;
  LaunchFn launch = driver_launch();
  if (!launch) return 14; /* CUBLAS_STATUS_INTERNAL_ERROR: the stand-in driver is not loaded */
  return launch(matmul_kernel, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL) ? 13 : 0;
}
