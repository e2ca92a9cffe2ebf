/**
 * A chart spec drawn into a PNG in Node: chart.js on a Skia canvas (@napi-rs/canvas, an optional
 * dependency shipped with prebuilt binaries), configured by the very source the HTML report inlines
 * (report/chart-config.ts). Jupyter shows image/png everywhere — JupyterLab, nbconvert's HTML and
 * GitHub's notebook view — where a chart drawn by a script in the page would be blank or stripped.
 */
import { createRequire } from 'node:module';
import { UnsupportedError } from '../errors.js';
import { CHART_CONFIG_SOURCE } from '../report/chart-config.js';
import type { ChartSpec } from '../report/charts.js';

/** 800×400 CSS pixels at 2× density: sharp on a high-density screen, ~60 KB a chart. */
export interface PngOptions {
  readonly width?: number;
  readonly height?: number;
  readonly scale?: number;
}

interface SkiaCanvas {
  getContext(kind: '2d'): unknown;
  encode(format: 'png'): Promise<Uint8Array>;
}
interface SkiaModule {
  createCanvas(width: number, height: number): SkiaCanvas;
}
type ChartModule = typeof import('chart.js');
type ConfigBuilder = (spec: ChartSpec, chart: unknown) => Record<string, unknown>;

let loaded: { skia: SkiaModule; chart: ChartModule; build: ConfigBuilder } | null = null;

/** Why PNG charts cannot be drawn here, or null when they can. */
export function pngChartsUnavailable(): string | null {
  try {
    createRequire(import.meta.url).resolve('@napi-rs/canvas');
    return null;
  } catch {
    return 'the optional dependency @napi-rs/canvas is not installed (npm install @napi-rs/canvas)';
  }
}

async function load(): Promise<NonNullable<typeof loaded>> {
  if (loaded) return loaded;
  const reason = pngChartsUnavailable();
  if (reason) throw new UnsupportedError('notebook charts', reason);
  const skia = (await import('@napi-rs/canvas')) as unknown as SkiaModule;
  const chart = await import('chart.js');
  chart.Chart.register(...chart.registerables);
  const build = new Function(`${CHART_CONFIG_SOURCE}\nreturn attnlabChartConfig;`)() as ConfigBuilder;
  loaded = { skia, chart, build };
  return loaded;
}

/** The chart as PNG bytes, white background, drawn by chart.js with the report's configuration. */
export async function chartPng(spec: ChartSpec, options: PngOptions = {}): Promise<Uint8Array> {
  const { skia, chart, build } = await load();
  const [width, height, scale] = [options.width ?? 800, options.height ?? 400, options.scale ?? 2];
  const canvas = skia.createCanvas(width * scale, height * scale);
  const config = build(spec, { Ticks: chart.Ticks }) as {
    options: Record<string, unknown>;
    plugins?: unknown[];
  };
  const plugins = (config.options.plugins ?? {}) as Record<string, unknown>;
  // The report titles a chart in the page (h3); an image carries its own title.
  plugins.title = { display: true, text: spec.title, font: { size: 14 } };
  config.options = { ...config.options, plugins, responsive: false, devicePixelRatio: scale };
  config.plugins = [
    {
      id: 'attnlab-white-background',
      beforeDraw(c: { ctx: CanvasRenderingContext2D; width: number; height: number }) {
        c.ctx.save();
        c.ctx.fillStyle = '#ffffff';
        c.ctx.fillRect(0, 0, c.width, c.height);
        c.ctx.restore();
      },
    },
  ];
  // chart.js takes the canvas size as CSS pixels × devicePixelRatio; without a DOM it reads the
  // canvas' own width/height, so the context is given a canvas of the CSS size scaled by `scale`.
  const context = canvas.getContext('2d') as { canvas: { width: number; height: number } };
  const instance = new chart.Chart(context as never, config as never);
  instance.resize(width, height);
  instance.draw();
  const bytes = await canvas.encode('png');
  instance.destroy();
  return bytes;
}
