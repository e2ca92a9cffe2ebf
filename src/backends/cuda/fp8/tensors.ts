/**
 * The five FP8 tensors of the forward pass and what the FP8 backend needs to know of a module's
 * scaling state. TE's recipe machinery (src/te/) implements these; the backend only reads and
 * writes them, so it depends on nothing above it.
 */

/** Q, K, V, S (the softmax output P fed to the second matmul) and O. */
export const FP8_TENSORS = ['q', 'k', 'v', 's', 'o'] as const;
export type Fp8TensorName = (typeof FP8_TENSORS)[number];
export type PerTensor<T> = { readonly [name in Fp8TensorName]: T };

/** One tensor's scale and rolled amax history, as the host state (te/recipe.ts Fp8TensorMeta) holds it. */
export interface Fp8MetaSlot {
  scale: number;
  readonly amaxHistory: Float64Array;
}

/**
 * A copy of the delayed-scaling state held elsewhere (the GPU's, state.ts) that steps update
 * without the host; `pull` brings it back into the host metas.
 */
export interface Fp8StateMirror {
  readonly historyLength: number;
  pull(metas: Readonly<Record<Fp8TensorName, Fp8MetaSlot>>): void;
  release(): void;
}
