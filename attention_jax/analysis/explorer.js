// The attention explorer's own script (attention_jax/analysis/explorer_page.py writes it
// beside each page): the sentence table's sorting and filters, and a clicked sentence's maps
// drawn with Plotly from data/<id>.js (loaded by a <script> tag: works from file://).
'use strict';
const EX = {details: {}, page: JSON.parse(document.getElementById('explorer-page').textContent),
            current: null, token: 0};
const K = 1000;   // maps are stored as ints in thousandths
const scaled = (m) => m.map((row) => row.map((v) => v / K));
const CONFIG = {displaylogo: false, responsive: true};

function rows() { return Array.from(document.querySelectorAll('#sentences-table tbody tr')); }

// a number input's value, or null when it is absent or empty
function bound(id) {
  const el = document.getElementById(id);
  return el && el.value !== '' && !isNaN(el.value) ? Number(el.value) : null;
}

function applyFilters() {
  const band = document.getElementById('f-length').value;
  const right = document.getElementById('f-correct');
  const text = document.getElementById('f-search').value.toLowerCase();
  const runs = Array.from(document.querySelectorAll('select.f-run'));
  const aerLo = bound('f-aer-min'), aerHi = bound('f-aer-max');   // a sentence without gold: out
  let shown = 0;
  for (const tr of rows()) {
    let ok = true;
    if (band) {
      const [lo, hi] = band.split('-').map(Number), n = Number(tr.dataset.len);
      ok = n > lo && n <= hi;
    }
    if (ok && right && right.value) ok = (tr.dataset.exact === '1') === (right.value === 'right');
    for (const s of runs) {
      if (ok && s.value) ok = (tr.dataset['r' + s.dataset.run] === '1') === (s.value === 'right');
    }
    if (ok && (aerLo !== null || aerHi !== null)) {
      const a = tr.dataset.aer;
      ok = a !== undefined && a !== '' && (aerLo === null || Number(a) >= aerLo)
           && (aerHi === null || Number(a) <= aerHi);
    }
    if (ok && text) ok = tr.textContent.toLowerCase().includes(text);
    tr.hidden = !ok;
    shown += ok;
  }
  document.getElementById('f-count').textContent = `${shown} of ${rows().length} sentences`;
}

function sortBy(th) {
  const col = th.cellIndex, up = th.dataset.dir !== 'up', body = th.closest('table').tBodies[0];
  th.dataset.dir = up ? 'up' : 'down';
  const key = (tr) => { const c = tr.cells[col], v = c.dataset.v ?? c.textContent;
                        return c.dataset.v === '' ? null : isNaN(v) ? v : Number(v); };
  // a cell whose data-v is empty (no AER: a sentence without gold) last, either way
  const sorted = rows().sort((a, b) => { const ka = key(a), kb = key(b);
    if (ka === null || kb === null) return (ka === null) - (kb === null);
    return (ka > kb ? 1 : ka < kb ? -1 : 0) * (up ? 1 : -1); });
  body.append(...sorted);
}

function openSentence(id) {
  document.querySelectorAll('#sentences-table tr.selected').forEach((tr) => tr.classList.remove('selected'));
  const tr = document.querySelector(`#sentences-table tr[data-sentence-id="${id}"]`);
  if (tr) tr.classList.add('selected');
  if (!EX.page.run) return;
  if (EX.details[id]) return show(EX.details[id]);
  if (!EX.page.detailed.includes(id)) {
    document.getElementById('sentence-head').textContent =
        `sentence ${id}: no maps on this page (only the first ${EX.page.detailed.length} by id)`;
    return;
  }
  const s = document.createElement('script');
  s.src = `data/${id}.js`;
  document.head.appendChild(s);
}

function explorerDetail(d) { EX.details[d.id] = d; show(d); }

function heat(div, z, d, title, opts = {}) {
  const x = d.src_tokens, y = d.tgt_tokens;
  const traces = [{type: 'heatmap', z: z, colorscale: opts.scale || 'Viridis', zmin: opts.zmin ?? 0,
                   zmax: 1, hovertemplate: 'output %{y}, source %{x}: %{z:.3f}<extra></extra>'}];
  if (d.gold && opts.gold) {
    const gx = [], gy = [];
    d.gold.forEach((g, t) => { if (g >= 0 && t < y.length) { gx.push(g); gy.push(t); } });
    traces.push({type: 'scatter', mode: 'markers', x: gx, y: gy, name: 'gold',
                 marker: {symbol: 'square-open', size: 12, color: '#e4572e', line: {width: 2}},
                 hovertemplate: 'gold: output %{y} <- source %{x}<extra></extra>'});
  }
  const ticks = (labels) => ({tickvals: labels.map((_, i) => i), ticktext: labels});
  Plotly.react(div, traces, {title: {text: title, font: {size: 13}}, height: 140 + 16 * y.length,
    margin: {l: 40, r: 10, t: 30, b: 40}, showlegend: false,
    xaxis: {...ticks(x), tickangle: 0}, yaxis: {...ticks(y), autorange: 'reversed'}}, CONFIG);
}

// the reference's word alignment: its word map (rows: target words, columns: source words),
// the gold links as outlined cells (sure: solid, possible: dotted), the extracted links as x
function words(d) {
  const div = document.getElementById('words'), w = d.words;
  if (!div) return;
  div.hidden = !w;
  if (!w) return;
  const cell = ([i, j], dash) => ({type: 'rect', xref: 'x', yref: 'y', x0: i - 0.5, x1: i + 0.5,
    y0: j - 0.5, y1: j + 0.5, line: {color: '#e4572e', width: 2, dash: dash}});
  const shapes = (w.sure || []).map((l) => cell(l, 'solid'))
                               .concat((w.possible || []).map((l) => cell(l, 'dot')));
  const traces = [
    {type: 'heatmap', z: scaled(w.map), colorscale: 'Viridis', zmin: 0, zmax: 1,
     hovertemplate: 'target word %{y}, source word %{x}: %{z:.3f}<extra></extra>'},
    {type: 'scatter', mode: 'markers', x: w.links.map((l) => l[0]), y: w.links.map((l) => l[1]),
     name: 'extracted',
     marker: {symbol: 'x', size: 9, color: '#fff', line: {width: 1, color: '#222'}},
     hovertemplate: 'extracted: target word %{y} <- source word %{x}<extra></extra>'}];
  const figures = w.aer === undefined ? 'no gold links for this sentence'
      : `AER ${w.aer}, precision ${w.precision}, recall ${w.recall}`;
  const ticks = (labels) => ({tickvals: labels.map((_, i) => i), ticktext: labels});
  Plotly.react(div, traces, {
    title: {text: `word alignment of the reference (${w.name}, argmax per target word; `
                  + `gold: squares, extracted: x): ${figures}`, font: {size: 13}},
    height: 160 + 18 * w.tgt.length, margin: {l: 90, r: 10, t: 30, b: 90}, showlegend: false,
    shapes: shapes, xaxis: {...ticks(w.src), tickangle: -45},
    yaxis: {...ticks(w.tgt), autorange: 'reversed'}}, CONFIG);
}

function image(d, t) {
  const [h, w] = d.image_shape, px = atob(d.image), z = [];
  for (let i = 0; i < h; i++) {
    const row = new Array(w);
    for (let j = 0; j < w; j++) row[j] = px.charCodeAt(i * w + j);
    z.push(row);
  }
  const [ch, cw] = d.cell, a = d.attn[t] || [[]];
  // each token's map over the image: transparent where 0, red at the token's largest value
  const over = (m, name) => ({type: 'heatmap', z: scaled(m), x0: cw / 2 - 0.5, dx: cw,
    y0: ch / 2 - 0.5, dy: ch, zmin: 0, zmax: Math.max(1e-3, ...m.flat().map((v) => v / K)),
    colorscale: [[0, 'rgba(228,30,30,0)'], [1, 'rgba(228,30,30,0.85)']], name: name,
    hovertemplate: name + ' %{z:.3f}<extra></extra>'});
  const layout = (title) => ({title: {text: title, font: {size: 13}},
    height: 90 + h * Math.min(6, 1100 / w), margin: {l: 30, r: 10, t: 30, b: 20},
    yaxis: {autorange: 'reversed', scaleanchor: 'x'}});
  const img = {type: 'heatmap', z: z, colorscale: 'Greys', reversescale: true, showscale: false,
               hoverinfo: 'skip'};
  const tok = d.tgt_tokens[t] ?? '';
  Plotly.react('overlay', [img, over(a, 'attention')],
               layout(`attention of output token ${t} '${tok}'`), CONFIG);
  for (const [m, map] of Object.entries(d.maps)) {
    Plotly.react('map-' + m, [img, over(map[t], m)], layout(`${m}, token ${t} '${tok}'`), CONFIG);
  }
  document.getElementById('token-label').textContent = `token ${t + 1} of ${d.tgt_tokens.length}: '${tok}'`;
}

function explicit(d) {
  const layer = document.getElementById('layer'), head = document.getElementById('head');
  if (d.heads && layer.value !== 'mean') {
    heat('attn', scaled(d.heads[+layer.value][+head.value]), d,
         `cross-attention, layer ${layer.value}, head ${head.value}`, {gold: true});
  } else {
    heat('attn', scaled(d.attn), d, d.heads ? 'attention (last layer, mean of heads)'
                                            : 'attention', {gold: true});
  }
}

function show(d) {
  EX.current = d;
  EX.token = 0;
  const row = EX.page.rows[d.id] || {};
  document.getElementById('sentence-head').textContent =
      `sentence ${d.id}: ${row.src ?? ''} -> ${d.output} (reference ${row.ref ?? ''})`;
  document.getElementById('sentence').hidden = false;
  if (EX.page.images) {
    image(d, 0);
  } else {
    explicit(d);
    for (const [m, map] of Object.entries(d.maps)) {
      const signed = Math.min(0, ...map.flat()) < 0;
      heat('map-' + m, scaled(map), d, `${m} (per output token / max |score|)`,
           {gold: true, zmin: signed ? -1 : 0, scale: signed ? 'RdBu' : 'Viridis'});
    }
    words(d);
  }
  const nb = document.querySelector('#nbest tbody');
  nb.innerHTML = '';
  d.nbest.forEach(([o, s], i) => { const tr = nb.insertRow();
    tr.insertCell().textContent = i + 1; tr.insertCell().textContent = o;
    tr.insertCell().textContent = s.toFixed(4); });
  document.body.dataset.shown = d.id;
}

function step(by) {
  const d = EX.current;
  if (!d) return;
  EX.token = Math.max(0, Math.min(d.tgt_tokens.length - 1, EX.token + by));
  image(d, EX.token);
}

function start() {
  document.querySelectorAll('script.figure').forEach((s) => {
    const fig = JSON.parse(s.textContent);
    Plotly.newPlot(s.dataset.div, fig.data, fig.layout, CONFIG);
  });
  document.querySelectorAll('#sentences-table th').forEach((th) => th.addEventListener('click', () => sortBy(th)));
  document.querySelectorAll('.filter').forEach((el) => el.addEventListener('input', applyFilters));
  document.querySelector('#sentences-table tbody').addEventListener('click', (e) => {
    const tr = e.target.closest('tr');
    if (tr && !e.target.closest('a')) openSentence(Number(tr.dataset.sentenceId));
  });
  for (const id of ['layer', 'head']) {
    const el = document.getElementById(id);
    if (el) el.addEventListener('change', () => EX.current && explicit(EX.current));
  }
  const prev = document.getElementById('prev-token'), next = document.getElementById('next-token');
  if (prev) { prev.addEventListener('click', () => step(-1)); next.addEventListener('click', () => step(1)); }
  applyFilters();
  const m = location.hash.match(/sentence=(\d+)/);
  if (m) openSentence(Number(m[1]));
}

// (loaded last in the body: the table is parsed and painted before Plotly is)
if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
else start();
