#!/usr/bin/env bash
# The word-alignment study of docs/alignment.md, end to end (run through launch.sh, which sets
# up the venv):
#   nohup bash launch.sh alignment-study [ROOT] > alignment_study.log 2>&1 &
# Every step is skipped when done or resumes where it stopped, so the same command after a
# kill, or in a later session, goes on (a killed training loses at most its last 500 steps):
#   1. the classical aligners (experiments/studies/aligners.py: eflomal 4/4, IBM 1 and 2), trained
#      on the corpus and scored on the test verses (and on those among the first $NUM, if set);
#   2. per variant of experiments/configs/greek_english.py's get_sweep, in its order: its
#      $SEEDS seeds trained as one population (experiments.sweep --only), then, for the
#      unsupervised variants, each seed's attribution maps on the test verses (evaluate
#      --word_alignment_methods: about 15 minutes a run on 2 cores, 5 of them compiling);
#   3. the sweep report, with word_alignment.md (attention_jax/analysis/alignment_study.py).
# ARCHIVE=DIR keeps what the report reads, without checkpoints: the aligners' JSON and, for each
# run once its maps are done, its config, results, test records, evaluation JSON and log (about
# 200 KB a run), in DIR/greek_english/<variant>/seed_<k>; at the start, a run that ROOT has
# not finished is restored from DIR. So a study whose ROOT is lost between sessions (a fresh
# machine) goes on from DIR, and its table can be rebuilt from DIR alone. ONLY='general dot'
# runs those variants, in that order (an unsupervised variant's maps need its checkpoints, which
# DIR does not keep: start one that a session can train and map before it ends).
set -euo pipefail
case "${1:-}" in
  -h|--help|--helpfull)   # the usage: this header
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
  -*) echo "alignment-study: unknown flag '$1' (usage: bash launch.sh alignment-study [ROOT]," \
        "ROOT a directory; --help)" >&2; exit 2 ;;
esac
[[ $# -le 1 ]] || { echo "alignment-study: one ROOT directory expected, got $# arguments: $*" >&2; exit 2; }
ROOT=${1:-runs}
SEEDS=${SEEDS:-3}
NUM=${NUM:-0}      # the first test verses the attribution methods align (0: all 506)
STEPS=${STEPS:-8}  # integrated gradients' steps
ONLY=${ONLY:-}     # the variants to run, in this order (default: all of get_sweep's, in its order)
METHODS=gradient,gradient_x_input,erasure,integrated_gradients
SWEEP=experiments/configs/greek_english.py
DIR="$ROOT/greek_english"
ALL=$(python -c "from experiments.configs import greek_english as g
print(' '.join(name for name, _ in g.get_sweep()))")
VARIANTS=${ONLY:-$ALL}
for v in $VARIANTS; do
  [[ " $ALL " == *" $v "* ]] ||
    { echo "alignment-study: ONLY names '$v', not a variant of $SWEEP; valid: $ALL" >&2; exit 2; }
done
mkdir -p "$DIR"
say() { echo "[alignment-study $(date -u +%H:%M:%S)] $*"; }
ARCHIVE=${ARCHIVE:-}
KEPT='config.json model_config.json results.json wall_time.json train.log .attention_jax_run
      sentences_test.jsonl eval_test_*.json aligners.json aligners.md'
keep() {   # keep FROM TO: the files of KEPT in directory FROM copied to TO (kept times)
  mkdir -p "$2"
  for name in $KEPT; do
    for f in "$1"/$name; do [[ -f $f ]] && cp -p "$f" "$2/"; done
  done
  return 0
}
archive() {   # archive RUN: a finished run's files kept in ARCHIVE (if set)
  [[ -z $ARCHIVE || ! -f $1/results.json ]] || keep "$1" "$ARCHIVE/greek_english/${1#"$DIR"/}"
}
if [[ -n $ARCHIVE ]]; then   # restore what ROOT lacks
  [[ -f $DIR/aligners.json || ! -f $ARCHIVE/greek_english/aligners.json ]] ||
    keep "$ARCHIVE/greek_english" "$DIR"
  for kept in "$ARCHIVE"/greek_english/*/seed_*; do
    run=$DIR/${kept#"$ARCHIVE"/greek_english/}
    [[ ! -f $kept/results.json || -f $run/results.json ]] ||
      { say "restored from $ARCHIVE: $run"; keep "$kept" "$run"; }
  done
fi

if ! python - "$DIR/aligners.json" "$NUM" <<'PY'
import json, sys
try:
  rows = json.load(open(sys.argv[1]))['rows']
except (OSError, ValueError, KeyError):
  sys.exit(1)
sys.exit(0 if rows and all(sys.argv[2] == '0' or sys.argv[2] in r.get('subsets', {})
                           for r in rows) else 1)
PY
then
  say "the classical aligners -> $DIR/aligners.json"
  python -m experiments.studies.aligners --out="$DIR/aligners.json" --table="$DIR/aligners.md" \
      --eflomal_prefixes=4:4 --raw= $([[ $NUM == 0 ]] || echo "--subsets=$NUM")
fi
[[ -z $ARCHIVE ]] || keep "$DIR" "$ARCHIVE/greek_english"

for v in $VARIANTS; do
  say "variant $v: $SEEDS seeds"
  python -m experiments.sweep --sweep="$SWEEP" --seeds="$SEEDS" --population --root="$ROOT" \
      --only="$v"
  for k in $(seq 1 "$SEEDS"); do
    run="$DIR/$v/seed_$k"
    if [[ $v == guided* ]]; then   # supervised: its explicit maps are the point
      archive "$run"
      continue
    fi
    if ! python - "$run" "$METHODS" "$NUM" <<'PY'
import json, sys
try:
  report = json.load(open(f'{sys.argv[1]}/eval_test_beam1_a0.6.json'))
except (OSError, ValueError):
  sys.exit(1)
done = set(report.get('word_alignment', {})) >= set(sys.argv[2].split(','))
sys.exit(0 if done and report.get('word_alignment_num') == int(sys.argv[3]) else 1)
PY
    then
      say "$run: word alignments of $METHODS on the test verses (first $NUM; 0: all)"
      python -m experiments.evaluate --workdir="$run" --beam=1 --heatmaps=0 \
          --word_alignment_methods="$METHODS" --word_alignment_num="$NUM" --steps="$STEPS"
    fi
    archive "$run"
  done
done
say "the report"
python -m experiments.sweep_report "$DIR"
