# Sourced by .ci/run: when CUDA_HOME is unset, sets and exports it
# to the toolkit of the nvcc on PATH. That nvcc may be a wrapper script outside the toolkit, so
# torch would guess wrong: ask nvcc where its toolkit is (setup.py does the same in Python).
if [ -z "${CUDA_HOME:-}" ] && command -v nvcc >/dev/null 2>&1; then
  top=$(nvcc --dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -n 1)
  if [ -n "$top" ]; then
    CUDA_HOME=$(cd "$top" && pwd -P)
    export CUDA_HOME
  fi
fi
