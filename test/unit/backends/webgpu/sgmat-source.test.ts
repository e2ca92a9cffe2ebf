/**
 * The sgmat kernel's WGSL on adapters without subgroup matrices (SwiftShader here): every layout
 * the device check tries, with each probe and each masking feature, is valid WGSL (its matrix
 * operations rewritten into plain WGSL by test/support/sgmat-emulation.ts, the rest as the GPU
 * compiles it: a generator mistake or a barrier in non-uniform control flow fails here, not on the
 * GPU machine); the emulation itself is checked on a small product; and the layouts' workgroup
 * bytes fit NVIDIA's 48 KiB at H=128. Skips, saying why, where no WebGPU device opens.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { webgpuContext } from '../../../../src/backends/webgpu/runtime.js';
import {
  checkSgmat,
  layoutName,
  runSgmatCheck,
  SGMAT_LAYOUTS,
  traceExpectation,
} from '../../../../src/backends/webgpu/sgmat-check.js';
import {
  sgmatKeys,
  sgmatSource,
  sgmatStorageBytes,
  sgmatTraceLayout,
  TRACE_SECTIONS,
} from '../../../../src/backends/webgpu/sgmat-source.js';
import { TRACE_BOUND } from '../../../../src/backends/webgpu/sgmat-trace.js';
import type { ForwardVariant, MatrixShape } from '../../../../src/backends/webgpu/variant.js';
import { variantKey } from '../../../../src/backends/webgpu/variant.js';
import { emulateSubgroupMatrix } from '../../../support/sgmat-emulation.js';
import { webgpuSkipReason } from '../../../support/webgpu.js';

const skip = await webgpuSkipReason();
const NVIDIA: MatrixShape = { M: 16, N: 16, K: 16, sg: 32 };

function variant(
  shape: MatrixShape,
  H: number,
  bc: number,
  flags: Partial<ForwardVariant> = {},
): ForwardVariant {
  return {
    kernel: 'sgmat',
    matrix: shape,
    dtype: 'float16',
    H,
    Hv: H,
    rows: (shape.subgroups ?? 4) * shape.M,
    bc,
    bias: null,
    mask: false,
    causal: false,
    window: false,
    lengths: false,
    lse: false,
    split: false,
    vec: 4,
    paged: false,
    packedQuery: false,
    packedKv: false,
    lanes: 1,
    ...flags,
  };
}

describe('the sgmat layouts on NVIDIA limits', () => {
  it('with alignedTiles, declare every workgroup variable in multiples of 16 bytes, the tiles last', () => {
    for (const layout of SGMAT_LAYOUTS.filter((l) => l.alignedTiles)) {
      for (const H of [64, 128]) {
        const shape = { ...NVIDIA, ...layout };
        const bc = sgmatKeys(H, H, shape, 49152) as number;
        const code = sgmatSource(variant(shape, H, bc));
        const decls = [
          ...code.matchAll(/^var<workgroup> (\w+): (?:array<(atomic<)?(f16|f32|i32|u32)>?, (\w+)>|.*);/gm),
        ];
        const bytes = { f16: 2, f32: 4, i32: 4, u32: 4 } as const;
        const WG = (shape.subgroups ?? 4) * shape.sg;
        for (const [line, name, , type, count] of decls) {
          assert.ok(type && count, `${name} is not an array: ${line}`);
          const length = count === 'WG' ? WG : Number(count);
          assert.equal((length * bytes[type as keyof typeof bytes]) % 16, 0, line);
        }
        const names = decls.map((d) => d[1]);
        assert.ok(names.indexOf('kv_tile') > names.indexOf('wg_u32'), names.join(' '));
        const uncommented = code.replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/.*$/gm, '');
        assert.ok(
          !/\b(block_lo|range_lo|tile_flags|fence_zero)\b/.test(uncommented),
          'a one-word variable is left',
        );
        assert.ok(sgmatStorageBytes(H, H, bc, shape) <= 49152);
      }
    }
  });

  it('fit 48 KiB at H=128 and name themselves in the variant key', () => {
    const keys = new Set<string>();
    for (const layout of SGMAT_LAYOUTS) {
      const shape = { ...NVIDIA, ...layout };
      const bc = sgmatKeys(128, 128, shape, 49152);
      assert.ok(bc !== null, JSON.stringify(layout));
      assert.ok(sgmatStorageBytes(128, 128, bc, shape) <= 49152, JSON.stringify(layout));
      keys.add(variantKey(variant(shape, 128, bc)));
    }
    assert.equal(keys.size, SGMAT_LAYOUTS.length);
  });
});

describe('the sgmat kernel WGSL, matrix operations emulated', { skip: skip ?? false }, () => {
  const compile = async (code: string): Promise<string[]> => {
    const { device } = webgpuContext();
    const module = device.createShaderModule({ code });
    const info = await module.getCompilationInfo();
    return info.messages
      .filter((m) => m.type === 'error')
      .map((m) => `${m.lineNum}:${m.linePos} ${m.message}`);
  };

  it('multiplies as Dawn defines it (a 16×16×16 product, row- and column-major loads)', async () => {
    const { device } = webgpuContext();
    const code = emulateSubgroupMatrix(
      `enable chromium_experimental_subgroup_matrix;
@group(0) @binding(0) var<storage, read_write> C: array<f32>;
var<workgroup> wa: array<f32, 512>;
@compute @workgroup_size(1)
fn main() {
  for (var e = 0u; e < 512u; e++) { wa[e] = f32(e % 7u) - 3.0; }
  var c = subgroup_matrix_result<f32, 16, 16>();
  c = subgroupMatrixMultiplyAccumulate(subgroupMatrixLoad<subgroup_matrix_left<f32, 16, 16>>(&wa, 0u, false, 16u),
    subgroupMatrixLoad<subgroup_matrix_right<f32, 16, 16>>(&wa, 256u, true, 16u), c);
  subgroupMatrixStore(&C, 0u, c, false, 16u);
}`,
    );
    const out = device.createBuffer({ size: 1024, usage: 128 | 4 });
    const read = device.createBuffer({ size: 1024, usage: 1 | 8 });
    const pipeline = device.createComputePipeline({
      layout: 'auto',
      compute: { module: device.createShaderModule({ code }), entryPoint: 'main' },
    });
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(
      0,
      device.createBindGroup({
        layout: pipeline.getBindGroupLayout(0),
        entries: [{ binding: 0, resource: { buffer: out } }],
      }),
    );
    pass.dispatchWorkgroups(1);
    pass.end();
    encoder.copyBufferToBuffer(out, 0, read, 0, 1024);
    device.queue.submit([encoder.finish()]);
    await read.mapAsync(1);
    const got = new Float32Array(read.getMappedRange().slice(0));
    read.unmap();
    out.destroy();
    read.destroy();
    const wa = Array.from({ length: 512 }, (_, e) => (e % 7) - 3);
    for (let i = 0; i < 16; i++)
      for (let j = 0; j < 16; j++) {
        let x = 0;
        // A row-major (i, k) at i·16 + k; B column-major (k, j) at 256 + j·16 + k.
        for (let k = 0; k < 16; k++) x += wa[i * 16 + k] * wa[256 + j * 16 + k];
        assert.equal(got[i * 16 + j], x, `C[${i}][${j}]`);
      }
  });

  const features: [string, Partial<ForwardVariant>][] = [
    ['plain', {}],
    ['causal, lse', { causal: true, lse: true }],
    ['window, lengths, bias, mask', { window: true, lengths: true, bias: 'float16', mask: true }],
    ['paged', { paged: true, lengths: true }],
    ['packed', { packedQuery: true, packedKv: true }],
  ];
  for (const layout of SGMAT_LAYOUTS) {
    for (const H of [64, 128]) {
      it(`compiles, ${JSON.stringify(layout)}, H=${H}, every feature, traced and not`, async () => {
        const shape = { ...NVIDIA, ...layout };
        for (const bc of [64, 32]) {
          if (sgmatStorageBytes(H, H, bc, shape) > 49152) continue;
          for (const [name, flags] of features) {
            for (const trace of [false, true]) {
              const code = emulateSubgroupMatrix(sgmatSource(variant(shape, H, bc, flags), trace), {
                f32Only: true,
              });
              const errors = await compile(code);
              assert.deepEqual(errors, [], `${name}, bc=${bc}, trace ${trace}`);
            }
          }
        }
      });
    }
  }

  // The traced kernel run on the device check's problem with its matrix operations emulated: every
  // trace section holds what traceExpectation says (so on a GPU a section that differs is the
  // driver's doing, not the trace's), and the output matches float64. 8×8×8 matrices, 32-key tiles
  // and 2 subgroups of 16: the emulated 16×16 matrices (1 KiB of f32 an invocation each) crash
  // SwiftShader's compiler, and the tiles fit 32 KiB in f32 where the adapter has no shader-f16; the
  // q and K matrix sections need the P tile's rows to hold H and are empty at that shape.
  for (const layout of [
    SGMAT_LAYOUTS[0],
    ...SGMAT_LAYOUTS.filter((l) => (l.mulFirst && l.noShuffle) || l.alignedTiles),
  ]) {
    it(`traces the check problem as expected, ${layoutName(layout)}`, async () => {
      const { device, info } = webgpuContext();
      const f32Only = !info.features.includes('shader-f16');
      const shape = { M: 8, N: 8, K: 8, sg: 16, ...layout, keys: 32, subgroups: 2 };
      const ran = await runSgmatCheck(device, shape, 49152, true, (code) =>
        emulateSubgroupMatrix(code, { f32Only }),
      );
      assert.ok(typeof ran !== 'string', String(ran));
      const want = traceExpectation(ran.variant);
      const sections = sgmatTraceLayout(ran.variant);
      for (const name of TRACE_SECTIONS) {
        const { offset, length } = sections[name];
        assert.equal(want[name].length, length, name);
        for (let e = 0; e < length; e++) {
          // The subgroup lane and size columns follow the adapter's own subgroup size.
          if (name === 'ids' && (e % 8 === 2 || e % 8 === 3)) continue;
          const got = (ran.trace as Float64Array)[offset + e];
          assert.ok(
            Math.abs(got - want[name][e]) <= TRACE_BOUND[name],
            `${name}[${e}]: ${got} vs ${want[name][e]}`,
          );
        }
      }
      assert.equal(
        await checkSgmat(device, shape, 49152, (code) => emulateSubgroupMatrix(code, { f32Only })),
        null,
      );
    });
  }
});
