/**
 * A C struct's layout as the compiler lays it out, for tests that hold the TypeScript marshalling
 * (launch.ts structLayout) to it: a tiny C++ program includes the struct and prints sizeof, and
 * offsetof, size, element size and kind of every member. nvcc compiles it where it is on PATH (the
 * CUDA compiler's own view); otherwise the host C++ compiler does, with the CUDA keywords the headers
 * use defined away (device and host layouts of pointers, 64/32-bit integers and floats agree: kernel
 * parameters are copied byte for byte). Neither present: the caller skips, with `reason`.
 */
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SCALAR_BYTES, type ScalarType, structLayout } from '../../src/backends/cuda/runtime/launch.js';

/** One scalar of the struct (array members expanded): its byte offset, size and kind. */
export interface CScalar {
  readonly member: string;
  readonly offset: number;
  readonly bytes: number;
  /** p pointer, f floating point, i integer. */
  readonly kind: 'p' | 'f' | 'i';
}

export interface CStructLayout {
  readonly size: number;
  readonly scalars: readonly CScalar[];
}

const CUDA_KEYWORDS_AWAY = ['-D__device__=', '-D__forceinline__=inline', '-D__align__(n)=alignas(n)'];

/** The compiler to use and its flags, or why there is none. */
export function structCompiler(): { command: string; flags: string[] } | { reason: string } {
  if (spawnSync('nvcc', ['--version']).status === 0) return { command: 'nvcc', flags: ['-x', 'cu'] };
  if (spawnSync('c++', ['--version']).status === 0) {
    return { command: 'c++', flags: ['-x', 'c++', '-std=c++17', ...CUDA_KEYWORDS_AWAY] };
  }
  return { reason: 'neither nvcc nor a C++ compiler (c++) on PATH to lay the struct out' };
}

/** Member names of `struct <name> { ... };` in `source`, in declaration order. */
export function structMembers(source: string, name: string): string[] {
  const body = new RegExp(`struct ${name} \\{([\\s\\S]*?)\\n\\};`).exec(source)?.[1];
  if (body === undefined) throw new Error(`no struct ${name} in the source`);
  return body
    .split('\n')
    .map((line) => line.replace(/\/\/.*$/, '').trim())
    .filter((line) => line.endsWith(';'))
    .flatMap((line) =>
      line
        .slice(0, -1)
        .split(',')
        .map((declarator) => /([A-Za-z_]\w*)\s*(\[\d+\])?\s*$/.exec(declarator)![1]),
    );
}

/**
 * Compiles and runs a program that includes `prelude` (an #include line, or the struct's text) and
 * prints the layout of `struct <name>`; `includeDir` is passed as -I.
 */
export function compileStructLayout(options: {
  prelude: string;
  name: string;
  members: readonly string[];
  includeDir: string;
  scratch: string;
}): CStructLayout {
  const compiler = structCompiler();
  if ('reason' in compiler) throw new Error(compiler.reason);
  const { prelude, name, members, includeDir, scratch } = options;
  const program = `#include <cstddef>
#include <cstdio>
#include <type_traits>
${prelude}
template <class T> char kind() {
  using E = typename std::remove_all_extents<T>::type;
  return std::is_pointer<E>::value ? 'p' : std::is_floating_point<E>::value ? 'f' : 'i';
}
#define MEMBER(m) std::printf("%s %zu %zu %zu %c\\n", #m, offsetof(${name}, m), sizeof(((${name}*)0)->m), \\
  sizeof(std::remove_all_extents<decltype(${name}::m)>::type), kind<decltype(${name}::m)>());
int main() {
  std::printf("size %zu\\n", sizeof(${name}));
  ${members.map((m) => `MEMBER(${m})`).join(' ')}
  return 0;
}
`;
  const source = join(scratch, `${name}-layout.cpp`);
  const exe = join(scratch, `${name}-layout`);
  writeFileSync(source, program);
  const built = spawnSync(compiler.command, [...compiler.flags, '-I', includeDir, '-o', exe, source], {
    encoding: 'utf8',
  });
  if (built.status !== 0) throw new Error(`${compiler.command} failed:\n${built.stderr}`);
  const [sizeLine, ...lines] = spawnSync(exe, { encoding: 'utf8' }).stdout.trim().split('\n');
  const scalars: CScalar[] = [];
  for (const line of lines) {
    const [member, offset, bytes, elementBytes, kind] = line.split(' ');
    for (let at = 0; at < Number(bytes); at += Number(elementBytes)) {
      scalars.push({
        member,
        offset: Number(offset) + at,
        bytes: Number(elementBytes),
        kind: kind as CScalar['kind'],
      });
    }
  }
  return { size: Number(sizeLine.split(' ')[1]), scalars };
}

const KIND: Record<ScalarType, CScalar['kind']> = {
  i32: 'i',
  u32: 'i',
  f32: 'f',
  i64: 'i',
  u64: 'i',
  ptr: 'p',
};

/**
 * Where the TypeScript fields (marshalled in order, laid out by launch.ts) and the compiler's struct
 * disagree, one line each (field index, C member, offsets, sizes, kinds); empty when they agree.
 */
export function layoutMismatches(c: CStructLayout, fields: ReadonlyArray<{ type: ScalarType }>): string[] {
  const ts = structLayout(fields);
  const problems: string[] = [];
  if (ts.size !== c.size) problems.push(`size: TypeScript ${ts.size} B, C ${c.size} B`);
  if (fields.length !== c.scalars.length) {
    problems.push(`scalars: TypeScript marshals ${fields.length}, the C struct has ${c.scalars.length}`);
  }
  for (let i = 0; i < Math.min(fields.length, c.scalars.length); i++) {
    const { member, offset, bytes, kind } = c.scalars[i];
    const type = fields[i].type;
    if (ts.offsets[i] !== offset || SCALAR_BYTES[type] !== bytes || KIND[type] !== kind) {
      problems.push(
        `field ${i} (C ${member}): TypeScript ${type} at ${ts.offsets[i]}, C ${bytes}-byte ${kind} at ${offset}`,
      );
    }
  }
  return problems;
}
