"""The explorer's page size and open time (docs/performance.md's explorer row):

  python -m experiments.bench.explorer --run=runs/dates_additive --out=/tmp/explore_dates

Writes the run's explorer (timed), then opens OUT/index.html from disk in headless Chromium
(Playwright driving the system's chromium, no network) `--repeats` times in fresh pages and
reports: the folder's size and index.html's, the seconds from navigation to the load event
with the sentence table filled in, and from a click on a row to its heatmap drawn (the median
of the repeats).
"""

import os
import statistics
import time

from absl import flags
from playwright.sync_api import sync_playwright

from attention_jax.analysis import explorer
from experiments import cli

flags.DEFINE_string('run', None, 'A finished run.', required=True)
flags.DEFINE_string('out', '/tmp/explore_bench', 'Where the page is written.')
flags.DEFINE_integer('repeats', 5, 'Page opens timed.', lower_bound=1)
flags.DEFINE_string('chromium', '/usr/bin/chromium', 'The Chromium executable.')
flags.DEFINE_bool('build', True, 'Write the page first (False: time an existing one).')
FLAGS = flags.FLAGS


def folder_bytes(path: str) -> int:
  return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def open_times(index: str, repeats: int, chromium: str) -> tuple[list[float], list[float], int]:
  """-> (seconds to load, seconds from a click to the heatmap, rows) per repeat."""
  loads, clicks, rows = [], [], 0
  with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=chromium, args=['--no-sandbox'])
    for _ in range(repeats):
      page = browser.new_page()
      page.route('**/*', lambda r: r.continue_() if r.request.url.startswith('file://')
                 else r.abort())
      start = time.perf_counter()
      page.goto('file://' + os.path.abspath(index), wait_until='load')
      rows = page.locator('#sentences-table tbody tr').count()
      loads.append(time.perf_counter() - start)
      start = time.perf_counter()
      page.locator('#sentences-table tbody tr').nth(rows // 2).click()
      page.wait_for_function('document.body.dataset.shown !== undefined')
      clicks.append(time.perf_counter() - start)
      page.close()
    browser.close()
  return loads, clicks, rows


def main(argv):
  del argv
  build_s = float('nan')
  if FLAGS.build:
    start = time.perf_counter()
    explorer.explore([FLAGS.run], FLAGS.out, verbose=False)
    build_s = time.perf_counter() - start
  index = os.path.join(FLAGS.out, 'index.html')
  loads, clicks, rows = open_times(index, FLAGS.repeats, FLAGS.chromium)
  mb = lambda n: n / 2 ** 20
  print(f'| explorer of {FLAGS.run} ({rows} sentences) | written in {build_s:.1f} s | '
        f'{mb(folder_bytes(FLAGS.out)):.2f} MB in all, index.html {mb(os.path.getsize(index)):.2f} MB | '
        f'opens in {statistics.median(loads):.2f} s (median of {FLAGS.repeats}; max '
        f'{max(loads):.2f}) | a click draws its maps in {statistics.median(clicks):.2f} s |')


if __name__ == '__main__':
  cli.run(main)
