/**
 * README's performance figure, made from a recorded results file: forward TFLOP/s of every series
 * (attnlab's backends and the peers in the same run) at the shape the file measured over the most head
 * dims, non-causal and causal side by side, as an SVG with the GPU, date, commit and libraries under it.
 *
 *   node --import tsx scripts/forward-figure.ts <results.json> [docs/figures/forward.svg]
 *
 * It prints the Markdown caption README puts under the image (the GPU, the date and the command that
 * made the file). Hand-written SVG: no browser or plotting library, the same bytes on every machine.
 */
import { writeFileSync } from 'node:fs';
import { loadResults } from '../src/results/files.js';
import type { ResultRow, ResultsFile } from '../src/results/schema.js';

const COLOURS = ['#1f6feb', '#2da44e', '#bf8700', '#cf222e', '#8250df', '#57606a', '#0598bc'];
const PEER_NAMES: Record<string, string> = { torch: 'PyTorch', jax: 'JAX' };
const IMPL_NAMES: Record<string, string> = { cudnn: 'cuDNN', flash: 'FlashAttention-2', xla: 'XLA' };

/** The series name without dtype or causality (the panel says those): 'attnlab flash', 'PyTorch cuDNN'. */
function seriesName(row: ResultRow): string {
  if (row.source !== 'attnlab')
    return `${PEER_NAMES[row.source] ?? row.source} ${IMPL_NAMES[row.impl] ?? row.impl}`;
  const words = row.label.split(' ').filter((w) => !/^(b?f(loat)?\d+|bf16|fp16|causal|bfloat16)$/.test(w));
  return words.join(' ');
}

const shapeKey = (r: ResultRow) => `${r.B}|${r.T}|${r.S}|${r.N}|${r.K}|${r.dtype}`;

/** The forward rows with a speed at the shape measured over the most head dims (ties: the most rows). */
export function figureRows(results: ResultsFile): ResultRow[] {
  const timed = results.rows.filter(
    (r) =>
      r.status === 'ok' &&
      typeof r.tflops === 'number' &&
      (r.pass ?? 'forward') === 'forward' &&
      !r.blockSize,
  );
  const byShape = new Map<string, ResultRow[]>();
  for (const r of timed) byShape.set(shapeKey(r), [...(byShape.get(shapeKey(r)) ?? []), r]);
  let best: ResultRow[] = [];
  let bestHeads = 0;
  for (const rows of byShape.values()) {
    const heads = new Set(rows.map((r) => r.H)).size;
    if (heads > bestHeads || (heads === bestHeads && rows.length > best.length))
      [best, bestHeads] = [rows, heads];
  }
  if (best.length === 0) throw new Error('the results file has no timed forward rows to draw');
  return best;
}

const xml = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** A tick step of 1, 2 or 5 × 10^k that puts at most 5 steps under `value`'s ceiling. */
function niceStep(value: number): number {
  const power = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 5, 10].map((m) => m * power).find((step) => Math.ceil(value / step) <= 5) ?? 10 * power;
}

export function forwardFigure(results: ResultsFile): { svg: string; caption: string } {
  const rows = figureRows(results);
  // attnlab's series first, then the peers, each in the file's order.
  const ordered = [
    ...rows.filter((r) => r.source === 'attnlab'),
    ...rows.filter((r) => r.source !== 'attnlab'),
  ];
  const series = [...new Set(ordered.map(seriesName))];
  const heads = [...new Set(rows.map((r) => r.H))].sort((a, b) => a - b);
  const panels = [false, true].filter((causal) => rows.some((r) => r.causal === causal));
  const highest = Math.max(...rows.map((r) => r.tflops ?? 0));
  const step = niceStep(highest);
  const top = Math.ceil(highest / step) * step;
  const { B, T, S, N, K, dtype } = rows[0];

  const [panelW, panelH, left, gap, titleH, legendH, footH] = [
    420,
    260,
    56,
    24,
    48,
    24 * Math.ceil(series.length / 3),
    40,
  ];
  const width = left + panels.length * (panelW + gap);
  const height = titleH + panelH + 40 + legendH + footH;
  const y = (v: number) => titleH + panelH - (v / top) * panelH;
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="Helvetica, Arial, sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="#ffffff"/>`,
    `<text x="${left}" y="20" font-size="15" font-weight="bold">Forward attention, TFLOP/s (higher is better)</text>`,
    `<text x="${left}" y="38" fill="#57606a">B=${B}, T=${T}, S=${S}, N=${N}, K=${K}, ${dtype}; H = ${heads.join(', ')}</text>`,
  );
  for (let v = 0; v <= top; v += step) {
    out.push(
      `<line x1="${left}" x2="${width - gap}" y1="${y(v)}" y2="${y(v)}" stroke="#d0d7de" stroke-width="1"/>`,
      `<text x="${left - 6}" y="${y(v) + 4}" text-anchor="end" fill="#57606a">${Math.round(v)}</text>`,
    );
  }
  panels.forEach((causal, p) => {
    const x0 = left + p * (panelW + gap);
    const groupW = panelW / heads.length;
    const barW = Math.min(28, (groupW - 16) / series.length);
    out.push(
      `<text x="${x0 + panelW / 2}" y="${titleH + panelH + 34}" text-anchor="middle" font-weight="bold">${causal ? 'causal' : 'non-causal'}</text>`,
    );
    heads.forEach((h, g) => {
      const gx = x0 + g * groupW + (groupW - barW * series.length) / 2;
      out.push(
        `<text x="${x0 + g * groupW + groupW / 2}" y="${titleH + panelH + 16}" text-anchor="middle">H=${h}</text>`,
      );
      series.forEach((name, s) => {
        const row = rows.find((r) => r.H === h && r.causal === causal && seriesName(r) === name);
        if (!row?.tflops) return;
        const bx = gx + s * barW;
        out.push(
          `<rect x="${bx.toFixed(1)}" y="${y(row.tflops).toFixed(1)}" width="${(barW - 2).toFixed(1)}" height="${(titleH + panelH - y(row.tflops)).toFixed(1)}" fill="${COLOURS[s % COLOURS.length]}"><title>${xml(name)} H=${h}: ${row.tflops.toFixed(1)} TFLOP/s</title></rect>`,
          `<text x="${(bx + (barW - 2) / 2).toFixed(1)}" y="${(y(row.tflops) - 3).toFixed(1)}" text-anchor="middle" font-size="8" fill="#24292f">${Math.round(row.tflops)}</text>`,
        );
      });
    });
  });
  series.forEach((name, s) => {
    const lx = left + (s % 3) * 260;
    const ly = titleH + panelH + 58 + Math.floor(s / 3) * 20;
    out.push(
      `<rect x="${lx}" y="${ly - 10}" width="12" height="12" fill="${COLOURS[s % COLOURS.length]}"/>`,
      `<text x="${lx + 18}" y="${ly}">${xml(name)}</text>`,
    );
  });
  const gpu = results.machine.gpu?.name ?? `CPU (${results.machine.cpu})`;
  const date = results.createdAt.slice(0, 10);
  const libraries = Object.entries(results.machine.libraries)
    .map(([name, v]) => `${name} ${v.split(' ')[0]}`)
    .concat(
      results.peers.filter((p) => p.available).map((p) => `${p.name} ${p.versions?.[p.name] ?? ''}`.trim()),
    )
    .filter((v, i, all) => all.indexOf(v) === i);
  const foot = `${gpu}, ${date}, attnlab ${results.attnlab.version} (${results.attnlab.commit}); ${libraries.join(', ')}`;
  out.push(`<text x="${left}" y="${height - 14}" fill="#57606a">${xml(foot)}</text>`, '</svg>');
  const caption = `${gpu}, ${date}, attnlab ${results.attnlab.version} at ${results.attnlab.commit}: \`${results.command}\``;
  return { svg: `${out.join('\n')}\n`, caption };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [input, output = 'docs/figures/forward.svg'] = process.argv.slice(2);
  if (!input) {
    process.stderr.write('usage: node --import tsx scripts/forward-figure.ts <results.json> [out.svg]\n');
    process.exit(2);
  }
  const { svg, caption } = forwardFigure(loadResults(input));
  writeFileSync(output, svg);
  process.stdout.write(`${output}\n${caption}\n`);
}
