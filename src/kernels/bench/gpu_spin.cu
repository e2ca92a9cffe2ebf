// One thread that keeps the stream busy for `nanoseconds` of the GPU's global timer, so that the host can
// enqueue a batch of calls behind it and their device time is measured without the host's launch time
// in it (src/bench/hidden-host.ts; nvbench's blocking kernel has the same purpose, with a host flag).
extern "C" __global__ void attnlab_gpu_spin(unsigned long long nanoseconds) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < nanoseconds);
}
