"""The report of a sweep directory, on demand.

  python -m experiments.sweep_report runs/score_sweep
"""

from absl import app

from attention_jax import report


def main(argv):
  if len(argv) != 2:
    raise app.UsageError('usage: python -m experiments.sweep_report runs/<sweep>')
  report.write(argv[1])


if __name__ == '__main__':
  app.run(main)
