// A stand-in libnccl.so.2 for test/fake-device/nccl-ffi.test.ts: the calls attnlab binds, with nccl.h's
// signatures, recording what they received. ncclCommInitRank takes the 128-byte ncclUniqueId BY VALUE
// and accepts only the id ncclGetUniqueId handed out, every byte of it, so a binding that passed a
// pointer (8 bytes of address where NCCL reads 128 of id) or a shorter struct fails the test.
#include <stdio.h>
#include <string.h>

typedef struct {
  char internal[128];
} ncclUniqueId;
typedef void *ncclComm_t;
typedef void *cudaStream_t;

static char last[512];
static int depth;

static unsigned char id_byte(int i) { return (unsigned char)(i * 7 + 3); }

int ncclGetVersion(int *version) {
  *version = 22803;
  return 0;
}

int ncclGetUniqueId(ncclUniqueId *id) {
  for (int i = 0; i < 128; i++) id->internal[i] = (char)id_byte(i);
  return 0;
}

int ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  for (int i = 0; i < 128; i++)
    if ((unsigned char)id.internal[i] != id_byte(i)) return 4;  // ncclInvalidArgument
  *comm = (ncclComm_t)(0x1000 + (long)rank * 16 + nranks);
  return 0;
}

int ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
  for (int i = 0; i < ndev; i++) comms[i] = (ncclComm_t)(0x2000 + (long)devlist[i]);
  return 0;
}

int ncclCommDestroy(ncclComm_t comm) { return comm ? 0 : 4; }
int ncclGroupStart(void) {
  depth++;
  return 0;
}
int ncclGroupEnd(void) { return depth-- > 0 ? 0 : 5; }  // ncclInvalidUsage when unbalanced

int ncclSend(const void *buf, size_t count, int type, int peer, ncclComm_t comm, cudaStream_t stream) {
  snprintf(last, sizeof last, "{\"call\":\"send\",\"buf\":%lu,\"count\":%lu,\"type\":%d,\"peer\":%d,\"comm\":%lu,\"stream\":%lu,\"depth\":%d}",
           (unsigned long)buf, (unsigned long)count, type, peer, (unsigned long)comm, (unsigned long)stream, depth);
  return 0;
}

int ncclRecv(void *buf, size_t count, int type, int peer, ncclComm_t comm, cudaStream_t stream) {
  snprintf(last, sizeof last, "{\"call\":\"recv\",\"buf\":%lu,\"count\":%lu,\"type\":%d,\"peer\":%d,\"comm\":%lu,\"stream\":%lu,\"depth\":%d}",
           (unsigned long)buf, (unsigned long)count, type, peer, (unsigned long)comm, (unsigned long)stream, depth);
  return 0;
}

const char *ncclGetErrorString(int result) { return result == 4 ? "invalid argument (fake)" : "fake error"; }
const char *fake_last_call(void) { return last; }
