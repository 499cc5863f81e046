"""The attention explorer's HTML (explorer.py drives it): a run's page and several runs' page,
written from explorer_data's dicts, with Plotly's JavaScript and explorer.js beside them.

  write_assets(folder)                             # assets/plotly.min.js, assets/explorer.js
  write_run_page(folder, summary, details, '../')  # index.html + data/<id>.js per sentence
  write_comparison_page(folder, cmp, links)        # index.html of several runs

Static figures (results by length, training curves, a sweep's curves) are Plotly figures made
here; the heatmaps of a clicked sentence are drawn by explorer.js from its data file.
"""

from __future__ import annotations

import base64
import html
import json
import os
from typing import Sequence

import numpy as np
import plotly
import plotly.graph_objects as go
import plotly.io as pio

from attention_jax.analysis import compare as compare_lib
from attention_jax.models import sources

ASSETS = 'assets'
HERE = os.path.dirname(os.path.abspath(__file__))
CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1em 2em;color:#222}
h1{font-size:1.4em} h2{font-size:1.15em;margin-top:1.5em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px}
td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:left}
th{cursor:pointer;background:#f6f6f6} #sentences-table th{position:sticky;top:0}
.num{text-align:right}
#sentences-wrap{max-height:420px;overflow:auto;border:1px solid #ddd}
#sentences-table tbody tr{cursor:pointer} #sentences-table tr:hover{background:#f0f6ff}
#sentences-table tr.selected{background:#dbe9ff} .right{color:#1a7f37} .wrong{color:#c62828}
td.right a{color:#1a7f37;text-decoration:none} td.wrong a{color:#c62828;text-decoration:none}
.maps{display:flex;flex-wrap:wrap;gap:8px} .maps>div{min-width:380px;flex:1}
.maps.stack{flex-direction:column}
.filters{margin:.5em 0;display:flex;gap:1em;align-items:center;flex-wrap:wrap}
.filters input[type=number]{width:5em}
.sig{font-weight:bold;color:#1a7f37}
.figs{display:flex;flex-wrap:wrap} .figs>div{flex:1;min-width:420px}
.note{color:#666;font-size:12px}
"""


# Plotly's cartesian partial bundle (heatmaps, lines, bars: all the explorer draws), the
# official build of the plotly.js version the plotly package ships (PLOTLY_JS; its LICENSE
# beside it): a third of the full bundle, parsed in a third of its time (docs/explorer.md). Without it, the plotly package's full bundle is written instead.
PLOTLY_JS = ('plotly-cartesian.min.js', '4.1.1')


def plotly_js() -> str:
  """The JavaScript of Plotly the pages load: the vendored cartesian bundle when its version
  is the plotly package's, else the package's full bundle."""
  vendored = os.path.join(HERE, PLOTLY_JS[0])
  if os.path.exists(vendored) and plotly.offline.get_plotlyjs_version() == PLOTLY_JS[1]:
    with open(vendored, encoding='utf-8') as f:
      return f.read()
  return plotly.offline.get_plotlyjs()


def write_assets(folder: str) -> str:
  """Plotly's JavaScript (once for every page of the output) and explorer.js -> the folder."""
  path = os.path.join(folder, ASSETS)
  os.makedirs(path, exist_ok=True)
  with open(os.path.join(path, 'plotly.min.js'), 'w', encoding='utf-8') as f:
    f.write(plotly_js())
  with open(os.path.join(HERE, 'explorer.js'), encoding='utf-8') as f:
    script = f.read()
  with open(os.path.join(path, 'explorer.js'), 'w', encoding='utf-8') as f:
    f.write(script)
  return path


def _e(x) -> str:
  return html.escape(str(x))


def _fig(fig: go.Figure, div: str) -> str:
  """A static figure: its div, and its JSON for explorer.js to draw once Plotly has loaded."""
  fig.update_layout(height=320, margin=dict(l=50, r=10, t=40, b=40), template='plotly_white')
  spec = pio.to_json(fig, validate=False).replace('</', '<\\/')
  return (f'<div id="{div}"></div><script type="application/json" class="figure" '
          f'data-div="{div}">{spec}</script>')


def _table(rows: Sequence[dict], cols: Sequence[str], table_id: str = '') -> str:
  head = ''.join(f'<th>{_e(c)}</th>' for c in cols)
  body = ''.join('<tr>' + ''.join(
      f'<td class="num">{v:.4g}</td>' if isinstance(v := r.get(c, ''), float)
      else f'<td>{_e(v)}</td>' for c in cols) + '</tr>' for r in rows)
  ident = f' id="{table_id}"' if table_id else ''
  return f'<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _length_bands(by_length: Sequence[dict]) -> str:
  opts = ''.join(f'<option value="{b["lo"]}-{b["hi"]}">{_e(b["bucket"])} ({b["sentences"]})'
                 '</option>' for b in by_length)
  return (f'<label>source length <select id="f-length" class="filter"><option value="">all'
          f'</option>{opts}</select></label>')


def _page(title: str, body: str, data: dict, root: str) -> str:
  return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>
<style>{CSS}</style>
<script id="explorer-page" type="application/json">{_json(data)}</script>
</head><body>
{body}
<script src="{root}{ASSETS}/plotly.min.js"></script>
<script src="{root}{ASSETS}/explorer.js"></script>
</body></html>
"""


def _json(x) -> str:
  """JSON safe inside a <script> element."""
  return json.dumps(x, ensure_ascii=False, separators=(',', ':')).replace('</', '<\\/')


def _curves(curves: dict) -> str:
  if not curves:
    return '<p class="note">no training log (TensorBoard events) in the run</p>'
  train = go.Figure()
  for tag in ('train/loss', 'validation/loss'):
    if tag in curves:
      steps, values = zip(*curves[tag])
      train.add_scatter(x=steps, y=values, name=tag, mode='lines+markers')
  train.update_layout(title='loss', xaxis_title='step', yaxis_type='log')
  val = go.Figure()
  for tag, points in curves.items():
    if tag.startswith('validation/') and tag != 'validation/loss' and 'perplexity' not in tag:
      steps, values = zip(*points)
      val.add_scatter(x=steps, y=values, name=tag.split('/', 1)[1], mode='lines+markers')
  val.update_layout(title='validation', xaxis_title='step')
  return _fig(train, 'curve-loss') + _fig(val, 'curve-validation')


def run_body(s: dict, methods: Sequence[str], beam: int, detailed: int, back: str = '') -> str:
  """The run page's HTML: results, curves, the sentence table and the sentence panel."""
  metrics = [k for k in ('exact_match', 'bleu', 'chrf', 'wer', 'per', 'alignment_accuracy')
             if any(k in b for b in s['by_length'])]
  by_len = go.Figure()
  for m in metrics:
    by_len.add_scatter(x=[b['bucket'] for b in s['by_length']], y=[b[m] for b in s['by_length']],
                       name=m, mode='lines+markers')
  by_len.update_layout(title=f'{s["split"]} metrics by source length', xaxis_title='source length')
  cols = ['split'] + [c for c in ('loss', 'perplexity', 'exact_match', 'bleu', 'chrf', 'wer', 'per',
                                  'alignment_accuracy', 'token_accuracy', 'sentences')
                      if any(c in r for r in s['results'])]
  words = s.get('word_map')   # the map whose word alignments are scored (explorer_words)
  rows = []
  for r in s['sentences']:
    ok = 'right' if r['exact'] else 'wrong'
    aer = '' if r.get('aer') is None else r['aer']   # '': a sentence without gold
    aer_attr = f' data-aer="{aer}"' if words else ''
    aer_cell = f'<td class="num" data-v="{aer}">{"–" if aer == "" else aer}</td>' if words else ''
    rows.append(
        f'<tr data-sentence-id="{r["id"]}" data-len="{r["len"]}" data-exact="{r["exact"]}"'
        f'{aer_attr}><td class="num">{r["id"]}</td><td>{_e(r["src"])}</td>'
        f'<td>{_e(r["ref"])}</td><td>{_e(r["hyp"])}</td><td class="{ok}" data-v="{r["exact"]}">'
        f'{"✓" if r["exact"] else "✗"}</td><td class="num">{r["bleu"]}</td>'
        f'<td class="num">{r["chrf"]}</td>{aer_cell}<td class="num">{r["len"]}</td></tr>')
  heads = ''
  if s['arch'] == 'transformer':
    heads = ('<label>layer <select id="layer"><option value="mean">last, mean of heads</option>'
             + ''.join(f'<option value="{i}">{i}</option>' for i in range(s['layers']))
             + '</select></label> <label>head <select id="head">'
             + ''.join(f'<option value="{i}">{i}</option>' for i in range(s['heads']))
             + '</select></label>')
  if sources.lookup(s['source']).grid:
    maps = ('<div><button id="prev-token">◀ token</button> <button id="next-token">token ▶'
            '</button> <span id="token-label"></span></div><div class="maps stack">'
            '<div id="overlay"></div>'
            + ''.join(f'<div id="map-{m}"></div>' for m in methods) + '</div>')
  else:
    maps = ('<div class="maps"><div id="attn"></div>'
            + ''.join(f'<div id="map-{m}"></div>' for m in methods) + '</div>')
  note = (f'<p class="note">maps of the first {detailed} of {len(s["sentences"])} sentences '
          'by id</p>' if detailed < len(s['sentences']) else '')
  aer_filter = aer_head = aer_note = ''
  if words:
    aer_filter = ('<label>AER (%) from <input id="f-aer-min" class="filter" type="number" '
                  'min="0" max="100" step="any"> to <input id="f-aer-max" '
                  'class="filter" type="number" min="0" max="100" step="any"></label>')
    aer_head = '<th>AER</th>'
    maps += '<div id="words"></div>'
    aer_note = (f'; AER: the reference\'s word alignment by {_e(words)} (teacher-forced, '
                'each target word linked to its argmax source word) against the gold')
  return f"""{back}<h1>{_e(s['name'])}</h1>
<p>{_e(s['task'])}, {_e(s['variant'] or s['arch'])}, split {_e(s['split'])},
best step {s['step']}; maps: the greedy output's attention (as the run's records),
{_e(', '.join(methods) or 'no attribution')}; n-best: beam {beam}{aer_note}.
<span class="note">{_e(s['workdir'])}</span></p>
<h2>The run</h2>{_table(s['results'], cols, 'results')}
<div class="figs">{_fig(by_len, 'by-length')}{_curves(s['curves'])}</div>
<h2>Sentences</h2>
<div class="filters">{_length_bands(s['by_length'])}
<label>outputs <select id="f-correct" class="filter"><option value="">all</option>
<option value="right">right (exact)</option><option value="wrong">wrong</option></select></label>
{aer_filter}<label>search <input id="f-search" class="filter" type="search"></label>
<span id="f-count"></span></div>{note}
<div id="sentences-wrap"><table id="sentences-table"><thead><tr><th>id</th><th>source</th>
<th>reference</th><th>output</th><th>exact</th><th>BLEU</th><th>chrF</th>{aer_head}<th>length</th>
</tr></thead>
<tbody>{''.join(rows)}</tbody></table></div>
<h2>One sentence</h2><p id="sentence-head" class="note">click a sentence</p>
<div id="sentence" hidden>{heads}{maps}
<h3>n-best (beam {beam})</h3><table id="nbest"><thead><tr><th>#</th><th>output</th><th>score</th>
</tr></thead><tbody></tbody></table></div>"""


def _detail_js(d: dict) -> str:
  d = dict(d)
  if 'image' in d:
    img = np.ascontiguousarray(d['image'])
    d['image'], d['image_shape'] = base64.b64encode(img.tobytes()).decode(), list(img.shape)
  return f'explorerDetail({_json(d)});\n'


def write_run_page(folder: str, summary: dict, details: dict[int, dict], root: str,
                   methods: Sequence[str], beam: int, back: str = '') -> str:
  """index.html and data/<id>.js into `folder` (made); root: the path from it to the assets."""
  os.makedirs(os.path.join(folder, 'data'), exist_ok=True)
  for i, d in details.items():
    with open(os.path.join(folder, 'data', f'{i}.js'), 'w', encoding='utf-8') as f:
      f.write(_detail_js(d))
  data = {'run': summary['name'], 'images': sources.lookup(summary['source']).grid,
          'detailed': sorted(details),
          'rows': {r['id']: {'src': r['src'], 'ref': r['ref']} for r in summary['sentences']}}
  path = os.path.join(folder, 'index.html')
  with open(path, 'w', encoding='utf-8') as f:
    f.write(_page(summary['name'], run_body(summary, methods, beam, len(details), back),
                  data, root))
  return path


def _mark(row: dict) -> str:
  """compare's significance (every known Holm-adjusted p under 0.05) as stars, by the
  largest of those p."""
  ps = [row[k] for k in ('p_seeds_holm', 'p_sentences_holm') if np.isfinite(row[k])]
  if not row['significant'] or not ps:
    return ''
  return '***' if max(ps) < 0.001 else '**' if max(ps) < 0.01 else '*'


def comparison_body(c: dict, links: dict[str, str]) -> str:
  """Several runs: links, the comparisons table, by-length curves, who got each sentence."""
  runs = c['runs']
  link_list = ''.join(f'<li><a href="{_e(links[r])}">{_e(r)}</a></li>' for r in runs)
  parts = [f'<h1>{len(runs)} runs of {_e(c["task"])} ({_e(c["split"])} split)</h1>',
           f'<h2>Runs</h2><ul id="run-links">{link_list}</ul>']
  cmp = c['compare']
  if cmp is not None:
    cols = ['variant', 'seeds'] + [f'{m}_{k}' for m in cmp['metrics']
                                   for k in ('mean', 'ci_lo', 'ci_hi')]
    p = compare_lib.format_p
    rows = ''.join(
        f'<tr data-variant="{_e(r["variant"])}"><td>{_e(r["variant"])}</td>'
        f'<td>{_e(r["metric"])}</td><td class="num">{r["diff"]:+.2f}</td>'
        f'<td class="num">{p(r["p_seeds_holm"])}</td>'
        f'<td class="num">{p(r["p_sentences_holm"])}</td>'
        f'<td class="sig">{_mark(r)}</td><td>{_e(r["sentence"])}</td></tr>'
        for r in cmp['comparisons'])
    parts.append(
        f'<h2>Comparisons (baseline {_e(cmp["baseline"])})</h2>'
        f'{_table(cmp["summary"], cols, "summary")}'
        f'<p></p><table id="comparisons"><thead><tr><th>variant</th><th>metric</th><th>diff</th>'
        '<th>p seeds (Holm)</th><th>p sentences (Holm)</th><th>sig.</th><th>in words</th></tr>'
        f'</thead><tbody>{rows}</tbody></table><p class="note">significant (every Holm-adjusted '
        'p below 0.05, over seeds and over sentences): *, ** below 0.01, *** below 0.001</p>')
    metric = cmp['metrics'][0]
    fig = go.Figure()
    for name, bands in cmp['by_length'].items():
      up = [b['ci_hi'] - b[metric] if np.isfinite(b['ci_hi']) else 0 for b in bands]
      down = [b[metric] - b['ci_lo'] if np.isfinite(b['ci_lo']) else 0 for b in bands]
      fig.add_scatter(x=[b['bucket'] for b in bands], y=[b[metric] for b in bands], name=name,
                      mode='lines+markers',
                      error_y=dict(type='data', symmetric=False, array=up, arrayminus=down))
    fig.update_layout(title=f'{metric} by source length (95% interval over seeds)',
                      xaxis_title='source length')
    parts.append(_fig(fig, 'by-length'))
  selects = ''.join(
      f'<label>{_e(r)} <select class="f-run filter" data-run="{k}"><option value="">any</option>'
      '<option value="right">right</option><option value="wrong">wrong</option></select></label>'
      for k, r in enumerate(runs))
  rows = []
  for s in c['sentences']:
    flags = ' '.join(f'data-r{k}="{v}"' for k, v in enumerate(s['right']))
    cells = ''.join(
        f'<td class="{"right" if v else "wrong"}" data-v="{v}" title="{_e(h)}">'
        f'<a href="{_e(links[r])}#sentence={s["id"]}">{"✓" if v else "✗"}</a></td>'
        for r, v, h in zip(runs, s['right'], s['hyp']))
    rows.append(f'<tr data-sentence-id="{s["id"]}" data-len="{s["len"]}" {flags}>'
                f'<td class="num">{s["id"]}</td><td>{_e(s["src"])}</td><td>{_e(s["ref"])}</td>'
                f'<td class="num">{s["len"]}</td>{cells}</tr>')
  heads = ''.join(f'<th>{_e(r)}</th>' for r in runs)
  parts.append(
      f'<h2>Sentences: which runs got each right (exact match)</h2><div class="filters">{selects}'
      '<select id="f-length" class="filter" hidden><option value=""></option></select>'
      '<label>search <input id="f-search" class="filter" type="search"></label> '
      '<span id="f-count"></span></div><div id="sentences-wrap"><table id="sentences-table">'
      f'<thead><tr><th>id</th><th>source</th><th>reference</th><th>length</th>{heads}</tr></thead>'
      f'<tbody>{"".join(rows)}</tbody></table></div>')
  return '\n'.join(parts)


def write_comparison_page(folder: str, c: dict, links: dict[str, str]) -> str:
  path = os.path.join(folder, 'index.html')
  with open(path, 'w', encoding='utf-8') as f:
    f.write(_page(f'{len(c["runs"])} runs', comparison_body(c, links), {'run': None}, ''))
  return path
