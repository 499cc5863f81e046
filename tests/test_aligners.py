"""The classical aligners (attention_jax/analysis/aligners.py) on a made-up parallel corpus
whose true links are known: each recovers most of them, in the right orientation, and the
symmetrisations nest. A few seconds (nltk's IBM models are pure Python, on 200 pairs)."""

import collections
import random
import sys

import pytest

from attention_jax.analysis import aligners
from attention_jax.data.pharaoh import Alignment
from attention_jax.implicit import word_alignment

# AER (percent) each aligner stays under on corpus() with its defaults (grow-diag-final);
# measured: eflomal 1.0, ibm1 10.6, ibm2 5.4
MAX_AER = {'eflomal': 5.0, 'ibm1': 15.0, 'ibm2': 10.0}


def needs(name: str) -> None:
  if name == 'eflomal':
    pytest.importorskip('eflomal')


def corpus(n: int = 200, seed: int = 0, noisy: bool = False):
  """n sentence pairs of a made-up word-for-word language, with their true links: 40 source
  words, the first 8 translated by two target words; an unaligned source word 'ka' (p = 0.5)
  and target word 'the' (always); neighbouring source words swapped (p = 0.3). Targets are
  mostly longer than their sources, so links read transposed (target, source) fail. noisy:
  the same corpus with target words capitalised or given a trailing comma at random (other
  forms of the same words)."""
  rng, noise = random.Random(seed), random.Random(seed + 1)
  lexicon = {f's{k}': [f't{k}', f'u{k}'] if k < 8 else [f't{k}'] for k in range(40)}
  src_lines, tgt_lines, truth = [], [], []
  for _ in range(n):
    src = rng.choices(sorted(lexicon), k=rng.randint(3, 8))
    if rng.random() < 0.5:
      src.insert(rng.randint(0, len(src)), 'ka')
    order = list(range(len(src)))
    for i in range(len(order) - 1):
      if rng.random() < 0.3:
        order[i], order[i + 1] = order[i + 1], order[i]
    tgt, links = ['the'], set()
    for i in order:
      for word in lexicon.get(src[i], []):
        links.add((i, len(tgt)))
        tgt.append(word)
    if noisy:
      tgt = [w.capitalize() if noise.random() < 0.3 else w + ',' if noise.random() < 0.3
             else w for w in tgt]
    src_lines.append(' '.join(src))
    tgt_lines.append(' '.join(tgt))
    truth.append(Alignment.of(links))
  return src_lines, tgt_lines, truth


@pytest.mark.parametrize('name', list(aligners.ALIGNERS))
def test_each_aligner_recovers_the_true_links_in_source_target_orientation(name):
  needs(name)
  src, tgt, truth = corpus()
  each = aligners.align_each(name, src, tgt)
  assert set(each) == set(aligners.DIRECTIONS)
  aer = word_alignment.score(truth, each['grow-diag-final'])['aer']
  assert aer < MAX_AER[name], (name, aer)
  transposed = [frozenset((j, i) for i, j in links) for links in each['grow-diag-final']]
  assert word_alignment.score(truth, transposed)['aer'] > 60   # measured 76
  for s, t, fwd, rev in zip(src, tgt, each['forward'], each['reverse']):
    ns, nt = len(s.split()), len(t.split())
    assert all(i < ns and j < nt for i, j in fwd | rev)
    # forward: a target word has at most one source word; reverse: the other way round
    assert max(collections.Counter(j for _, j in fwd).values(), default=0) <= 1
    assert max(collections.Counter(i for i, _ in rev).values(), default=0) <= 1
  # the reverse model cannot give a source word its second target word: lower recall
  assert (word_alignment.score(truth, each['reverse'])['recall']
          < word_alignment.score(truth, each['forward'])['recall'])


@pytest.mark.parametrize('name', list(aligners.ALIGNERS))
def test_symmetrisations_nest_between_the_two_directions(name):
  needs(name)
  src, tgt, _ = corpus(n=120, seed=1, noisy=True)
  each = aligners.align_each(name, src, tgt)
  for how in word_alignment.SYMMETRISATIONS:
    assert each[how] == [word_alignment.symmetrise(f, r, how)
                         for f, r in zip(each['forward'], each['reverse'])]
  grew = 0
  for k in range(len(src)):
    fwd, rev = each['forward'][k], each['reverse'][k]
    assert each['intersection'][k] == fwd & rev and each['union'][k] == fwd | rev
    assert each['intersection'][k] <= each['grow-diag-final'][k] <= each['union'][k]
    grew += each['intersection'][k] < each['grow-diag-final'][k]
  assert grew > len(src) / 2


@pytest.mark.parametrize('name', list(aligners.ALIGNERS))
def test_align_gives_one_direction_and_lines_without_words_no_links(name):
  needs(name)
  src, tgt, truth = corpus(n=150, seed=2)
  links = aligners.align(name, src + ['s1 s2', ''], tgt + ['', 't1 u1'], direction='forward')
  assert len(links) == len(src) + 2 and links[-2:] == [frozenset(), frozenset()]
  assert word_alignment.score(truth, links[:-2])['recall'] > 80


def test_normalising_words_unites_their_forms_and_keeps_positions():
  assert [aligners.normalise_word(w) for w in ['Christ,', '“Blessed', 'Lord’s', '—', '(Jesus).']
          ] == ['christ', 'blessed', 'lord’s', '—', 'jesus']
  src, tgt, _ = corpus()
  _, noisy, _ = corpus(noisy=True)   # the same words in other forms
  assert noisy != tgt and aligners.words(noisy, True) == aligners.words(tgt, True)
  clean = aligners.align('ibm1', src, tgt)
  assert aligners.align('ibm1', src, noisy) == clean   # nltk's EM is deterministic
  assert aligners.align('ibm1', src, noisy, normalise=False) != clean


def test_eflomal_stemming_options_reach_eflomal():
  pytest.importorskip('eflomal')
  src, tgt, truth = corpus(n=150, seed=3)
  # cut to 1 character, the target words t0..t39 become one word 't': far worse links
  aer = {n: word_alignment.score(truth, aligners.align('eflomal', src, tgt,
                                                       target_prefix_len=n))['aer']
         for n in (0, 1)}
  assert aer[0] < MAX_AER['eflomal'] < 20 < aer[1], aer


def test_bad_names_and_options_are_one_line_errors_naming_the_valid_ones():
  src, tgt, _ = corpus(n=5)
  with pytest.raises(ValueError, match=r"unknown aligner 'giza'; valid aligners: eflomal, ibm1, "
                                       r'ibm2$'):
    aligners.align('giza', src, tgt)
  with pytest.raises(ValueError, match=r"unknown option 'prefix' of aligner 'ibm1'; valid "
                                       r'options: direction, normalise, iterations$'):
    aligners.align('ibm1', src, tgt, prefix=4)
  with pytest.raises(ValueError, match=r"unknown direction 'both'; valid directions: forward, "
                                       r'reverse, intersection, union, grow-diag-final$'):
    aligners.align('ibm1', src, tgt, direction='both')
  with pytest.raises(ValueError, match=r'iterations must be an integer >= 1, not 0$'):
    aligners.align('ibm2', src, tgt, iterations=0)
  with pytest.raises(ValueError, match=r'5 source lines but 4 target lines'):
    aligners.align('ibm1', src, tgt[:4])


def test_a_missing_eflomal_says_what_to_install(monkeypatch):
  monkeypatch.setitem(sys.modules, 'eflomal', None)   # import eflomal raises ImportError
  src, tgt, _ = corpus(n=5)
  with pytest.raises(aligners.AlignerUnavailable,
                     match=r"^eflomal is not installed: pip install 'eflomal==2\.0\.0'"):
    aligners.align('eflomal', src, tgt)


def test_the_bench_scores_each_row_on_the_first_n_test_verses_too(monkeypatch):
  """experiments/studies/aligners.py --subsets=N: each row also holds its figures on the test
  verses with gold among the first N (what a study aligned with its slow maps), equal to
  scoring those verses alone."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  from experiments.studies import aligners as bench  # pylint: disable=g-import-not-at-top
  src, tgt, truth = corpus(60)
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()
  monkeypatch.setattr(flags.FLAGS, 'subsets', ['7'])
  monkeypatch.setattr(flags.FLAGS, 'repeats', 1)
  first = 40                                    # the last 20 pairs are the "test" verses
  keep = [k for k in range(20) if k != 3]       # test verse 3 has no gold
  golds = [truth[first + k] for k in keep]
  lengths = [len(src[first + k].split()) for k in keep]
  rows = bench.setting_rows('ibm1', 'iterations 5', {'iterations': 5}, src, tgt, first, keep,
                            golds, lengths)
  row = {r['direction']: r for r in rows}['forward']
  sub = row['subsets']['7']
  assert sub['sentences'] == 6 and row['sentences'] == 19      # verses 0-6 but 3
  want = word_alignment.score(golds[:6], [row['links'][k] for k in keep[:6]])
  assert sub['aer'] == pytest.approx(want['aer']) and sub['recall'] == pytest.approx(want['recall'])
  assert sub['aer'] != pytest.approx(row['aer'])
