// A stand-in libnvidia-ml.so.1 for test/fake-device/gpu-power.test.ts: the calls attnlab binds (ffi/nvml.ts), with
// nvml.h's signatures. One device, found by the UUID of the stand-in driver's device 0 (cudnn-fake.c); its
// counters advance on every violation read: 10 ms of reference clock, 2.5 ms of power violation (25%), 7 J
// (700 W over those 10 ms). fake_set_violation_unsupported makes the counters answer NOT_SUPPORTED.
#include <string.h>

typedef struct {
  unsigned long long referenceTime;  // µs
  unsigned long long violationTime;  // ns
} nvmlViolationTime_t;

static int initialised, unsupported;
static unsigned long long reference_us = 1000000, violation_ns = 5000, energy_mj = 123456;
static const char *device_uuid = "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f";
#define DEVICE ((void *)0xd00d)

int nvmlInit_v2(void) { initialised = 1; return 0; }
const char *nvmlErrorString(int result) {
  return result == 3 ? "Not Supported" : result == 6 ? "Not Found" : result == 1 ? "Uninitialized" : "Unknown Error";
}
int nvmlDeviceGetHandleByUUID(const char *uuid, void **device) {
  if (!initialised) return 1;
  if (strcmp(uuid, device_uuid) != 0) return 6;
  *device = DEVICE;
  return 0;
}
int nvmlDeviceGetEnforcedPowerLimit(void *device, unsigned int *milliwatts) {
  if (device != DEVICE) return 2;
  *milliwatts = 700000;
  return 0;
}
int nvmlDeviceGetTotalEnergyConsumption(void *device, unsigned long long *millijoules) {
  if (device != DEVICE) return 2;
  *millijoules = energy_mj;
  return 0;
}
int nvmlDeviceGetViolationStatus(void *device, int policy, nvmlViolationTime_t *time) {
  if (device != DEVICE || policy != 0) return 2;
  if (unsupported) return 3;
  reference_us += 10000;
  violation_ns += 2500000;
  energy_mj += 7000;
  time->referenceTime = reference_us;
  time->violationTime = violation_ns;
  return 0;
}
void fake_set_violation_unsupported(int on) { unsupported = on; }
