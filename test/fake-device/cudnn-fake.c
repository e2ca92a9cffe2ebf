/*
 * A stand-in for libcuda and libcudnn, so the cuDNN backend's whole FFI flow (context, memory,
 * descriptors, heuristics, plans, plan JSON, variant packs, execute) runs on a machine without a
 * GPU. Compiled by test/fake-device/cudnn-ffi.test.ts. "Device" memory is host memory.
 *
 * It checks what cuDNN checks and what a JavaScript caller can get wrong: each attribute's value
 * type, finalize order, required attributes, equal ranks of pointwise operands (cuDNN's
 * "xDesc.getNbDims() != bDesc.getNbDims()"), matmul shapes, and that a variant pack names every
 * non-virtual tensor of the graph exactly once and nothing virtual. Execute records each uid's
 * pointer (and a by-value scalar's value) for the test to read through fake_last_execute().
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Calls per function of this library (driver or cuDNN: each is its own copy of this file), for a test
   to pin what one attention call costs: fake_call_counts() says them as JSON, {"cuLaunchKernel":3,…}.
   Functions are told apart by their __func__ string's address, one per function. */
#define MAX_COUNTED 96
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
  static char text[8192];
  size_t len = snprintf(text, sizeof text, "{");
  for (int i = 0; i < counted && len < sizeof text; i++)
    len += snprintf(text + len, sizeof text - len, "%s\"%s\":%ld", i ? "," : "", counted_names[i], counted_calls[i]);
  if (len < sizeof text) snprintf(text + len, sizeof text - len, "}");
  return text;
}

/* ---------------- CUDA driver ---------------- */
static const char *ok_text = "no error";
int cuInit(unsigned f) { COUNT; (void)f; return 0; }
int cuDriverGetVersion(int *v) { COUNT; *v = 13000; return 0; }
/* test/fake-device/devices.test.ts builds it with -DFAKE_DEVICE_COUNT=2: device d's context is 0x1234 + 0x100·d. */
#ifndef FAKE_DEVICE_COUNT
#define FAKE_DEVICE_COUNT 1
#endif
int cuDeviceGetCount(int *c) { COUNT; *c = FAKE_DEVICE_COUNT; return 0; }
int cuDeviceGet(int *d, int o) { COUNT; *d = o; return 0; }
int cuDeviceGetName(char *n, int len, int d) { COUNT; (void)d; snprintf(n, len, "Fake H200"); return 0; }
int cuDeviceGetAttribute(int *v, int a, int d) { COUNT;
  (void)d;
  /* sm_90, 132 SMs, 50 MB of L2, the H200's 232,448 B of opt-in shared memory a block (97); 1024 for the rest */
  *v = a == 75 ? 9 : a == 76 ? 0 : a == 16 ? 132 : a == 38 ? 50 << 20 : a == 97 ? 232448 : 1024;
  return 0;
}
int cuDeviceTotalMem_v2(size_t *b, int d) { COUNT; (void)d; *b = (size_t)1 << 34; return 0; }
int cuDeviceGetUuid_v2(unsigned char *u, int d) { COUNT; for (int i = 0; i < 16; ++i) u[i] = (unsigned char)(i + d); return 0; }
int cuDevicePrimaryCtxRetain(void **c, int d) { COUNT; *c = (void *)(uintptr_t)(0x1234 + 0x100 * d); return 0; }
static void *current_context;
int cuCtxSetCurrent(void *c) { COUNT; current_context = c; return 0; }
void *fake_current_context(void) { return current_context; }
/* Host waits on the device (context, stream, event syncs), for a test to prove a call makes none. */
static int sync_count = 0;
int fake_sync_count(void) { return sync_count; }
int cuCtxSynchronize(void) { COUNT; sync_count++; return 0; }
/* Streams 0x5678 (attnlab's, the one cuDNN's handle is bound to), 0x5688, … in order of creation. */
static uintptr_t next_stream = 0x5678;
int cuStreamCreate(void **s, unsigned f) { COUNT; (void)f; *s = (void *)next_stream; next_stream += 0x10; return 0; }
int cuStreamSynchronize(void *s) { COUNT; (void)s; sync_count++; return 0; }
int cuStreamWaitEvent(void *s, void *e, unsigned f) { COUNT; (void)s; (void)e; (void)f; return 0; }
int cuMemAlloc_v2(uint64_t *p, size_t b) { COUNT; *p = (uint64_t)(uintptr_t)calloc(1, b ? b : 1); return 0; }
int cuMemFree_v2(uint64_t p) { COUNT; free((void *)(uintptr_t)p); return 0; }
int cuMemGetInfo_v2(size_t *f, size_t *t) { COUNT; *f = (size_t)1 << 33; *t = (size_t)1 << 34; return 0; }
/* Page-locked host memory: a test asks whether the last upload came from it (runtime/staging.ts). */
#define MAX_PINNED 16
static const char *pinned_at[MAX_PINNED];
static size_t pinned_bytes[MAX_PINNED];
static int pinned_count, last_upload_pinned;
int cuMemHostAlloc(void **p, size_t b, unsigned f) { COUNT; (void)f;
  /* FAKE_CUDA_HOST_ALLOC=refuse: no page-locked memory (a locked-memory limit), CUDA_ERROR_OUT_OF_MEMORY. */
  const char *how = getenv("FAKE_CUDA_HOST_ALLOC");
  if (pinned_count == MAX_PINNED || (how && strcmp(how, "refuse") == 0)) return 2;
  *p = calloc(1, b);
  pinned_at[pinned_count] = *p; pinned_bytes[pinned_count++] = b;
  return 0;
}
int fake_last_upload_pinned(void) { return last_upload_pinned; }
int cuMemcpyHtoDAsync_v2(uint64_t d, const void *s, size_t n, void *st) { COUNT; (void)st;
  last_upload_pinned = 0;
  for (int i = 0; i < pinned_count; i++)
    if ((const char *)s >= pinned_at[i] && (const char *)s + n <= pinned_at[i] + pinned_bytes[i]) last_upload_pinned = 1;
  memcpy((void *)(uintptr_t)d, s, n);
  return 0;
}
int cuMemcpyDtoHAsync_v2(void *d, uint64_t s, size_t n, void *st) { COUNT; (void)st; memcpy(d, (void *)(uintptr_t)s, n); return 0; }
int cuMemcpyDtoDAsync_v2(uint64_t d, uint64_t s, size_t n, void *st) { COUNT; (void)st; memmove((void *)(uintptr_t)d, (void *)(uintptr_t)s, n); return 0; }
int cuMemsetD8Async(uint64_t d, unsigned char v, size_t n, void *s) { COUNT; (void)s; memset((void *)(uintptr_t)d, v, n); return 0; }
int cuMemsetD32Async(uint64_t d, unsigned v, size_t n, void *s) { COUNT;
  (void)s;
  for (size_t i = 0; i < n; i++) ((unsigned *)(uintptr_t)d)[i] = v;
  return 0;
}
int cuEventCreate(void **e, unsigned f) { COUNT; (void)f; *e = malloc(8); return 0; }
int cuEventDestroy_v2(void *e) { COUNT; free(e); return 0; }
int cuEventRecord(void *e, void *s) { COUNT; (void)e; (void)s; return 0; }
int cuEventSynchronize(void *e) { COUNT; (void)e; sync_count++; return 0; }
int cuEventElapsedTime(float *ms, void *a, void *b) { COUNT; (void)a; (void)b; *ms = 0.001f; return 0; }
int cuModuleLoadData(void **m, const void *i) { COUNT; (void)i; *m = (void *)1; return 0; }
int cuModuleUnload(void *m) { COUNT; (void)m; return 0; }
/* A function handle is a copy of its name, so that a launch can say which kernel it ran. */
int cuModuleGetFunction(void **f, void *m, const char *n) { COUNT; (void)m; *f = strdup(n); return 0; }
int cuModuleGetGlobal_v2(uint64_t *p, size_t *b, void *m, const char *n) { COUNT; (void)m; (void)n; *p = 0; *b = 0; return 0; }
int cuFuncSetAttribute(void *f, int a, int v) { COUNT; (void)f; (void)a; (void)v; return 0; }
int cuFuncGetAttribute(int *v, int a, void *f) { COUNT; (void)a; (void)f; *v = 0; return 0; }
/* Kernel launches so far (both entry points), for a test to count a call's launches. */
static int launch_count = 0;
static const char *last_launch = "";
int fake_launch_count(void) { return launch_count; }
const char *fake_last_launch(void) { return last_launch; }
static int captured_launch(void *f);
int cuLaunchKernel(void *f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g, unsigned h, void *s, void **p, void **x) { COUNT;
  (void)a; (void)b; (void)c; (void)d; (void)e; (void)g; (void)h; (void)s; (void)p; (void)x;
  if (captured_launch(f)) return 0;
  launch_count++;
  last_launch = (const char *)f;
  return 0;
}
int cuLaunchKernelEx(const void *config, void *f, void **p, void **x) { COUNT;
  (void)config; (void)p; (void)x;
  if (captured_launch(f)) return 0;
  launch_count++;
  last_launch = (const char *)f;
  return 0;
}
/* CUDA graphs, as far as cuDNN's graph route uses them: cudnnBackendPopulateCudaGraph (the cuDNN copy
   of this file) writes into a graph what its execute would have recorded and where that record goes;
   an executable graph keeps a copy of it (instantiate, cuGraphExecUpdate), and cuGraphLaunch writes the
   copy to fake_last_execute(), so a test sees exactly what the graph would run: the pointers and the
   by-value scalars as they were when the graph was populated or updated. */
#define FAKE_GRAPH_LOG 65536
typedef struct { int populated, destroyed, kernels; const char *names[64]; char *target; char log[FAKE_GRAPH_LOG]; } FakeGraph;
int cuGraphCreate(FakeGraph **g, unsigned f) { COUNT; (void)f; *g = calloc(1, sizeof(FakeGraph)); return 0; }
/* Stream capture: launches while capturing go into the graph (as their kernel names) instead of running;
   a launch of the graph counts them as launches. */
static FakeGraph *capturing;
int cuStreamBeginCapture_v2(void *s, int mode) { COUNT; (void)s; (void)mode;
  if (capturing) return 900; /* CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: one capture at a time here */
  capturing = calloc(1, sizeof(FakeGraph));
  return 0;
}
int cuStreamEndCapture(void *s, FakeGraph **g) { COUNT; (void)s;
  if (!capturing) return 901;
  /* FAKE_CUDA_CAPTURE=invalidate: the capture was invalidated (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED), no graph. */
  const char *how = getenv("FAKE_CUDA_CAPTURE");
  if (how && strcmp(how, "invalidate") == 0) { free(capturing); capturing = NULL; *g = NULL; return 901; }
  capturing->populated = 1;
  *g = capturing;
  capturing = NULL;
  return 0;
}
static int captured_launch(void *f) {
  if (!capturing) return 0;
  if (capturing->kernels < 64) capturing->names[capturing->kernels++] = (const char *)f;
  return 1;
}
int cuGraphDestroy(FakeGraph *g) { COUNT; if (g->destroyed) return 1; g->destroyed = 1; return 0; }
int cuGraphInstantiateWithFlags(FakeGraph **e, FakeGraph *g, unsigned long long f) { COUNT; (void)f;
  if (g->destroyed || !g->populated) return 1; /* an empty graph here means cuDNN was never asked */
  *e = malloc(sizeof(FakeGraph));
  memcpy(*e, g, sizeof(FakeGraph));
  return 0;
}
int cuGraphExecUpdate_v2(FakeGraph *e, FakeGraph *g, void *info) { COUNT; (void)info;
  if (e->destroyed || g->destroyed || !g->populated) return 1;
  memcpy(e, g, sizeof(FakeGraph));
  return 0;
}
int cuGraphExecDestroy(FakeGraph *e) { COUNT; if (e->destroyed) return 1; e->destroyed = 1; return 0; }
static int graph_launches = 0;
int fake_graph_launch_count(void) { return graph_launches; }
int cuGraphLaunch(FakeGraph *e, void *s) { COUNT; (void)s;
  if (e->destroyed || (!e->target && !e->kernels)) return 1;
  if (e->target) snprintf(e->target, FAKE_GRAPH_LOG, "%s", e->log);
  launch_count += e->kernels;
  if (e->kernels) last_launch = e->names[e->kernels - 1];
  graph_launches++;
  return 0;
}
/* A tensor map whose 128 bytes carry the address and the rank, so a test can tell two maps apart. */
int cuTensorMapEncodeTiled(void *m, int dt, unsigned r, uint64_t a, void *d, void *s, void *b, void *e, int i, int sw,
                           int l2, int oob) { COUNT;
  (void)dt; (void)d; (void)s; (void)b; (void)e; (void)i; (void)sw; (void)l2; (void)oob;
  uint64_t *words = (uint64_t *)m;
  for (int w = 0; w < 16; w++) words[w] = 0;
  words[0] = a, words[1] = r;
  return 0;
}
int cuGetErrorName(int s, const char **n) { COUNT; (void)s; *n = "CUDA_ERROR_FAKE"; return 0; }
int cuGetErrorString(int s, const char **t) { COUNT; (void)s; *t = ok_text; return 0; }

/* ---------------- cuDNN backend API ---------------- */
enum { T_HANDLE = 0, T_DATA_TYPE = 1, T_BOOLEAN = 2, T_INT64 = 3, T_FLOAT = 4, T_VOID_PTR = 6, T_HEUR_MODE = 8,
       T_POINTWISE_MODE = 14, T_DESC = 15, T_REDUCTION = 18, T_CHAR = 24 };
enum { D_POINTWISE = 0, D_ENGINE = 2, D_ENGINECFG = 3, D_ENGINEHEUR = 4, D_PLAN = 5, D_OP_POINTWISE = 13, D_GRAPH = 15,
       D_PACK = 16, D_TENSOR = 17, D_MATMUL = 18, D_OP_MATMUL = 19, D_REDUCTION = 21, D_OP_REDUCTION = 22,
       D_PAGED_LOAD = 35, D_SDPA = 41 };

#define MAX_ATTRS 24
typedef struct { int name, type; int64_t count; unsigned char *bytes; } Attr;
typedef struct Desc { int type, finalized, destroyed; Attr attrs[MAX_ATTRS]; int nattrs; struct Desc *graph; char *json; } Desc;

static char last_error[512];
static char execute_log[65536];
static int fail(int status, const char *msg) { snprintf(last_error, sizeof last_error, "%s", msg); return status; }

static int expected_type(int name) {
  switch (name) {
    case 0: return T_POINTWISE_MODE;           /* POINTWISE_MODE */
    case 1: case 901: case 1500: case 1601: return T_DATA_TYPE;
    case 9: case 402: case 900: case 902: case 903: case 906: case 1000: case 1301: return T_INT64;
    case 200: return T_HEUR_MODE;
    case 400: case 800: return T_HANDLE;
    case 405: return T_CHAR;
    case 754: case 755: return T_FLOAT;
    case 907: case 908: return T_BOOLEAN;
    case 1001: case 1003: return T_VOID_PTR;
    case 1600: return T_REDUCTION;
    default: return T_DESC;
  }
}
static int64_t elem_size(int type) {
  switch (type) {
    case T_BOOLEAN: case T_CHAR: return 1;
    case T_DATA_TYPE: case T_FLOAT: case T_HEUR_MODE: case T_POINTWISE_MODE: case T_REDUCTION: return 4;
    default: return 8;
  }
}
static Attr *find(Desc *d, int name) {
  for (int i = 0; i < d->nattrs; i++) if (d->attrs[i].name == name) return &d->attrs[i];
  return NULL;
}
static Desc *ref(Desc *d, int name) { Attr *a = find(d, name); return a ? *(Desc **)a->bytes : NULL; }
static int64_t *ints(Desc *d, int name, int64_t *n) { Attr *a = find(d, name); if (n) *n = a ? a->count : 0; return a ? (int64_t *)a->bytes : NULL; }

size_t cudnnGetVersion(void) { COUNT; return 91900; }
const char *cudnnGetErrorString(int s) { return s == 0 ? "CUDNN_STATUS_SUCCESS" : s < 3000 ? "CUDNN_STATUS_BAD_PARAM" : "CUDNN_STATUS_NOT_SUPPORTED"; }
void cudnnGetLastErrorString(char *m, size_t n) { COUNT; snprintf(m, n, "%s", last_error); }
int cudnnCreate(void **h) { COUNT; *h = (void *)0xC0DE; return 0; }
int cudnnSetStream(void *h, void *s) { COUNT; return h == (void *)0xC0DE && s == (void *)0x5678 ? 0 : fail(2000, "cudnnSetStream: wrong handle or stream"); }

int cudnnBackendCreateDescriptor(int type, Desc **out) { COUNT; *out = calloc(1, sizeof(Desc)); (*out)->type = type; return 0; }
int cudnnBackendDestroyDescriptor(Desc *d) { COUNT;
  /* Marked, not freed: a later use is reported, and a plan loaded from JSON (which names its graph
     here) can still be executed after the graph's descriptors were destroyed, as a real one can. */
  if (d->destroyed) return fail(2000, "descriptor destroyed twice");
  d->destroyed = 1;
  return 0;
}
int cudnnBackendSetAttribute(Desc *d, int name, int type, int64_t count, const void *values) { COUNT;
  char msg[160];
  if (d->destroyed) return fail(2000, "set on a destroyed descriptor");
  if (d->finalized) return fail(2000, "set on a finalized descriptor");
  if (type != expected_type(name)) { snprintf(msg, sizeof msg, "attribute %d expects type %d, got %d", name, expected_type(name), type); return fail(2000, msg); }
  if (count <= 0 || !values || d->nattrs == MAX_ATTRS) return fail(2000, "empty attribute value");
  Attr *a = find(d, name);
  if (!a) a = &d->attrs[d->nattrs++];
  else free(a->bytes);
  a->name = name; a->type = type; a->count = count;
  a->bytes = calloc(1, count * elem_size(type) + 1); /* + 1: CHAR values arrive without a NUL */
  memcpy(a->bytes, values, count * elem_size(type));
  if (type == T_DESC)
    for (int64_t i = 0; i < count; i++) {
      Desc *r = ((Desc **)values)[i];
      if (!r || r->destroyed || !r->finalized) { snprintf(msg, sizeof msg, "attribute %d refers to an unfinalized descriptor", name); return fail(2000, msg); }
    }
  return 0;
}

static int rank(Desc *t) { int64_t n; ints(t, 902, &n); return (int)n; }
static int check_required(Desc *d, const int *names, int n) {
  char msg[96];
  for (int i = 0; i < n; i++) if (!find(d, names[i])) { snprintf(msg, sizeof msg, "descriptor type %d misses attribute %d", d->type, names[i]); return fail(2000, msg); }
  return 0;
}

int cudnnBackendFinalize(Desc *d) { COUNT;
  int s = 0;
  if (d->destroyed || d->finalized) return fail(2000, "finalize twice or after destroy");
  if (d->type == D_TENSOR) {
    static const int req[] = {901, 902, 903, 906, 900};
    int64_t nd, ns;
    ints(d, 902, &nd); ints(d, 903, &ns);
    if ((s = check_required(d, req, 5)) || nd != ns) return s ? s : fail(2000, "dims and strides differ in length");
  } else if (d->type == D_POINTWISE) { static const int req[] = {0, 1}; s = check_required(d, req, 2); }
  else if (d->type == D_OP_POINTWISE) {
    static const int req[] = {750, 751, 753, 754, 755};
    if ((s = check_required(d, req, 5))) return s;
    Desc *x = ref(d, 751), *b = ref(d, 752), *t = ref(d, 758), *y = ref(d, 753);
    if ((b && rank(b) != rank(x)) || (t && rank(t) != rank(x)) || rank(y) != rank(x)) return fail(2000, "xDesc.getNbDims() != bDesc.getNbDims()");
  } else if (d->type == D_OP_MATMUL) {
    static const int req[] = {1520, 1521, 1522, 1523};
    if ((s = check_required(d, req, 4))) return s;
    int64_t *a = ints(ref(d, 1520), 902, NULL), *b = ints(ref(d, 1521), 902, NULL), *c = ints(ref(d, 1522), 902, NULL);
    if (a[3] != b[2] || a[2] != c[2] || b[3] != c[3]) return fail(2000, "matmul: A[..,M,K] B[..,K,N] C[..,M,N] do not fit");
  } else if (d->type == D_OP_REDUCTION) { static const int req[] = {1610, 1611, 1612}; s = check_required(d, req, 3); }
  else if (d->type == D_PAGED_LOAD) { static const int req[] = {1950, 1951, 1952, 1953}; s = check_required(d, req, 4); }
  else if (d->type == D_SDPA) { static const int req[] = {2800, 2801, 2802, 2803, 2805}; s = check_required(d, req, 5); }
  else if (d->type == D_GRAPH) { static const int req[] = {800, 801}; s = check_required(d, req, 2); }
  else if (d->type == D_ENGINEHEUR) { static const int req[] = {200, 201}; s = check_required(d, req, 2); }
  else if (d->type == D_PLAN) {
    static const int req[] = {400};
    if ((s = check_required(d, req, 1))) return s;
    Attr *json = find(d, 405);
    if (json) {
      Desc *g = NULL;
      if (sscanf((const char *)json->bytes, "{\"fake_graph\":%p", (void **)&g) != 1) return fail(2000, "plan JSON not understood");
      d->graph = g;
    } else {
      Desc *cfg = ref(d, 401);
      if (!cfg || !cfg->graph) return fail(2000, "plan without engine config");
      d->graph = cfg->graph;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "{\"fake_graph\":%p,\"kernel\":\"cudnn_generated_fake_sdpa_kernel0_0\"}", (void *)d->graph);
    d->json = strdup(buf);
  } else if (d->type == D_PACK) {
    static const int req[] = {1000, 1001, 1003};
    s = check_required(d, req, 3);
  }
  if (!s) d->finalized = 1;
  return s;
}

int cudnnBackendGetAttribute(Desc *d, int name, int type, int64_t requested, int64_t *count, void *values) { COUNT;
  if (type != expected_type(name) && !(name == 202 || name == 300)) return fail(2000, "get with a wrong type");
  if (!d->finalized && d->type != D_ENGINECFG) return fail(2000, "get before finalize");
  if (name == 202) { /* ENGINEHEUR_RESULTS: two configs, each remembering the graph */
    *count = 2;
    for (int64_t i = 0; i < requested && i < 2; i++) { Desc *c = ((Desc **)values)[i]; c->graph = ref(d, 201); c->finalized = 1; }
    if (requested > 0 && requested < 2) *count = requested;
    return 0;
  }
  if (name == 300) { Desc *e = ((Desc **)values)[0]; e->finalized = 1; e->nattrs = 0; *count = 1; return 0; }
  if (name == 1301) { *count = 1; *(int64_t *)values = 7; return 0; }
  if (name == 402) { *count = 1; *(int64_t *)values = 256; return 0; }
  if (name == 405) {
    int64_t n = (int64_t)strlen(d->json);
    *count = n;
    if (requested > 0) memcpy(values, d->json, requested < n ? requested : n);
    return 0;
  }
  return fail(3000, "attribute not readable in the fake");
}

static int add_tensor(Desc *t, Desc **out, int n, int max) {
  int seen = 0;
  for (int j = 0; j < n; j++) seen |= out[j] == t || *ints(out[j], 906, NULL) == *ints(t, 906, NULL);
  if (!seen && n < max) out[n++] = t;
  return n;
}

/* Every non-virtual tensor reachable from the graph's ops, recorded once, with the ragged-offset
   tensors (attribute 913) of packed tensors, which cuDNN reads through the tensor, not an op. */
static int collect(Desc *graph, Desc **out, int max) {
  int n = 0;
  Attr *ops = find(graph, 801);
  for (int64_t i = 0; i < ops->count; i++) {
    Desc *op = ((Desc **)ops->bytes)[i];
    for (int a = 0; a < op->nattrs; a++) {
      if (op->attrs[a].type != T_DESC) continue;
      Desc *t = *(Desc **)op->attrs[a].bytes;
      if (t->type != D_TENSOR || find(t, 907)) continue;
      n = add_tensor(t, out, n, max);
      Desc *offsets = ref(t, 913);
      if (offsets) n = add_tensor(offsets, out, n, max);
    }
  }
  return n;
}

/* What executing `plan` with `pack` reads, as JSON into `log` (uid → pointer, by-value scalar's value),
   after the checks cuDNN makes. */
static int record_execute(void *handle, Desc *plan, Desc *pack, char *log, size_t cap) {
  Desc *tensors[64];
  int64_t nu, np;
  if (handle != (void *)0xC0DE || plan->type != D_PLAN || plan->destroyed || !plan->finalized || !pack->finalized)
    return fail(2000, "bad execute arguments");
  int64_t *uids = ints(pack, 1000, &nu);
  uint64_t *ptrs = (uint64_t *)find(pack, 1001)->bytes;
  np = find(pack, 1001)->count;
  if (nu != np) return fail(2000, "variant pack: uid and pointer counts differ");
  if (*(uint64_t *)find(pack, 1003)->bytes == 0) return fail(2000, "variant pack: no workspace for a 256-byte plan");
  int n = collect(plan->graph, tensors, 64);
  if (n != nu) { snprintf(last_error, sizeof last_error, "variant pack has %lld uids, graph has %d non-virtual tensors", (long long)nu, n); return 2000; }
  size_t len = snprintf(log, cap, "{");
  for (int i = 0; i < n; i++) {
    int64_t uid = *ints(tensors[i], 906, NULL);
    int j = 0;
    while (j < nu && uids[j] != uid) j++;
    if (j == nu || ptrs[j] == 0) { snprintf(last_error, sizeof last_error, "variant pack lacks uid %lld", (long long)uid); return 2000; }
    int by_value = find(tensors[i], 908) != NULL;
    int dtype = *(int *)find(tensors[i], 901)->bytes;
    char value[48] = "null";
    if (by_value) {
      double v = dtype == 4 ? *(int32_t *)(uintptr_t)ptrs[j] : *(float *)(uintptr_t)ptrs[j];
      if (isinf(v)) snprintf(value, sizeof value, "\"%sinf\"", v < 0 ? "-" : "");
      else snprintf(value, sizeof value, "%.9g", v);
    }
    len += snprintf(log + len, cap - len, "%s\"%lld\":{\"ptr\":\"%llu\",\"byValue\":%d,\"value\":%s}",
                    i ? "," : "", (long long)uid, (unsigned long long)ptrs[j], by_value, value);
  }
  snprintf(log + len, cap - len, "}");
  last_error[0] = 0;
  return 0;
}

int cudnnBackendExecute(void *handle, Desc *plan, Desc *pack) { COUNT;
  return record_execute(handle, plan, pack, execute_log, sizeof execute_log);
}

/* FAKE_CUDNN_CUDA_GRAPH=refuse answers the graph route as an engine without native CUDA-graph support
   does (NOT_SUPPORTED). */
static int graph_refused(void) {
  const char *how = getenv("FAKE_CUDNN_CUDA_GRAPH");
  return how && strcmp(how, "refuse") == 0;
}
int cudnnBackendPopulateCudaGraph(void *handle, Desc *plan, Desc *pack, FakeGraph *g) { COUNT;
  if (graph_refused()) return fail(3000, "CUDNN_BACKEND_API_FAILED: engine does not support the native CUDA graph API");
  if (g->destroyed || g->populated) return fail(2000, "populate: graph destroyed or not empty");
  int s = record_execute(handle, plan, pack, g->log, sizeof g->log);
  if (s) return s;
  g->populated = 1;
  g->target = execute_log;
  return 0;
}
int cudnnBackendUpdateCudaGraph(void *handle, Desc *plan, Desc *pack, FakeGraph *g) { COUNT;
  if (graph_refused()) return fail(3000, "CUDNN_BACKEND_API_FAILED: engine does not support the native CUDA graph API");
  if (g->destroyed || !g->populated) return fail(2000, "update: graph destroyed or never populated");
  return record_execute(handle, plan, pack, g->log, sizeof g->log);
}

const char *fake_last_execute(void) { return execute_log; }
