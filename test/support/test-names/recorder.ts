/**
 * A stand-in for node:test that runs nothing: it records the name path (suites, then test) of every test a
 * file defines, for list.ts. Suite bodies run (they define the tests); test bodies and hooks do not. A suite
 * body that throws (one that reaches the GPU while defining its tests) is recorded with its error.
 */
export interface RecordedTest {
  readonly file: string;
  readonly path: readonly string[];
  readonly error?: string;
}

export const recorded: RecordedTest[] = [];
const stack: string[] = [];
let currentFile = '';

export function startFile(file: string): void {
  currentFile = file;
}

type Body = (...args: unknown[]) => unknown;

function parse(args: unknown[]): { name: string; body?: Body } {
  const [first] = args;
  const name = typeof first === 'string' ? first : typeof first === 'function' ? first.name : '';
  return { name, body: args.find((a): a is Body => typeof a === 'function') };
}

export function describe(...args: unknown[]): void {
  const { name, body } = parse(args);
  stack.push(name);
  try {
    body?.({});
  } catch (error) {
    recorded.push({ file: currentFile, path: [...stack], error: String(error) });
  } finally {
    stack.pop();
  }
}

export function it(...args: unknown[]): void {
  recorded.push({ file: currentFile, path: [...stack, parse(args).name] });
}

export const test = it;
export const suite = describe;
export function before(): void {}
export function after(): void {}
export function beforeEach(): void {}
export function afterEach(): void {}
export default { describe, it, test, suite, before, after, beforeEach, afterEach };
