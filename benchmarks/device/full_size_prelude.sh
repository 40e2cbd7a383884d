# shellcheck shell=bash
# Sourced by the full-size device scripts (faults_full_size.sh, kept_weights.sh), from the repository's root: the
# wheels on PYTHONPATH, and M, where the 47 GB model is written (/dev/shm where it has room, else /tmp).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
M=/dev/shm/models
[ "$(df --output=avail -B1G /dev/shm | tail -n 1)" -gt 60 ] || M=/tmp/models
mkdir -p "$M" "$OUT"
