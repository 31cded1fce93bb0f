#!/bin/sh
# Checks texscope-run on a GPU machine against the Python replay: outputs
# bit-equal, and steady-state wall time per inference of both, side by side
# (bench/native_runner.py's table).  No TVM needed there: build the models
# here first,
#     python bench/native_runner.py --export EXPORTED [model ...]
# then, on the machine (numpy, pyopencl and this checkout's texscope/):
#     runtime/device_check.sh BUILD_DIR EXPORTED [--device N] [--steady N] [--markdown]
# BUILD_DIR holds texscope-run (runtime/build, built elsewhere); where that
# binary does not run, it is rebuilt there with cmake (headers from the
# system, or from $TEXSCOPE_HEADERS: a directory holding CL/ and nlohmann/).
# texscope-run opens the system's libOpenCL.so.1 or, where there is none,
# the drivers that $OCL_ICD_VENDORS (or /etc/OpenCL/vendors) names, directly;
# --device N is the Python replay's numbering, and native_runner.py finds
# the same device in texscope-run's list by its description.
set -eu
if [ $# -lt 2 ]; then
  echo "usage: $0 BUILD_DIR EXPORTED [native_runner.py options]" >&2
  exit 2
fi
build=$1
exported=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
binary=$build/texscope-run

[ -x "$binary" ] || chmod +x "$binary" 2>/dev/null || true
if ! "$binary" --help >/dev/null 2>&1; then
  echo "device_check: $binary does not run here; building it with cmake" >&2
  headers=${TEXSCOPE_HEADERS:-}
  cmake -S "$root/runtime" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    ${headers:+-DOPENCL_HEADERS_DIR=$headers -DNLOHMANN_JSON_DIR=$headers} >&2
  cmake --build "$build" -j 4 >&2
fi

"$binary" --list-devices
python3 -c 'from texscope.opencl.source import devices; [print(f"python {i}: {d.name.strip()} ({d.platform.name.strip()})") for i, d in enumerate(devices())]'
python3 "$root/bench/native_runner.py" --replay "$exported" --binary "$binary" "$@"
