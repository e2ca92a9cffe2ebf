/**
 * The script the HTML report runs in the browser: it reads the chart specs embedded as JSON and draws
 * each with chart.js, through the configuration in chart-config.ts (shared with the notebook's PNG
 * charts). Kept as plain ES2017 text (no imports, no build step) because it is inlined into a page
 * that must work from a file:// URL with no network.
 */
import { CHART_CONFIG_SOURCE } from './chart-config.js';

export const CHART_BOOT_SCRIPT = `
(function () {
  'use strict';
  ${CHART_CONFIG_SOURCE}
  var specs = JSON.parse(document.getElementById('attnlab-charts').textContent);
  var rendered = 0;
  specs.forEach(function (spec) {
    var canvas = document.getElementById(spec.id);
    if (!canvas) { console.error('attnlab report: no canvas for chart ' + spec.id); return; }
    try {
      new Chart(canvas, attnlabChartConfig(spec, Chart));
      rendered++;
    } catch (err) {
      console.error('attnlab report: chart ' + spec.id + ' failed: ' + err);
    }
  });
  document.body.setAttribute('data-charts-rendered', String(rendered));
})();
`;
