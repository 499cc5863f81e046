"""The explorer's pages in a real browser (the `browser` tier: headless Chromium driven by
Playwright, the system's chromium; skipped where none is found). Tiny runs are trained once
for the module (reverse: an RNN and a Transformer, compared on one page; image_dates: an image
run; a task with word-level gold: a small Bible wheel's verses); each page is opened from disk
(file://) with every other request aborted and recorded, and checked: its rows, a clicked
sentence's heatmap against the Translator's own weights (to 1e-3), the filters, the layer and
head selector, the image overlay stepped through the tokens, the comparison view, the AER
filter and the word heatmap with its gold squares, and no console error or network request."""

import os
import shutil

import numpy as np
import pytest

from attention_jax import workdir as workdir_lib
from attention_jax.analysis import explorer, explorer_data
from attention_jax.evaluation import records
from attention_jax.implicit import word_alignment as wa
from attention_jax.implicit import word_maps
from attention_jax.loaded import loading
from attention_jax.training import train
from experiments.configs import common, image_dates, reverse

import helpers
from helpers import smoke

CHROMIUM = shutil.which('chromium') or shutil.which('chromium-browser')
try:
  from playwright.sync_api import sync_playwright   # pylint: disable=g-import-not-at-top
except ImportError:
  sync_playwright = None
if not CHROMIUM or sync_playwright is None:
  pytest.skip('browser tier: no Chromium found (apt-get install -y chromium) or no playwright',
              allow_module_level=True)

pytestmark = pytest.mark.browser


@pytest.fixture(scope='module')
def pages(tmp_path_factory, data_dir):
  """{'rnn', 'transformer', 'image': (run page, workdir), 'sweep': (comparison page, [runs])}."""
  tmp = tmp_path_factory.mktemp('explorer')
  rnn, tf, img = (str(tmp / n) for n in ('reverse_rnn', 'reverse_transformer', 'image'))
  # the RNN trained long enough to get some sentences right and some wrong (about 1 in 5):
  # the right / wrong filters then have both to tell apart
  train.train_and_evaluate(smoke(reverse, data_dir, **{
      'train.steps': 300, 'train.eval_every': 300, 'train.checkpoint_every': 300}), rnn)
  cfg = smoke(reverse, data_dir)
  for key, value in common.switch(cfg, arch='transformer').items():
    cfg.model[key.split('.', 1)[1]] = value
  train.train_and_evaluate(cfg, tf)
  train.train_and_evaluate(smoke(image_dates, data_dir), img)
  explorer.explore([rnn, tf], str(tmp / 'cmp'), beam=2, verbose=False)
  explorer.explore(img, str(tmp / 'img'), beam=2, verbose=False)
  run_page = lambda name: str(tmp / 'cmp' / 'runs' / name / 'index.html')
  return {'rnn': (run_page('reverse_rnn'), rnn), 'transformer': (run_page('reverse_transformer'), tf),
          'image': (str(tmp / 'img' / 'index.html'), img),
          'sweep': (str(tmp / 'cmp' / 'index.html'), [rnn, tf])}


WORD_TASK = 'explorer_bible_page'


@pytest.fixture(scope='module')
def word_page(tmp_path_factory):
  """(run page, workdir) of a 30-step smoke run on a small Bible wheel's verses (word-level
  gold; tests/test_align.py's pattern)."""
  tmp = tmp_path_factory.mktemp('explorer_words')
  workdir, _, _ = helpers.bible_run(tmp, WORD_TASK, word_alignment='')
  return explorer.explore(workdir, str(tmp / 'page'), methods=('gradient',), beam=1,
                          verbose=False), workdir


@pytest.fixture(scope='module')
def browser():
  with sync_playwright() as p:
    b = p.chromium.launch(executable_path=CHROMIUM, args=['--no-sandbox'])
    yield b
    b.close()


@pytest.fixture
def open_page(browser):
  """open_page(path) -> a page loaded from disk; afterwards: no console error, no request
  other than file://."""
  errors, requests, opened = [], [], []

  def go(path):
    page = browser.new_page(viewport={'width': 1300, 'height': 900})
    page.on('console', lambda m: errors.append(m.text) if m.type == 'error' else None)
    page.on('pageerror', lambda e: errors.append(str(e)))

    def route(r):
      if r.request.url.startswith('file://'):
        r.continue_()
      else:
        requests.append(r.request.url)
        r.abort()
    page.route('**/*', route)
    page.goto('file://' + path, wait_until='load')
    opened.append(page)
    return page
  yield go
  for page in opened:
    page.close()
  assert not errors, errors
  assert not requests, requests


def visible(page) -> int:
  return page.locator('#sentences-table tbody tr:not([hidden])').count()


def show(page, k: int):
  """Clicks the row of sentence k and waits for its maps."""
  page.locator(f'#sentences-table tr[data-sentence-id="{k}"]').click()
  page.wait_for_function(f'document.body.dataset.shown === "{k}"')


def test_run_page_rows_heatmap_values_and_filters(pages, open_page):
  path, workdir = pages['rnn']
  _, recs = records.read(workdir_lib.Run(workdir).sentences_path('test'))
  page = open_page(path)
  rows = page.locator('#sentences-table tbody tr')
  assert rows.count() == len(recs) == 32
  assert sorted(int(i) for i in rows.evaluate_all('rs => rs.map(r => r.dataset.sentenceId)')) \
      == list(range(32))
  t = loading.load(workdir)
  for k in (3, 17):
    show(page, k)
    source = page.locator(f'tr[data-sentence-id="{k}"] td').nth(1).inner_text()
    _, weights, _, _ = t.attend(source)
    shown = np.array(page.evaluate("document.getElementById('attn').data[0].z"))
    assert shown.shape == weights.shape
    np.testing.assert_allclose(shown, weights, atol=1e-3)
    gold = page.evaluate("document.getElementById('attn').data[1].x")   # reverse: a gold
    assert len(gold) > 0
    for m in explorer.DEFAULT_METHODS:
      assert np.array(page.evaluate(f"document.getElementById('map-{m}').data[0].z")).shape \
          == weights.shape
    assert page.locator('#nbest tbody tr').count() == 2
  # filters: right / wrong (the run gets some of each), a length band, text search
  right = {r['id'] for r in recs if r['exact']}
  assert 0 < len(right) < len(recs), len(right)
  shown = lambda: {int(i) for i in page.locator('#sentences-table tbody tr:not([hidden])')
                   .evaluate_all('rs => rs.map(r => r.dataset.sentenceId)')}
  page.select_option('#f-correct', 'right')
  assert shown() == right
  page.select_option('#f-correct', 'wrong')
  assert shown() == {r['id'] for r in recs} - right
  page.select_option('#f-correct', '')
  band = page.locator('#f-length option').nth(1).get_attribute('value')
  lo, hi = map(int, band.split('-'))
  page.select_option('#f-length', band)
  assert visible(page) == sum(lo < r['src_len'] <= hi for r in recs) > 0
  page.select_option('#f-length', '')
  source = page.locator('tr[data-sentence-id="5"] td').nth(1).inner_text()
  page.fill('#f-search', source)
  assert 1 <= visible(page) < 32
  assert page.locator('tr[data-sentence-id="5"]').is_visible()
  page.fill('#f-search', '')
  assert visible(page) == 32
  page.locator('#sentences-table th', has_text='length').click()   # sorted by length
  lengths = [int(x) for x in page.locator('#sentences-table tbody tr td:last-child').all_inner_texts()]
  assert lengths == sorted(lengths)


def test_transformer_layer_and_head_selector(pages, open_page):
  path, workdir = pages['transformer']
  page = open_page(path)
  show(page, 4)
  source = page.locator('tr[data-sentence-id="4"] td').nth(1).inner_text()
  t = loading.load(workdir)
  _, heads, _, _ = t.attend_heads(source)           # [N, H, T, S]
  _, mean, _, _ = t.attend(source)
  z = lambda: np.array(page.evaluate("document.getElementById('attn').data[0].z"))
  np.testing.assert_allclose(z(), mean, atol=1e-3)
  layers = page.locator('#layer option').count() - 1
  assert layers == heads.shape[0] and page.locator('#head option').count() == heads.shape[1]
  for layer, head in ((0, 0), (layers - 1, heads.shape[1] - 1)):
    page.select_option('#layer', str(layer))
    page.select_option('#head', str(head))
    np.testing.assert_allclose(z(), heads[layer, head], atol=1e-3)


def test_image_run_overlay_steps_through_the_tokens(pages, open_page):
  path, workdir = pages['image']
  page = open_page(path)
  show(page, 2)
  t = loading.load(workdir)
  task = explorer_data.load_task(workdir_lib.Run(workdir).config(),
                                          (t.src_tok, t.tgt_tok))
  _, weights, _, tokens = t.attend(task.image('test', 2))    # [T, H', W']
  overlay = lambda: page.evaluate("document.getElementById('overlay').data")
  data = overlay()
  image = np.array(data[0]['z'])
  np.testing.assert_allclose(image / 255, task.image('test', 2), atol=1 / 255)
  np.testing.assert_allclose(np.array(data[1]['z']), weights[0], atol=1e-3)
  for k in range(1, min(3, len(tokens))):
    page.click('#next-token')
    np.testing.assert_allclose(np.array(overlay()[1]['z']), weights[k], atol=1e-3)
    assert f'token {k + 1} of {len(tokens)}' in page.inner_text('#token-label')
  page.click('#prev-token')
  assert f'token {min(3, len(tokens)) - 1}' in page.inner_text('#token-label')


def test_comparison_view(pages, open_page):
  path, runs = pages['sweep']
  recs = [records.read(workdir_lib.Run(r).sentences_path('test'))[1] for r in runs]
  page = open_page(path)
  assert page.locator('#sentences-table tbody tr').count() == 32
  assert page.locator('#comparisons tbody tr').count() >= 1
  links = page.locator('#run-links a').evaluate_all('as => as.map(a => a.getAttribute("href"))')
  assert len(links) == 2
  for link in links:
    assert os.path.exists(os.path.join(os.path.dirname(path), link))
  for a, b in ((0, 1), (1, 0)):   # "A wrong, B right"
    page.select_option(f'select.f-run[data-run="{a}"]', 'wrong')
    page.select_option(f'select.f-run[data-run="{b}"]', 'right')
    assert visible(page) == sum(not x['exact'] and y['exact'] for x, y in zip(recs[a], recs[b]))
  page.select_option('select.f-run[data-run="0"]', '')
  page.select_option('select.f-run[data-run="1"]', '')
  assert visible(page) == 32
  assert page.evaluate("document.getElementById('by-length').data.length") == 2
  # a run's cell links to its page with the sentence open
  page.locator('tr[data-sentence-id="7"] td a').first.click()
  page.wait_for_function('document.body.dataset.shown === "7"')


def test_aer_filter_sort_and_word_heatmap_with_gold_squares(word_page, open_page):
  path, workdir = word_page
  t = loading.load(workdir)
  task = explorer_data.load_task(workdir_lib.Run(workdir).config(), (t.src_tok, t.tgt_tok))
  gold = task.word_gold('test')
  got = word_maps.align_split(t.graphdef, t.params, task, 'test', ['attention'])
  links = dict(zip(got['rows'], got['links']['attention']))
  aer = {k: round(wa.sentence_aer(gold[k], links[k]), 1) for k in links if gold[k] is not None}
  page = open_page(path)
  n = page.locator('#sentences-table tbody tr').count()
  assert n == len(task.texts('test')) and len(aer) > 1
  # the AER filter: at least x, then between x and y, then cleared
  values = sorted(aer.values())
  lo = values[len(values) // 2]
  page.fill('#f-aer-min', str(lo))
  assert visible(page) == sum(a >= lo for a in aer.values())
  for k, a in aer.items():
    assert page.locator(f'tr[data-sentence-id="{k}"]').is_visible() == (a >= lo), k
  page.fill('#f-aer-min', str(values[0]))
  page.fill('#f-aer-max', str(lo))
  assert visible(page) == sum(values[0] <= a <= lo for a in aer.values())
  page.fill('#f-aer-min', '')
  page.fill('#f-aer-max', '')
  assert visible(page) == n
  page.locator('#sentences-table th', has_text='AER').click()      # sorted by AER
  shown = [float(x) for x in page.locator('#sentences-table tbody tr td:nth-child(8)')
           .all_inner_texts() if x != '–']
  assert shown == sorted(aer.values())
  # a sentence's word heatmap: its word map, a square per gold link, an x per extracted link
  for k in sorted(aer)[:2]:
    show(page, k)
    src, ref = task.texts('test')[k]
    words = page.evaluate("document.getElementById('words').data")
    assert np.array(words[0]['z']).shape == (len(ref.split()), len(src.split()))
    assert set(zip(words[1]['x'], words[1]['y'])) == links[k]
    shapes = page.evaluate("document.getElementById('words').layout.shapes")
    assert len(shapes) == len(gold[k].possible)
    assert {(round(s['x0'] + 0.5), round(s['y0'] + 0.5)) for s in shapes} == gold[k].possible
    assert page.locator('#words .shapelayer path').count() == len(gold[k].possible)
    title = page.evaluate("document.getElementById('words').layout.title.text")
    assert f'AER {aer[k]}' in title and 'precision' in title and 'recall' in title
    ticks = page.evaluate("document.getElementById('words').layout.xaxis.ticktext")
    assert ticks == src.split()
