/**
 * What a modifier costs per score in the Hopper forward's machine code: each case's variant (the one
 * the library picks at B=4 T=S=8192 N=16 H=128 bf16) compiled with nvcc for sm_90a as NVRTC compiles it
 * (the modifier set's generated source first, then hopper_fwd.cu with the variant's defines), its SASS
 * from cuobjdump, and the instructions of the units a score's softmax and modifier use, counted over
 * the whole kernel and divided by its MUFU.EX2 count (one per score in each inlined tile body, plus the
 * few of the rows' rescale), so a row reads "per score". Needs nvcc and cuobjdump, no GPU.
 *
 *   node --import tsx benchmarks/harnesses/variants-hopper-sass.ts [out folder]
 *
 * Prints one JSON line per case: the variant, ptxas's registers and spills, each counted opcode's total
 * and per-score figure. With an out folder the SASS of each case is written there too.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { validateAttention } from '../../src/api/validate.js';
import {
  HOPPER_KERNEL,
  hopperDefines,
  hopperVariant,
  hopperVariantKey,
} from '../../src/backends/cuda/flash/sm90/hopper-variant.js';
import { compileOptions, kernelsDir } from '../../src/backends/cuda/runtime/compile.js';
import type { AttentionOptions, AttentionProblem } from '../../src/backends/problem.js';
import { Tensor } from '../../src/tensor/tensor.js';
import { compileModifiers } from '../../src/variants/compile.js';
import { alibi, and, causal, documentMask, softcap } from '../../src/variants/library.js';
import { type MaskMod, maskMod, type ScoreMod } from '../../src/variants/modifiers.js';

const out = process.argv[2];
const [B, T, N, H] = [4, 8192, 16, 128];
const sizes = { B, N, T, S: T };
/** The opcodes counted: the exponentials' unit, the FP32 pipe, conversions, the tensor cores. */
const OPCODES = [
  'MUFU.EX2',
  'MUFU.TANH',
  'MUFU',
  'FMUL',
  'FFMA',
  'FADD',
  'FMNMX',
  'FSEL',
  'I2F',
  'F2FP',
  'HGMMA',
];

interface Case {
  readonly name: string;
  readonly options: AttentionOptions;
  readonly score?: ScoreMod;
  readonly mask?: MaskMod;
  readonly blockMask?: boolean;
}

const docIds = Tensor.zeros([B, T], 'int32');
const cases: Case[] = [
  { name: 'no mask', options: {} },
  { name: 'built-in causal', options: { isCausal: true } },
  { name: 'softcap 30', options: {}, score: softcap(30) },
  { name: 'softcap 30 + built-in causal', options: { isCausal: true }, score: softcap(30) },
  { name: 'ALiBi + built-in causal', options: { isCausal: true }, score: alibi(N) },
  { name: 'causal as maskMod + block mask', options: {}, mask: maskMod('kv <= q'), blockMask: true },
  {
    name: 'document mask + block mask',
    options: {},
    mask: and(documentMask(docIds), causal()),
    blockMask: true,
  },
];

const q = Tensor.zeros([B, T, N, H], 'bfloat16');
if (out) mkdirSync(out, { recursive: true });
const dir = mkdtempSync(join(tmpdir(), 'attnlab-sass-'));
try {
  for (const c of cases) {
    const base = validateAttention(q, q, q, c.options) as AttentionProblem;
    const modifiers = c.score || c.mask ? compileModifiers(c.score, c.mask, sizes, 'cpu') : null;
    // The variant depends on the set's key and flags, not on where its captures live: the captures
    // stay on the host here (hopperVariant would refuse them), and nothing is launched.
    const p = {
      ...base,
      modifiers: modifiers ? { ...modifiers, captures: [] } : null,
      blockMask: c.blockMask ? { kinds: { ptr: 0n }, Bm: 1, Nm: 1, blockQ: 128, blockKV: 128 } : null,
    } as unknown as AttentionProblem;
    const found = hopperVariant(p, 'sm_90a', 'wgmma', null);
    if ('reason' in found) throw new Error(`${c.name}: no Hopper variant: ${found.reason}`);
    const defines = compileOptions(
      { file: HOPPER_KERNEL.file, kernels: [], defines: hopperDefines(found.variant) },
      'sm_90a',
    ).filter((o) => o.startsWith('-D'));
    const cubin = join(dir, 'k.cubin');
    const include: string[] = [];
    if (modifiers) {
      writeFileSync(join(dir, 'prelude.cuh'), modifiers.cudaSource);
      include.push('-include', join(dir, 'prelude.cuh'));
    }
    const nvcc = spawnSync(
      'nvcc',
      [
        ...['-cubin', '-gencode=arch=compute_90a,code=sm_90a', '-std=c++17', '-Xptxas', '-v'],
        ...['-I', kernelsDir(), ...include, ...defines, '-o', cubin, join(kernelsDir(), HOPPER_KERNEL.file)],
      ],
      { encoding: 'utf8' },
    );
    if (nvcc.status !== 0) throw new Error(`${c.name}: nvcc failed:\n${nvcc.stderr}`);
    const usage = /Used (\d+) registers/.exec(nvcc.stderr)?.[1];
    const spill = /(\d+) bytes spill stores/.exec(nvcc.stderr)?.[1];
    const dump = spawnSync('cuobjdump', ['-sass', cubin], { encoding: 'utf8', maxBuffer: 1 << 28 });
    if (dump.status !== 0) throw new Error(`cuobjdump failed (${dump.error?.message ?? dump.stderr})`);
    if (out) writeFileSync(join(out, `${c.name.replace(/[^a-z0-9]+/gi, '-')}.sass`), dump.stdout);
    // One instruction a line: `/*0a10*/  MUFU.EX2 R12, R13 ;`, an optional predicate before the opcode.
    const opcodes = [
      ...dump.stdout.matchAll(/\/\*[0-9a-f]{4,}\*\/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)/g),
    ].map((m) => m[1]);
    const count = (op: string) =>
      opcodes.filter((o) => (op === 'MUFU' ? o.startsWith('MUFU') : o === op || o.startsWith(`${op}.`)))
        .length;
    const scores = count('MUFU.EX2');
    const totals = Object.fromEntries(OPCODES.map((op) => [op, count(op)]));
    const perScore = Object.fromEntries(
      OPCODES.filter((op) => op !== 'HGMMA').map((op) => [op, Number((count(op) / scores).toFixed(2))]),
    );
    console.log(
      JSON.stringify({
        case: c.name,
        variant: hopperVariantKey(found.variant),
        registers: Number(usage),
        spillBytes: Number(spill),
        instructions: opcodes.length,
        totals,
        perScore,
      }),
    );
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
