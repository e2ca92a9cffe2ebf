/**
 * Subgroup-matrix WGSL rewritten into plain WGSL that computes the same values, so the sgmat
 * kernel's own logic (its layouts, offsets, strides, barriers and softmax) runs and is checked on
 * any adapter, software ones included, apart from the driver's matrix operations.
 *
 * Each invocation holds a whole matrix (a struct of Rows·Cols f32, row-major) and does the whole
 * load, store or product itself, by the rules of Dawn's chromium_experimental_subgroup_matrix:
 * subgroup_matrix_left<T, K, M> is M rows × K columns, right<T, N, K> is K × N, result<T, N, M>
 * is M × N; a load or store at `offset` with `stride` (in elements of the array) reads row r,
 * column c at offset + r·stride + c (row-major) or offset + c·stride + r (column-major); a
 * product accumulates Σ_k A[i][k]·B[k][j] in f32. Every invocation of a subgroup stores the same
 * values, so the stores' overlap is benign; a store starts with a workgroupBarrier, since one
 * invocation's store must not overtake another's load of the same matrix (a subgroup's load or
 * store is one collective operation; the emulated ones are per invocation). Stores must therefore
 * be in workgroup-uniform control flow, as the kernel's are.
 *
 * With `f32Only`, f16 becomes f32 throughout (adapters without shader-f16: the f16 roundings of
 * the tiles are then skipped, which the check's bound covers).
 */

interface MatrixType {
  readonly kind: 'left' | 'right' | 'result';
  readonly cols: number;
  readonly rows: number;
  readonly name: string;
}

const TYPE = /subgroup_matrix_(left|right|result)<\s*(f16|f32)\s*,\s*(\d+)\s*,\s*(\d+)\s*>/g;

export function emulateSubgroupMatrix(code: string, options: { f32Only?: boolean } = {}): string {
  const types = new Map<string, MatrixType>();
  let out = code
    .replace(/^\s*diagnostic\(off, chromium\.subgroup_matrix_uniformity\);\s*$/m, '')
    .replace(/^\s*enable chromium_experimental_subgroup_matrix;\s*$/m, '')
    .replace(TYPE, (_all, kind: MatrixType['kind'], _t: string, cols: string, rows: string) => {
      const name = `Sm_${kind}_${rows}x${cols}`;
      types.set(name, { kind, cols: Number(cols), rows: Number(rows), name });
      return name;
    });
  // The tiles' and buffers' element types, to convert on loads and stores.
  const elements = new Map<string, string>();
  for (const m of out.matchAll(/var(?:<[^>]*>)?\s+(\w+)\s*:\s*array<\s*(f16|f32|u32|i32)\b/g)) {
    elements.set(m[1], m[2]);
  }
  const helpers = new Set<string>();
  const loaded = new Map<string, string>();
  const defs: string[] = [];
  for (const t of types.values()) {
    defs.push(`struct ${t.name} { v: array<f32, ${t.rows * t.cols}> }`);
  }
  const left = [...types.values()].find((t) => t.kind === 'left');
  const right = [...types.values()].find((t) => t.kind === 'right');
  let result = [...types.values()].find((t) => t.kind === 'result');
  if (left && right && !result) {
    // subgroupMatrixMultiply<f32> names no result type: M × N.
    result = {
      kind: 'result',
      rows: left.rows,
      cols: right.cols,
      name: `Sm_result_${left.rows}x${right.cols}`,
    };
    types.set(result.name, result);
    defs.push(`struct ${result.name} { v: array<f32, ${result.rows * result.cols}> }`);
  }
  const typeOf = (name: string) => {
    const t = types.get(name);
    if (!t) throw new Error(`no subgroup matrix type ${name}`);
    return t;
  };
  out = out.replace(
    /subgroupMatrixLoad<\s*(\w+)\s*>\(\s*&(\w+)\s*,/g,
    (_all, type: string, array: string) => {
      const t = typeOf(type);
      const fn = `sm_load_${type}_${array}`;
      loaded.set(fn, type);
      if (!helpers.has(fn)) {
        helpers.add(fn);
        defs.push(`fn ${fn}(offset: u32, col_major: bool, stride: u32) -> ${type} {
  var m: ${type};
  for (var r = 0u; r < ${t.rows}u; r++) {
    for (var c = 0u; c < ${t.cols}u; c++) {
      let at = select(offset + r * stride + c, offset + c * stride + r, col_major);
      m.v[r * ${t.cols}u + c] = f32(${array}[at]);
    }
  }
  return m;
}`);
      }
      return `${fn}(`;
    },
  );
  // Stores: the stored value's type is read from the declarations of the variables stored.
  const declared = new Map<string, string>();
  for (const m of out.matchAll(
    /\b(?:var|let)\s+(\w+)\s*(?::\s*(Sm_\w+)\s*=|=\s*(?:(Sm_\w+)\(|(sm_load_\w+)\())/g,
  )) {
    const type = m[2] ?? m[3] ?? (m[4] ? loaded.get(m[4]) : undefined);
    if (type) declared.set(m[1], type);
  }
  out = out.replace(
    /subgroupMatrixStore\(\s*&(\w+)\s*,([^;]*?),\s*(\w+)\s*,\s*(true|false|\w+)\s*,([^;]*?)\);/g,
    (_all, array: string, offset: string, value: string, colMajor: string, stride: string) => {
      const type = declared.get(value) ?? [...types.values()].find((t) => t.kind === 'result')?.name;
      if (!type) throw new Error(`no type for the stored matrix ${value}`);
      const t = typeOf(type);
      const element = elements.get(array) ?? 'f32';
      const fn = `sm_store_${type}_${array}`;
      if (!helpers.has(fn)) {
        helpers.add(fn);
        defs.push(`fn ${fn}(offset: u32, m: ${type}, col_major: bool, stride: u32) {
  workgroupBarrier();
  for (var r = 0u; r < ${t.rows}u; r++) {
    for (var c = 0u; c < ${t.cols}u; c++) {
      let at = select(offset + r * stride + c, offset + c * stride + r, col_major);
      ${array}[at] = ${element}(m.v[r * ${t.cols}u + c]);
    }
  }
}`);
      }
      return `${fn}(${offset}, ${value}, ${colMajor}, ${stride});`;
    },
  );
  if (left && right && result) {
    const M = left.rows;
    const K = left.cols;
    const N = right.cols;
    defs.push(`fn sm_mma(a: ${left.name}, b: ${right.name}, c: ${result.name}) -> ${result.name} {
  var d = c;
  for (var i = 0u; i < ${M}u; i++) {
    for (var j = 0u; j < ${N}u; j++) {
      var x = d.v[i * ${N}u + j];
      for (var k = 0u; k < ${K}u; k++) { x += a.v[i * ${K}u + k] * b.v[k * ${N}u + j]; }
      d.v[i * ${N}u + j] = x;
    }
  }
  return d;
}`);
    out = out
      .replace(/subgroupMatrixMultiplyAccumulate\(/g, 'sm_mma(')
      .replace(/subgroupMatrixMultiply<\s*f32\s*>\(([^;]*)\);/g, `sm_mma($1, ${result.name}());`);
  }
  if (options.f32Only) {
    out = out.replace(/^\s*enable f16;\s*$/m, '').replace(/\bf16\b/g, 'f32');
  }
  // The helpers after the module-scope declarations they read (WGSL allows any order).
  return `${out}\n${options.f32Only ? defs.join('\n').replace(/\bf16\b/g, 'f32') : defs.join('\n')}\n`;
}
