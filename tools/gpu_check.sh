#!/usr/bin/env bash
# Check the CUDA back-end on a machine with an NVIDIA GPU, in one go and within 8 minutes:
# install the project with its cuda and test extras into a fresh virtual environment, run
# every GPU-marked test and the CUDA tests, install what the benchmark compares against
# (cuda.core, CuPy, Numba-CUDA, and PyTorch + Triton while time allows; each one missing is
# named and skipped), then run tools/bench_cuda.py (our launch against raw cuLaunchKernel,
# cuda.core's launch, CuPy's RawKernel, Numba-CUDA). Everything goes to a log, which ends in
# one table of every step's result; the exit status is non-zero when a test or a benchmark
# bar fails.
#
# Usage: tools/gpu_check.sh [LOG]        (LOG default: build/gpu_check/gpu_check.log)
# Environment: PYTHON (default python3); GPU_CHECK_BUDGET, seconds for everything (default
# 470); GPU_CHECK_EXTRAS=0 skips the optional libraries; GPU_CHECK_VENV, the environment's
# directory (default build/gpu_check/venv, removed first). NVRTC's disk cache goes to
# build/gpu_check/nvrtc-cache, emptied first.
set -uo pipefail
cd "$(dirname "$0")/.."
WORK=build/gpu_check
mkdir -p "$WORK"
LOG=${1:-$WORK/gpu_check.log}
mkdir -p "$(dirname "$LOG")"
BUDGET=${GPU_CHECK_BUDGET:-470}
PY=${PYTHON:-python3}
VENV=${GPU_CHECK_VENV:-$WORK/venv}
# NVRTC's output on disk (specializer.backends.cuda._diskcache): a fresh directory per run, so
# the tests and the benchmark compile what they measure and never read the user's cache
export SPECIALIZER_CACHE_DIR="$PWD/$WORK/nvrtc-cache"
rm -rf "$SPECIALIZER_CACHE_DIR"
exec > >(tee "$LOG") 2>&1

# fail fast where no package index can be reached
export PIP_DEFAULT_TIMEOUT=${PIP_DEFAULT_TIMEOUT:-15} PIP_RETRIES=${PIP_RETRIES:-1}
start=$SECONDS
left() { echo $((BUDGET - (SECONDS - start))); }
step() { printf '\n== %s (t=%ss)\n' "$*" "$((SECONDS - start))"; }
failed=()
summary=()  # rows of the closing table: "step|result"
row() { summary+=("$1|$2"); }
trim() { local s="$1"; s="${s#"${s%%[![:space:]]*}"}"; printf '%s' "${s%"${s##*[![:space:]]}"}"; }

step "machine"
nvidia-smi || echo "nvidia-smi not found"
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
major=${driver%%.*}
# cuda-python 13 needs a driver of the CUDA 13 series (580 or newer); older ones get 12.x.
if [[ "$major" =~ ^[0-9]+$ ]] && [ "$major" -lt 580 ]; then cu=12; else cu=13; fi
echo "driver ${driver:-unknown}: using the CUDA $cu packages; $($PY --version 2>&1)"
# an offline machine (no package index) skips pip and apt at once instead of waiting them out
online=1
timeout 10 "$PY" -c "import urllib.request as u; u.urlopen('https://pypi.org/simple/pip/', timeout=8)" \
    >/dev/null 2>&1 || online=0
if [ "$online" = 1 ] && ! command -v valgrind >/dev/null && [ "$(id -u)" = 0 ] &&
    command -v apt-get >/dev/null; then
    # for the benchmark's instruction counts; in the background, while pip works
    (timeout 150 apt-get update -qq && timeout 100 apt-get install -y -qq valgrind) \
        >"$WORK/apt.log" 2>&1 &
    apt_pid=$!
fi

step "install the project: pip install -e .[cuda,test]"
rm -rf "$VENV"
constraints=()
if [ "$cu" = 12 ]; then
    printf 'cuda-python<13\ncuda-bindings<13\ncuda-toolkit<13\n' >"$WORK/constraints.txt"
    constraints=(-c "$WORK/constraints.txt")
fi
installed=0
if [ "$online" = 0 ]; then
    echo "no package index reachable: not installing"
elif "$PY" -m venv --system-site-packages "$VENV"; then
    PYV="$VENV/bin/python"
    PIP=("$PYV" -m pip install -q --disable-pip-version-check)
    timeout 240 "${PIP[@]}" -e ".[cuda,test]" "${constraints[@]}" && installed=1
fi
if [ "$installed" = 0 ]; then
    # No venv module, or no package index (an offline machine): use $PY as it is, with the
    # checkout on the path, if it has what the tests need.
    echo "installing failed: trying $PY with the checkout on PYTHONPATH"
    PYV="$PY"
    PIP=("$PY" -m pip install -q --disable-pip-version-check --user --break-system-packages)
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    if ! "$PY" -c "import cuda.bindings.driver, cuda.bindings.nvrtc, numpy, jinja2, pytest"; then
        echo "FAILED: cannot install the project, and $PY lacks cuda-bindings, numpy, jinja2 or pytest"
        exit 2
    fi
fi
"$PYV" - <<'EOF' || failed+=("CUDA unavailable, so the GPU tests skipped")
import sys
from specializer.backends import cuda
print("CUDA available:", cuda.available(), cuda.unavailable_reason() or "")
if not cuda.available():
    sys.exit(1)
print(cuda.current_context(), "NVRTC archs:", cuda.supported_archs())
EOF

step "tests: every GPU-marked one, then the CUDA tests without a GPU"
# the files holding GPU-marked tests (the others need pyopencl, which a GPU machine may lack)
mapfile -t gpu_files < <(grep -l "pytest.mark.gpu" tests/*.py)
timeout 200 "$PYV" -m pytest -p no:cacheprovider -m gpu -rs -v "${gpu_files[@]}" |
    tee "$WORK/gpu_tests.txt"
[ "${PIPESTATUS[0]}" = 0 ] || failed+=("GPU tests")
row "GPU tests (pytest -m gpu ${gpu_files[*]})" "$(tail -n 1 "$WORK/gpu_tests.txt" | tr -d '=|')"
timeout 90 "$PYV" -m pytest -p no:cacheprovider -q tests/test_cuda.py | tee "$WORK/cuda_tests.txt"
[ "${PIPESTATUS[0]}" = 0 ] || failed+=("CUDA tests")
row "CUDA tests without a GPU (tests/test_cuda.py)" "$(tail -n 1 "$WORK/cuda_tests.txt" | tr -d '=|')"

if [ "${GPU_CHECK_EXTRAS:-1}" = 1 ] && [ "$online" = 1 ]; then
    step "optional libraries for the benchmark (time left: $(left)s)"
    t=$(($(left) - 200))  # keep time for PyTorch + Triton and the benchmark
    if [ "$t" -gt 20 ]; then
        timeout "$t" "${PIP[@]}" "${constraints[@]}" "cuda-core[cu$cu]" "cupy-cuda${cu}x" \
            "numba-cuda[cu$cu]" || echo "(some of cuda.core, CuPy, Numba-CUDA not installed)"
    fi
    t=$(($(left) - 130))  # keep time for the benchmark
    if [ "$t" -gt 45 ]; then
        timeout "$t" "${PIP[@]}" "${constraints[@]}" torch triton ||
            echo "(PyTorch + Triton not installed within ${t}s)"
    else
        echo "(no time left to install PyTorch + Triton)"
    fi
fi
if [ -n "${apt_pid:-}" ]; then
    wait "$apt_pid" || echo "(valgrind not installed: see $WORK/apt.log)"
fi

for lib in cuda.core cupy numba.cuda torch triton; do
    if "$PYV" -c "import $lib" 2>/dev/null; then row "$lib" "installed"; else
        row "$lib" "not installed: its benchmark row is skipped"; fi
done

step "benchmark: tools/bench_cuda.py (time left: $(left)s)"
t=$(($(left) - 5))
if [ "$t" -gt 30 ]; then
    timeout "$t" "$PYV" tools/bench_cuda.py --rounds 30 --per-round 500 | tee "$WORK/bench.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || failed+=("benchmark")
    # the launch rows (ns/launch, x raw) and every bar, into the closing table
    while IFS= read -r line; do
        IFS='|' read -r _ name ns ratio _ <<<"$line"
        row "launch: $(trim "$name")" "$(trim "$ns") ns, $(trim "$ratio")x raw cuLaunchKernel"
    done < <(grep -E '^\| [^|]+ \| [0-9]+ \| [0-9.]+ \|$' "$WORK/bench.txt")
    while IFS= read -r line; do row "benchmark bar" "${line#bar: }"; done \
        < <(grep -E '^bar:' "$WORK/bench.txt")
else
    echo "no time left for the benchmark"
    failed+=("benchmark (no time)")
fi

step "done in $((SECONDS - start))s"
printf '\n| check | result |\n|---|---|\n'
for r in "${summary[@]}"; do printf '| %s | %s |\n' "${r%%|*}" "${r#*|}"; done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "FAILED: ${failed[*]}"
    exit 1
fi
echo "all passed"
