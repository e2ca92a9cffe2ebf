// Module hooks for list.ts: node:test resolves to the recorder beside this file.
export async function resolve(specifier, context, next) {
  if (specifier === 'node:test')
    return { url: new URL('./recorder.ts', import.meta.url).href, shortCircuit: true };
  return next(specifier, context);
}
