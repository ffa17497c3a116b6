// Build: copies uPlot from node_modules into vendor/ (so ui/ itself can be served) and assembles
// a self-contained dist/ (index.html, src/, vendor/) to install or serve. Run after `npm ci`.
// Works offline; no bundler.
import { cpSync, mkdirSync, rmSync, existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const uplot = join(here, 'node_modules', 'uplot', 'dist');
if (!existsSync(uplot)) {
  console.error('build: node_modules/uplot is missing; run `npm ci` in ui/ first');
  process.exit(1);
}
const vendor = join(here, 'vendor');
mkdirSync(vendor, { recursive: true });
cpSync(join(uplot, 'uPlot.esm.js'), join(vendor, 'uPlot.esm.js'));
cpSync(join(uplot, 'uPlot.min.css'), join(vendor, 'uPlot.min.css'));
cpSync(join(here, 'node_modules', 'uplot', 'LICENSE'), join(vendor, 'uPlot.LICENSE.txt'));

const dist = join(here, 'dist');
rmSync(dist, { recursive: true, force: true });
mkdirSync(dist, { recursive: true });
cpSync(join(here, 'index.html'), join(dist, 'index.html'));
cpSync(join(here, 'src'), join(dist, 'src'), { recursive: true });
cpSync(vendor, join(dist, 'vendor'), { recursive: true });
console.log(`build: wrote ${vendor} and ${dist}`);
