/**
 * Reads the initial value of a symbol out of an ELF64 little-endian file (a CUBIN from nvcc): the
 * bytes the symbol's section holds at its value, as the driver would copy them into device memory.
 * Enough ELF for tests that ask a compiled kernel what it states about itself without a GPU.
 */

const SHT_SYMTAB = 2;
const SHT_NOBITS = 8;

interface Section {
  type: number;
  offset: number;
  size: number;
  link: number;
  entrySize: number;
}

function sections(elf: Buffer): Section[] {
  if (elf.readUInt32BE(0) !== 0x7f454c46 || elf[4] !== 2 || elf[5] !== 1) {
    throw new Error('not a little-endian ELF64 file');
  }
  const offset = Number(elf.readBigUInt64LE(0x28));
  const entrySize = elf.readUInt16LE(0x3a);
  const count = elf.readUInt16LE(0x3c);
  return Array.from({ length: count }, (_, i) => {
    const at = offset + i * entrySize;
    return {
      type: elf.readUInt32LE(at + 4),
      offset: Number(elf.readBigUInt64LE(at + 24)),
      size: Number(elf.readBigUInt64LE(at + 32)),
      link: elf.readUInt32LE(at + 40),
      entrySize: Number(elf.readBigUInt64LE(at + 56)),
    };
  });
}

/** The `size` bytes the symbol `name` starts with; throws if the file has no such initialised symbol. */
export function elfSymbolBytes(elf: Buffer, name: string): Buffer {
  const all = sections(elf);
  for (const symtab of all.filter((s) => s.type === SHT_SYMTAB)) {
    const strings = all[symtab.link];
    for (let at = symtab.offset; at < symtab.offset + symtab.size; at += symtab.entrySize) {
      const nameAt = strings.offset + elf.readUInt32LE(at);
      const symbol = elf.toString('latin1', nameAt, elf.indexOf(0, nameAt));
      if (symbol !== name) continue;
      const section = all[elf.readUInt16LE(at + 6)];
      if (!section || section.type === SHT_NOBITS) throw new Error(`${name} has no initial value`);
      const start = section.offset + Number(elf.readBigUInt64LE(at + 8));
      return elf.subarray(start, start + Number(elf.readBigUInt64LE(at + 16)));
    }
  }
  throw new Error(`no symbol ${name}`);
}
