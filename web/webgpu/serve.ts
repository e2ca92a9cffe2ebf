/**
 * Bundles web/webgpu/page.ts (through the browser entry, src/webgpu.ts) into one ES module with
 * esbuild for the browser platform, which refuses any Node built-in, and serves the page on
 * 127.0.0.1. Run it to open the page yourself:
 *   node --import tsx web/webgpu/serve.ts [port]
 */
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const here = dirname(fileURLToPath(import.meta.url));

/** The page's script as one ES module (no koffi, no node: import may reach it). */
export async function bundlePage(): Promise<string> {
  const result = await build({
    entryPoints: [join(here, 'page.ts')],
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
    write: false,
    logLevel: 'silent',
  });
  return result.outputFiles[0].text;
}

/**
 * Every import in the page's module graph that esbuild left outside the bundle (a Node built-in,
 * koffi): tree-shaking drops an unused one from the bundle, but a browser loading the modules
 * unbundled would still fetch it, so the graph itself must have none.
 */
export async function externalImports(): Promise<string[]> {
  const result = await build({
    entryPoints: [join(here, 'page.ts')],
    bundle: true,
    format: 'esm',
    platform: 'browser',
    write: false,
    metafile: true,
    logLevel: 'silent',
  });
  const inputs = Object.entries(result.metafile.inputs);
  return inputs.flatMap(([file, input]) =>
    input.imports.filter((i) => i.external).map((i) => `${i.path} (from ${file})`),
  );
}

/** Serves index.html and page.js; resolves once listening. */
export async function servePage(port = 0): Promise<{ url: string; server: Server }> {
  const html = readFileSync(join(here, 'index.html'), 'utf8');
  const script = await bundlePage();
  const server = createServer((request, response) => {
    const path = new URL(request.url ?? '/', 'http://localhost').pathname;
    if (path === '/page.js') {
      response.writeHead(200, { 'content-type': 'text/javascript' }).end(script);
    } else if (path === '/' || path === '/index.html') {
      response.writeHead(200, { 'content-type': 'text/html' }).end(html);
    } else {
      response.writeHead(404).end();
    }
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  const address = server.address();
  const bound = typeof address === 'object' && address ? address.port : port;
  return { url: `http://127.0.0.1:${bound}/`, server };
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const { url } = await servePage(Number(process.argv[2] ?? 8044));
  process.stdout.write(
    `attnlab webgpu page: ${url} (Chromium: --enable-unsafe-webgpu where WebGPU is off)\n`,
  );
}
