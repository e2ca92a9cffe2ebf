/**
 * The chart.js configuration of one chart spec, as plain ES2017 source: the HTML report inlines it
 * into a page that must work from a file:// URL with no build step, and the notebook display functions
 * (src/notebook/png.ts) evaluate the same text in Node to draw the same chart into a PNG. One
 * definition, two hosts, so a notebook chart and a report chart never drift apart.
 *
 * `attnlabChartConfig(spec, Chart)` returns a config object for `new Chart(canvas, config)`.
 * Linear value axes keep chart.js's own tick formatter: it picks the digits from the tick step, so
 * ticks 0.00100, 0.00105, 0.00110 read as three numbers (a fixed one-digit exponent printed
 * `1.0e-3` for each). Base-2 log x axes put their ticks on the data's own x values (64, 128, …):
 * chart.js's default log ticks are powers of ten, which say nothing about a sweep of powers of two.
 */
export const CHART_CONFIG_SOURCE = `
function attnlabChartConfig(spec, Chart) {
  var palette = ['#0969da', '#1a7f37', '#d1242f', '#8250df', '#bf8700', '#1b7c83', '#e16f24', '#6e7781',
    '#953800', '#4ac26b', '#bf3989', '#a475f9', '#0e1116', '#54aeff', '#9a6700', '#ff8182'];
  // Peers draw dashed or dotted, with their own point shape, so a comparison reads at a glance.
  var styleOf = function (label) {
    var name = label.replace(/^[^:]*: /, '');
    if (name.indexOf('jax ') === 0) return { dash: [7, 4], point: 'rect' };
    if (name.indexOf('torch ') === 0) return { dash: [2, 3], point: 'triangle' };
    if (name.indexOf('recorded ') === 0 || label.indexOf('recorded') === 0) return { dash: [4, 3], point: 'rectRot' };
    return { dash: [], point: 'circle' };
  };
  var format = function (v) {
    if (v === 0) return '0';
    var a = Math.abs(v);
    if (a >= 1000) return v.toFixed(0);
    if (a >= 0.01) return String(Number(v.toPrecision(3)));
    return String(Number(v.toPrecision(2)));
  };
  // Log value axes get a tick at every 1..9 x 10^n; labelling only 1, 2 and 5 keeps them legible.
  var logLabel = function (v) {
    var n = Number(v);
    var m = n / Math.pow(10, Math.floor(Math.log10(n) + 1e-9));
    var r = Math.round(m);
    return Math.abs(m - r) < 1e-6 && (r === 1 || r === 2 || r === 5) ? format(n) : '';
  };
  var linearLabel = Chart.Ticks.formatters.numeric;
  var font = { size: 12 };
  if (spec.kind === 'bar') {
    return {
      type: 'bar',
      data: {
        labels: spec.series.map(function (s) { return s.label; }),
        datasets: [{
          label: spec.yLabel,
          data: spec.series.map(function (s) { return s.points[0].y; }),
          backgroundColor: spec.series.map(function (_, i) { return palette[i % palette.length]; })
        }]
      },
      options: {
        indexAxis: 'y', animation: false, responsive: true, maintainAspectRatio: false,
        plugins: { legend: { display: false }, title: { display: false } },
        scales: {
          x: { type: spec.logY ? 'logarithmic' : 'linear', title: { display: true, text: spec.yLabel, font: font },
               ticks: { callback: spec.logY ? logLabel : linearLabel } }
        }
      }
    };
  }
  var xs = [];
  spec.series.forEach(function (s) { s.points.forEach(function (p) { if (xs.indexOf(p.x) < 0) xs.push(p.x); }); });
  xs.sort(function (a, b) { return a - b; });
  return {
    type: 'line',
    data: {
      datasets: spec.series.map(function (s, i) {
        var color = palette[i % palette.length];
        var style = styleOf(s.label);
        return { label: s.label, data: s.points, borderColor: color, backgroundColor: color,
                 borderDash: style.dash, pointStyle: style.point, pointRadius: 3, tension: 0, spanGaps: false };
      })
    },
    options: {
      animation: false, responsive: true, maintainAspectRatio: false, parsing: true,
      plugins: { legend: { position: 'bottom', labels: { boxWidth: 12, usePointStyle: true } } },
      scales: {
        x: {
          type: spec.logX ? 'logarithmic' : 'linear', title: { display: true, text: spec.xLabel, font: font },
          afterBuildTicks: spec.logX ? function (axis) { axis.ticks = xs.map(function (v) { return { value: v }; }); } : undefined,
          ticks: { callback: function (v) { return format(Number(v)); } }
        },
        y: {
          type: spec.logY ? 'logarithmic' : 'linear', title: { display: true, text: spec.yLabel, font: font },
          ticks: { callback: spec.logY ? logLabel : linearLabel }
        }
      }
    }
  };
}
`;
