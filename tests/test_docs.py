"""The documentation: the site builds with warnings as errors (`mkdocs build --strict`: a
broken link, a page missing from the navigation or an API reference that does not resolve
fails), the README stays a short entry point, and nothing in the repository points outside it."""

import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _build(root: str, site: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, '-m', 'mkdocs', 'build', '--strict', '--site-dir', site],
                        cwd=root, capture_output=True, text=True, timeout=300)


def test_the_docs_build_with_warnings_as_errors_and_reference_the_api(tmp_path):
  proc = _build(ROOT, str(tmp_path / 'site'))
  assert proc.returncode == 0, proc.stderr[-3000:]
  with open(tmp_path / 'site' / 'api' / 'index.html', encoding='utf-8') as f:
    api = f.read()
  for name in ('attention_jax.loaded.loading.load', 'attention_jax.models.scores.ScaledDot',
               'attention_jax.decoding.beam.beam_search',
               'attention_jax.models.multihead.MultiHeadAttention'):
    assert f'id="{name}"' in api, name


@pytest.mark.extended   # a second build of the site (half a minute): after the suite, in CI
def test_a_broken_link_fails_the_build(tmp_path):
  """The check above can fail: the same site with one link to a missing page does not build."""
  for name in ('docs', 'attention_jax'):
    shutil.copytree(os.path.join(ROOT, name), tmp_path / name,
                    ignore=shutil.ignore_patterns('__pycache__'))
  shutil.copy(os.path.join(ROOT, 'mkdocs.yml'), tmp_path / 'mkdocs.yml')
  with open(tmp_path / 'docs' / 'usage.md', 'a', encoding='utf-8') as f:
    f.write('\nSee [the missing page](no_such_page.md).\n')
  proc = _build(str(tmp_path), str(tmp_path / 'site'))
  assert proc.returncode != 0 and 'no_such_page.md' in proc.stderr, proc.stderr[-2000:]


def test_the_readme_is_a_short_entry_point_whose_doc_links_exist():
  with open(os.path.join(ROOT, 'README.md'), encoding='utf-8') as f:
    readme = f.read()
  assert len(readme.splitlines()) < 250
  for link in {part.split(')')[0] for part in readme.split('](docs/')[1:]}:
    page, _, anchor = link.partition('#')
    assert os.path.exists(os.path.join(ROOT, 'docs', page)), link
    if anchor:   # a heading of that page, as Markdown makes its id: lower case, '-' for spaces
      with open(os.path.join(ROOT, 'docs', page), encoding='utf-8') as f:
        ids = {re.sub(r'[^a-z0-9 _-]', '', line.lstrip('#').strip().lower()).replace(' ', '-')
               for line in f if line.startswith('#')}
      assert anchor in ids, (link, sorted(ids))


def test_nothing_points_outside_the_repository():
  """Docstrings and docs cite papers and the project's own docs, never the design notes
  outside the repository."""
  outside = ('..' + '/shared', 'shared' + '/design')
  files = subprocess.run(['git', 'ls-files'], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
  found = []
  for name in files:
    if not name.endswith(('.py', '.md', '.sh', '.toml', '.yml', '.yaml', '.txt')):
      continue
    with open(os.path.join(ROOT, name), encoding='utf-8', errors='replace') as f:
      for i, line in enumerate(f, 1):
        if any(o in line for o in outside):
          found.append(f'{name}:{i}: {line.strip()}')
  assert not found, found
