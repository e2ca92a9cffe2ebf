// The wgmma wrappers live beside their generator in hopper/gen/; this name keeps the includes of
// the files that use it working.
#pragma once
#include "hopper/gen/wgmma.cuh"
