#!/usr/bin/env bash
# attention_jax launcher.
#
#   bash launch.sh                      train the default experiment (dates, additive, Bahdanau)
#   bash launch.sh test [pytest args]   run the test suite
#   bash launch.sh train CONFIG [flags] run any experiment, e.g.
#        bash launch.sh train experiments/configs/reverse.py --config.model.score=general
#   bash launch.sh data-info CONFIG     prepare a dataset offline and print its statistics
#   bash launch.sh sweep SWEEP_FILE [--seeds=N]   run every variant of a sweep (e.g.
#                                       experiments/configs/length_study.py), under N seeds each
#   bash launch.sh sweep SWEEP_FILE --executor=ray [--ray_address=auto] [--trial_gpus=1]
#                                       ... as Ray tasks on a Ray cluster (local or joined)
#   bash launch.sh compare RUN_OR_GROUP ... [--split=test] [--metric=bleu,exact_match]
#                                       means, intervals and significance tests between runs
#   bash launch.sh length-study         the length experiment: none/additive/general/dot on reverse
#   bash launch.sh alignment-study [ROOT]   the word-alignment study (docs/alignment.md): Greek-English
#                                       variants x 3 seeds, their maps, eflomal and IBM; resumable
#   bash launch.sh evaluate --workdir=runs/X [--beam=5]   evaluate a checkpoint (by length, alignment)
#   bash launch.sh evaluate --workdir=runs/X --src=F --ref=G [--beam=5]   ... on any text files
#   bash launch.sh translate --workdir=runs/X [--input=F] [--output=G] [--beam=5] [--nbest=N]
#                                       translate lines of stdin or a file (see experiments/translate.py)
#   bash launch.sh attribute --workdir=runs/X [--methods=gradient,integrated_gradients] [--input=F]
#                                       implicit attention (gradients) beside the explicit weights:
#                                       figures, and against gold alignments (experiments/attribute.py)
#   bash launch.sh align --workdir=runs/X --src=F --tgt=G --out=LINKS [--map=attention|gradient|...]
#                                       [--gold=H] word alignments of a parallel text as Pharaoh
#                                       links, scored against gold links (experiments/align.py)
#   bash launch.sh explore RUN [RUN ...] [--split=test] [--out=DIR] [--methods=gradient] [--beam=5]
#                                       an offline page (index.html) of a run, or of runs / a sweep
#                                       compared sentence by sentence: heatmaps, filters (docs/explorer.md)
#   bash launch.sh bench [--quick]      speed benchmark: train tok/s, FLOP/s, compile time, decoding
#                                       (writes benchmark.json; --configs --scores --decoders select;
#                                       --attribution=all: the attribution methods' speed instead)
#   bash launch.sh profile [--config=char --score=general --decoder=luong]
#                                       where one train step's time goes, per XLA operation
#   bash launch.sh docs [--serve]       build the documentation site (docs/ -> site/; mkdocs.yml)
#   bash launch.sh train CONFIG --workdir=W --coordinator HOST:PORT --num-processes N --process-id I
#                                       one process of a multi-host run (start one per host)
#
# Every command first creates .venv (if absent) and installs the package into it.
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(pwd)
VENV="$ROOT/.venv"

setup() {
  local stamp="$VENV/.installed"
  if [[ ! -x "$VENV/bin/python" ]]; then
    echo "[launch] creating $VENV" >&2
    python3 -m venv "$VENV"
  fi
  # Re-install when pyproject.toml changed since the last install.
  if [[ ! -f "$stamp" || pyproject.toml -nt "$stamp" ]]; then
    # with uv (parallel downloads: a fresh venv in ~35 s here against ~100 s with pip); with
    # pip, said, where no uv wheel installs (the same packages: uv reads pyproject.toml too)
    if [[ ! -x "$VENV/bin/uv" ]] && ! "$VENV/bin/pip" install -q --disable-pip-version-check \
        uv >/dev/null 2>&1; then
      echo "[launch] uv could not be installed here: installing with pip (slower)" >&2
    fi
    echo "[launch] installing attention_jax[test] into $VENV (about a minute the first time)" >&2
    if [[ -x "$VENV/bin/uv" ]]; then
      # (compiled to bytecode now, as pip does: else every first import compiles it, in each of
      # the processes a first test run starts at once)
      "$VENV/bin/uv" pip install -q --compile-bytecode --python "$VENV/bin/python" -e ".[test]"
    else
      # (this machine's pip config lists local index dirs that may be absent: drop that noise)
      "$VENV/bin/pip" install -q --disable-pip-version-check -e ".[test]" 2>&1 \
        | { grep -v "is ignored: it is neither a file nor a directory" || true; }
    fi
    touch "$stamp"
  fi
  # this repository's own sources compiled to bytecode (0.1-0.4 s), as uv did for the venv:
  # where PYTHONDONTWRITEBYTECODE is set (this machine) every process of a command, and each of
  # the test suite's, would compile them again (the suite writing its bytecode: 29 CPU-s and
  # 16 s less here, 2026-12-05)
  # (a read-only checkout or a file that does not compile: said by the import, not here)
  "$VENV/bin/python" -m compileall -q -j 0 attention_jax experiments tests >/dev/null 2>&1 || true
  export PATH="$VENV/bin:$PATH"
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
  export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
  # glibc malloc on transparent huge pages (glibc >= 2.35; older ones ignore it): XLA's CPU
  # buffers then take fewer TLB misses; the char train step ran 8-16% faster here.
  export GLIBC_TUNABLES=${GLIBC_TUNABLES:-glibc.malloc.hugetlb=1}
}

# Multi-host: `--coordinator HOST:PORT --num-processes N --process-id I` (any command that
# trains) become the absl flags of experiments/main.py; on SLURM / TPU pods the cluster
# environment is read instead (jax.distributed.initialize()).
multihost_args() {
  ARGS=()
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --coordinator|--num-processes|--process-id)
        [[ $# -ge 2 ]] || { echo "$1 needs a value" >&2; exit 2; }
        flag=${1#--}; ARGS+=("--${flag//-/_}=$2"); shift 2 ;;
      *) ARGS+=("$1"); shift ;;
    esac
  done
}

usage() {   # the commands, one line each: this file's header
  sed -n '3,/^# Every command/p' "$0" | sed -e 's/^# \{0,1\}//' -e '/^Every command/d'
}

# `CMD --help` / `--helpfull` of a command whose first argument is a file: the entry point's
# own help (usage, flags, an example), without the file
wants_help() { [[ ${1:-} == --help || ${1:-} == --helpfull ]]; }

cmd=${1:-main}
[[ $# -gt 0 ]] && shift
case "$cmd" in
  --help|-h|help) usage; exit 0 ;;
esac
multihost_args "$@"
set -- ${ARGS[@]+"${ARGS[@]}"}
case "$cmd" in
  main)
    setup
    exec python -m experiments.main --config=experiments/configs/dates.py \
      --workdir=runs/dates_additive "$@"
    ;;
  test)
    setup
    # one pytest-xdist worker per core (ATTENTION_JAX_TEST_WORKERS=0: none); each test module
    # stays on one worker, so its module fixtures (data sets, reference runs) are made once;
    # modules are handed out longest first (tests/conftest.py FIRST), not by test count
    exec python -m pytest -q -n "${ATTENTION_JAX_TEST_WORKERS:-auto}" --dist loadscope \
      --no-loadscope-reorder "$@"
    ;;
  train)
    setup
    if wants_help "$@"; then exec python -m experiments.main "$1"; fi
    [[ $# -ge 1 ]] || { echo "usage: bash launch.sh train CONFIG [--flag=value ...]" >&2; exit 2; }
    config=$1; shift
    exec python -m experiments.main --config="$config" "$@"
    ;;
  sweep)
    setup
    if wants_help "$@"; then exec python -m experiments.sweep "$1"; fi
    [[ $# -ge 1 ]] || { echo "usage: bash launch.sh sweep SWEEP_FILE[:arg] [--seeds=N] [--parallel=N]" >&2; exit 2; }
    sweep=$1; shift
    exec python -m experiments.sweep --sweep="$sweep" "$@"
    ;;
  alignment-study)
    setup
    exec bash experiments/studies/alignment_study.sh "$@"
    ;;
  length-study)
    setup
    exec python -m experiments.sweep --sweep=experiments/configs/length_study.py "$@"
    ;;
  compare)
    setup
    exec python -m experiments.compare "$@"
    ;;
  evaluate)
    setup
    exec python -m experiments.evaluate "$@"
    ;;
  translate)
    setup
    exec python -m experiments.translate "$@"
    ;;
  attribute)
    setup
    exec python -m experiments.attribute "$@"
    ;;
  align)
    setup
    exec python -m experiments.align "$@"
    ;;
  explore)
    setup
    exec python -m experiments.explore "$@"
    ;;
  bench)
    setup
    exec python -m experiments.benchmark "$@"
    ;;
  profile)
    setup
    exec python -m experiments.profile_step "$@"
    ;;
  docs)
    setup
    if [[ ${1:-} == --serve ]]; then shift; exec mkdocs serve "$@"; fi
    exec mkdocs build --strict "$@"
    ;;
  data-info)
    setup
    if wants_help "$@"; then exec python -m experiments.data_info "$1"; fi
    [[ $# -ge 1 ]] || { echo "usage: bash launch.sh data-info CONFIG" >&2; exit 2; }
    config=$1; shift
    exec python -m experiments.data_info --config="$config" "$@"
    ;;
  *)
    { echo "unknown command '$cmd'; the commands:"; usage; } >&2
    exit 2
    ;;
esac
