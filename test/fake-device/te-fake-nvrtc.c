/*
 * A stand-in for libnvrtc, so the FP8 step's launch path (compile cache → module → launches) runs on
 * a machine without CUDA, beside the fake libcuda/libcudnn of cudnn-fake.c. "Compiling" checks that
 * every kernel name expression occurs in the source or its headers and returns a 16-byte dummy CUBIN; the options
 * of the last compile are kept for the test to read through fake_nvrtc_options().
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { char *source; char *names[16]; int nnames; } Program;
static char options_log[4096];
static char log_text[256];

int nvrtcVersion(int *major, int *minor) { *major = 13; *minor = 0; return 0; }
const char *nvrtcGetErrorString(int s) { return s == 0 ? "NVRTC_SUCCESS" : "NVRTC_ERROR_COMPILATION"; }
/* The source with its headers after it: a kernel may be defined in a header (hopper_bwd.cu's entries). */
int nvrtcCreateProgram(Program **p, const char *src, const char *name, int nh, const char **h, const char **hn) {
  (void)name; (void)hn;
  size_t len = strlen(src) + 1;
  for (int i = 0; i < nh; i++) len += strlen(h[i]) + 1;
  *p = calloc(1, sizeof(Program));
  (*p)->source = malloc(len);
  strcpy((*p)->source, src);
  for (int i = 0; i < nh; i++) { strcat((*p)->source, "\n"); strcat((*p)->source, h[i]); }
  return 0;
}
int nvrtcDestroyProgram(Program **p) { free((*p)->source); free(*p); *p = NULL; return 0; }
int nvrtcAddNameExpression(Program *p, const char *e) { if (p->nnames < 16) p->names[p->nnames++] = strdup(e); return 0; }
int nvrtcCompileProgram(Program *p, int n, const char **options) {
  size_t len = 0;
  options_log[0] = 0;
  for (int i = 0; i < n; i++) len += snprintf(options_log + len, sizeof options_log - len, "%s%s", i ? " " : "", options[i]);
  for (int i = 0; i < p->nnames; i++)
    if (!strstr(p->source, p->names[i])) { snprintf(log_text, sizeof log_text, "error: no kernel %s", p->names[i]); return 6; }
  log_text[0] = 0;
  return 0;
}
int nvrtcGetLoweredName(Program *p, const char *e, const char **out) { (void)p; *out = e; return 0; }
int nvrtcGetProgramLogSize(Program *p, size_t *n) { (void)p; *n = strlen(log_text) + 1; return 0; }
int nvrtcGetProgramLog(Program *p, char *out) { (void)p; strcpy(out, log_text); return 0; }
int nvrtcGetCUBINSize(Program *p, size_t *n) { (void)p; *n = 16; return 0; }
int nvrtcGetCUBIN(Program *p, char *out) { (void)p; memset(out, 0, 16); return 0; }
const char *fake_nvrtc_options(void) { return options_log; }
