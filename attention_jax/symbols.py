"""The reserved token ids that every tokenizer writes and every decoder reads: padding, the
start and end of a sentence, the unknown symbol. A module of their own, so that decoding
(greedy.py, beam.py, inference.py) does not depend on the data package (TFDS, Babel)."""

PAD, BOS, EOS, UNK = 0, 1, 2, 3
