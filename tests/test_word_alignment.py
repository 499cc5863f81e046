"""Word alignments as a first-class output: Pharaoh files written and read (0- or 1-indexed,
links outside a sentence refused in one line), the subword-to-word rule on hand-made cases,
link extraction and symmetrisation, and AER equal to nltk's on random link sets."""

import os
import random

import numpy as np
import pytest

from attention_jax.data import pharaoh
from attention_jax.data import tokenizers as tok_lib
from attention_jax.implicit import word_alignment as wa


# ---- Pharaoh files --------------------------------------------------------------------------
def test_pharaoh_round_trip_keeps_sure_and_possible_links_zero_and_one_indexed(tmp_path):
  rng = random.Random(0)
  aligns = []
  for _ in range(20):
    sure = {(rng.randrange(9), rng.randrange(7)) for _ in range(rng.randrange(6))}
    possible = {(rng.randrange(9), rng.randrange(7)) for _ in range(rng.randrange(3))}
    aligns.append(pharaoh.Alignment.of(sure, possible))
  aligns.append(pharaoh.Alignment.of(()))   # an empty line
  for one in (False, True):
    path = str(tmp_path / f'links{one}')
    pharaoh.write(path, aligns, one_indexed=one)
    assert pharaoh.read(path, one_indexed=one) == aligns
    assert not os.path.exists(path + '.tmp')
  assert open(str(tmp_path / 'linksTrue')).read().splitlines()[0] != \
      open(str(tmp_path / 'linksFalse')).read().splitlines()[0] or not aligns[0].possible
  assert pharaoh.parse('0-0 2-1 1?3') == pharaoh.Alignment(
      frozenset({(0, 0), (2, 1)}), frozenset({(0, 0), (2, 1), (1, 3)}))
  assert pharaoh.format_links({(2, 1), (0, 0)}) == '0-0 2-1'


def test_a_link_outside_its_sentence_is_one_line_naming_file_and_line(tmp_path):
  path = str(tmp_path / 'gold')
  open(path, 'w').write('0-0 1-1\n0-0 2-1\n')
  with pytest.raises(ValueError, match=r'gold line 2: link 2-1 is outside the sentence \(2 '
                                       r'source words, 3 target words'):
    pharaoh.read(path, sizes=[(2, 2), (2, 3)])
  open(path, 'w').write('0-0 x\n')
  with pytest.raises(ValueError, match=r"gold line 1: 'x' is not a link"):
    pharaoh.read(path)
  with pytest.raises(ValueError, match='2 lines of links for 3 sentence pairs'):
    pharaoh.check([pharaoh.parse('0-0')] * 2, [(1, 1)] * 3, path='gold')


def test_a_one_indexed_file_read_without_the_flag_is_refused_and_read_with_it(tmp_path):
  path = str(tmp_path / 'gold1')
  sizes = [(3, 3), (2, 4), (4, 2), (3, 3)]
  one = ['1-1 2-3 3-2', '1-2 2-4', '4-1 3-2', '2-2 3-3']
  open(path, 'w').write('\n'.join(one) + '\n')
  # a link at word n: is outside, with the hint
  with pytest.raises(ValueError, match=r'gold1 line 1: link 2-3 is outside .* is the file '
                                       r'1-indexed\? \(then say so: --one_indexed\)'):
    pharaoh.read(path, sizes=sizes)
  got = pharaoh.read(path, sizes=sizes, one_indexed=True)
  assert got[0].sure == {(0, 0), (1, 2), (2, 1)}
  # no link reaches word n, but none uses word 0 either: refused as 1-indexed
  open(path, 'w').write('1-1\n1-1\n2-1\n')
  with pytest.raises(ValueError, match='no link of its 3 linked lines uses word 0: the file '
                                       'looks 1-indexed'):
    pharaoh.read(path, sizes=[(3, 3)] * 3)
  with pytest.raises(ValueError, match="link '0-1' has a word 0 in a file read as 1-indexed"):
    pharaoh.parse('0-1', one_indexed=True)


# ---- subwords to words ----------------------------------------------------------------------
def test_token_words_follow_the_first_non_space_character_of_each_token():
  text = 'in  “the beginning,” was'
  char = tok_lib.train_tokenizer('char', [text])
  tw = tok_lib.token_words(char, text)
  # i n _ _ “ t h e _ b e g ... , ” _ w a s
  assert tw.tolist() == [0, 0, -1, -1, 1, 1, 1, 1, -1] + [2] * 11 + [-1, 3, 3, 3]
  word = tok_lib.train_tokenizer('word', [text])
  assert tok_lib.token_words(word, text).tolist() == [0, 1, 2, 3]


def test_sentencepiece_spans_cover_the_text_and_map_pieces_to_words():
  texts = ['the beginning was the word', 'and the word was with god', 'in the beginning'] * 30
  sp = tok_lib.train_tokenizer('sentencepiece', texts, vocab_size=40)
  text = 'in the beginning was the word, “with god”'
  spans = sp.spans(text)
  assert len(spans) == len(sp.encode(text))
  assert ''.join(text[b:e] for b, e in spans) == text   # contiguous, the whole text
  tw = tok_lib.token_words(sp, text)
  words = text.split()
  for (b, e), w in zip(spans, tw):
    piece = text[b:e]
    if piece.strip():
      assert piece.strip() in words[w], (piece, words[w])
    else:
      assert w == -1


def test_subword_map_to_words_averages_target_rows_and_sums_source_columns():
  # target words: [t0 t0 t1], source words: [s0 s1 s1 -], plus an EOS row and column
  m = np.array([[0.1, 0.2, 0.3, 0.4, 9],
                [0.3, 0.3, 0.2, 0.2, 9],
                [0.5, 0.0, 0.5, 0.0, 9],
                [9, 9, 9, 9, 9]])
  w = wa.to_words(m, tgt_words=np.array([0, 0, 1]), src_words=np.array([0, 1, 1, -1]))
  np.testing.assert_allclose(w, [[0.2, 0.5], [0.5, 0.5]])
  # a word with no tokens gets a zero row / column when the word counts are given
  w = wa.to_words(m, np.array([0, 0, 2]), np.array([0, 2, 2, -1]), num_tgt=3, num_src=3)
  np.testing.assert_allclose(w, [[0.2, 0.0, 0.5], [0, 0, 0], [0.5, 0, 0.5]])


def test_argmax_and_threshold_extraction():
  w = np.array([[0.7, 0.2, 0.1], [0.0, 0.0, 0.0], [0.3, 0.3, 0.4]])
  assert wa.argmax_links(w) == {(0, 0), (2, 2)}             # the all-zero row links nothing
  assert wa.threshold_links(w, 0.3) == {(0, 0), (0, 2), (1, 2), (2, 2)}
  assert wa.extract(w, 'threshold', 0.5) == {(0, 0)}
  with pytest.raises(ValueError, match="unknown extraction 'best'; valid: argmax, threshold"):
    wa.extract(w, 'best')


def test_grow_diag_final_adds_neighbours_of_the_intersection_then_unaligned_words():
  fwd = {(0, 0), (1, 1), (2, 3)}
  rev = {(0, 0), (1, 2), (3, 3)}
  assert wa.symmetrise(fwd, rev, 'intersection') == {(0, 0)}
  assert wa.symmetrise(fwd, rev, 'union') == fwd | rev
  # (1, 1) is a diagonal neighbour of (0, 0) with both words unaligned; then (1, 2) next to
  # (1, 1) has target word 2 unaligned; (2, 3) next to (1, 2); (3, 3) has source 3 unaligned
  assert wa.symmetrise(fwd, rev, 'grow-diag-final') == {(0, 0), (1, 1), (1, 2), (2, 3), (3, 3)}
  gdf = wa.symmetrise({(0, 0), (4, 4)}, {(0, 0)}, 'grow-diag-final')
  assert gdf == {(0, 0), (4, 4)}            # final: a forward link of two unaligned words
  with pytest.raises(ValueError, match='valid: intersection, union, grow-diag-final'):
    wa.symmetrise(fwd, rev, 'gdfa')


def test_aer_precision_recall_equal_nltks_on_random_link_sets():
  from nltk.translate import metrics  # pylint: disable=g-import-not-at-top
  rng = random.Random(1)
  for _ in range(200):
    n = rng.randrange(1, 6)
    pairs = [(i, j) for i in range(n) for j in range(n + 1)]
    sure = set(rng.sample(pairs, rng.randrange(0, len(pairs) // 2 + 1)))
    possible = sure | set(rng.sample(pairs, rng.randrange(0, 3)))
    hyp = set(rng.sample(pairs, rng.randrange(0, len(pairs) // 2 + 1)))
    if not sure and not hyp:
      continue
    f = wa.score([pharaoh.Alignment.of(sure, possible)], [hyp])
    assert f['aer'] == pytest.approx(100 * metrics.alignment_error_rate(sure, hyp, possible))
    if hyp:
      assert f['precision'] == pytest.approx(100 * len(hyp & possible) / len(hyp))
    if sure:
      assert f['recall'] == pytest.approx(100 * len(hyp & sure) / len(sure))


def test_corpus_aer_pools_counts_over_sentences_and_bands_by_source_length():
  golds = [pharaoh.Alignment.of({(0, 0), (1, 1)}), pharaoh.Alignment.of({(0, 1)})]
  hyps = [{(0, 0)}, {(0, 1), (1, 1)}]
  f = wa.score(golds, hyps)
  # |A| = 3, |S| = 3, |A∩S| = 2: AER = 1 - 4/6
  assert f['aer'] == pytest.approx(100 / 3) and f['precision'] == pytest.approx(200 / 3)
  bands = wa.score_by_length(golds, hyps, [12, 3])
  assert [(b['lo'], b['sentences']) for b in bands] == [(1, 1), (11, 1)]
  assert bands[0]['aer'] == pytest.approx(100 * (1 - 2 / 3))
  assert wa.sentence_aer(golds[0], hyps[0]) == pytest.approx(100 * (1 - 2 / 3))


def test_by_word_counts_each_target_forms_gold_links_hits_and_misses():
  """Hand-worked: 'The cat, sat' with gold 0-0 1-1 1-2 (and a possible 2?2) and links 0-0 0-1
  2-2: 'the' 1 of 1 found; 'cat' (its comma stripped) missed, its link wrong; 'sat' linked
  only to a possible link: a hit for precision, a miss for recall."""
  gold = pharaoh.Alignment.of({(0, 0), (1, 1), (1, 2)}, {(2, 2)})
  rows = {r['word']: r for r in wa.by_word([gold], [{(0, 0), (0, 1), (2, 2)}], ['The cat, sat'])}
  assert rows['the'] == {'word': 'the', 'sure': 1, 'links': 1, 'hits': 1, 'recall': 100.0,
                         'precision': 100.0, 'missed_share': 0.0}
  assert (rows['cat']['hits'], rows['cat']['precision'], rows['cat']['missed_share']) == (0, 0.0, 50.0)
  assert (rows['sat']['recall'], rows['sat']['precision']) == (0.0, 100.0)
  assert [r['word'] for r in wa.by_word([gold], [{(0, 0), (0, 1), (2, 2)}], ['The cat, sat'])] \
      == ['cat', 'sat', 'the']       # most missed first, ties by word
