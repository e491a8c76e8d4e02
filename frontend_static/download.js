// CSV and JSON download of what a chart shows (its data, not its pixels).
// A chart gives data() = {series: [{name, steps, values, none?}]} (line
// charts) or {rows, steps, values} (heatmaps: values[row][stepIndex]).
// NaN and +-Inf are written as NaN, Infinity, -Infinity (as the routes
// spell them); a None (disconnected) gradient as None.

import {el} from './dom.js';

/** JSON value of a number: finite as is, else "NaN" / "Infinity" / "-Infinity". */
export function jsonNumber(v) {
  if (Number.isFinite(v)) return v;
  if (Number.isNaN(v)) return 'NaN';
  return v > 0 ? 'Infinity' : '-Infinity';
}

/** [[name, step, value], ...] of chart data, in long form. */
export function longRows(data) {
  const out = [];
  if (data.series) {
    for (const s of data.series) {
      for (let i = 0; i < s.steps.length; i++) {
        out.push([s.name, s.steps[i], s.none && s.none[i] ? 'None' : jsonNumber(s.values[i])]);
      }
    }
  } else {
    data.rows.forEach((name, r) => {
      for (let i = 0; i < data.steps.length; i++) out.push([name, data.steps[i], jsonNumber(data.values[r][i])]);
    });
  }
  return out;
}

/** CSV text (RFC 4180 quoting) of chart data: header name,step,value. */
export function toCsv(data, header = ['name', 'step', 'value']) {
  const quote = (v) => {
    const text = String(v);
    return /[",\n\r]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
  };
  return [header, ...longRows(data)].map((row) => row.map(quote).join(',')).join('\n') + '\n';
}

/** JSON text of chart data: {name, series: [{name, steps, values}]} or {name, rows, steps, values}. */
export function toJson(data, name) {
  const out = {name};
  if (data.series) {
    out.series = data.series.map((s) => ({
      name: s.name, steps: Array.from(s.steps),
      values: Array.from(s.values, (v, i) => (s.none && s.none[i] ? 'None' : jsonNumber(v))),
    }));
  } else {
    out.rows = data.rows;
    out.steps = Array.from(data.steps);
    out.values = data.values.map((row) => Array.from(row, jsonNumber));
  }
  return JSON.stringify(out);
}

/** A file name stem from a chart title: letters, digits, '-' and '_'. */
export function fileStem(text) {
  return String(text || 'chart').replace(/[^A-Za-z0-9_-]+/g, '_').replace(/^_+|_+$/g, '').slice(0, 80) || 'chart';
}

function save(text, type, filename) {
  const url = URL.createObjectURL(new Blob([text], {type}));
  const link = el('a', {href: url, download: filename});
  document.body.appendChild(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

/** The CSV and JSON buttons of a chart's toolbar. */
export function downloadButtons(data, name) {
  const stem = fileStem(name);
  return [
    el('button', {type: 'button', class: 'gl-tool gl-download-csv', text: 'CSV', title: 'Download the data as CSV',
      onclick: () => save(toCsv(data()), 'text/csv', `${stem}.csv`)}),
    el('button', {type: 'button', class: 'gl-tool gl-download-json', text: 'JSON',
      title: 'Download the data as JSON', onclick: () => save(toJson(data(), name), 'application/json', `${stem}.json`)}),
  ];
}
