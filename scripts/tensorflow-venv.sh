#!/usr/bin/env bash
# Finds or creates the cached Python virtual environment with TensorFlow (tensorflow-cpu, else
# tensorflow) that the round-trip tests through TensorFlow itself use, and prints its python's
# path on stdout (nothing else goes to stdout).
#
#   scripts/tensorflow-venv.sh              find the venv, installing it if it is missing
#   scripts/tensorflow-venv.sh --find-only  find it, never install (what the tests do)
#
# Where: $MS_TF_VENV, else ${XDG_CACHE_HOME:-$HOME/.cache}/monitored-session/tf-venv.
# pip only ever sees the machine's configured local package index (`pip config list`: the first
# of index-url/extra-index-url becomes --index-url, so pip never falls back to the public one;
# find-links is passed on), with --retries 0 and a time limit ($MS_TF_INSTALL_TIMEOUT_SECS,
# default 900). On any failure it prints the reason on stderr and exits non-zero: callers skip
# visibly, they never fail because of it.
set -uo pipefail

find_only=0
case "${1:-}" in
  --find-only) find_only=1 ;;
  "") ;;
  *) echo "usage: $0 [--find-only]" >&2; exit 2 ;;
esac

venv="${MS_TF_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/monitored-session/tf-venv}"
python="$venv/bin/python"
# Written last by a successful install, so a half-made venv is never taken for a ready one.
marker="$venv/.monitored-session-ready"
fail() { echo "tensorflow-venv: $*" >&2; exit 1; }

ready() { [ -f "$marker" ] && [ -x "$python" ]; }

if ready; then echo "$python"; exit 0; fi
[ "$find_only" -eq 1 ] && fail "no TensorFlow venv at $venv (create it with scripts/tensorflow-venv.sh, as .ci/run does)"

command -v python3 >/dev/null 2>&1 || fail "python3 is not installed"
command -v pip >/dev/null 2>&1 || command -v pip3 >/dev/null 2>&1 || fail "pip is not installed (needed to read the configured package index)"
pip_cmd=$(command -v pip || command -v pip3)

# The configured local index: `pip config list` prints lines like  global.extra-index-url='a b'.
config=$("$pip_cmd" config list 2>/dev/null)
setting() { printf '%s\n' "$config" | sed -n "s/^[^.]*\.$1='\(.*\)'\$/\1/p" | tr ' ' '\n' | grep -v '^$'; }
mapfile -t indexes < <({ setting index-url; setting extra-index-url; } | awk '!seen[$0]++')
mapfile -t links < <(setting find-links | awk '!seen[$0]++')
[ "${#indexes[@]}" -gt 0 ] || [ "${#links[@]}" -gt 0 ] || fail "no package index configured (pip config list shows no index-url, extra-index-url or find-links): not trying the public index"

index_args=()
if [ "${#indexes[@]}" -gt 0 ]; then
  index_args+=(--index-url "${indexes[0]}")
  for url in "${indexes[@]:1}"; do index_args+=(--extra-index-url "$url"); done
else
  index_args+=(--no-index)
fi
for link in "${links[@]}"; do index_args+=(--find-links "$link"); done

mkdir -p "$(dirname "$venv")" || fail "cannot create $(dirname "$venv")"
# One installer at a time (CI and a test run may race); the second one waits, then finds it ready.
exec 9>"$venv.lock" || fail "cannot open $venv.lock"
if command -v flock >/dev/null 2>&1; then flock 9 || fail "cannot lock $venv.lock"; fi
if ready; then echo "$python"; exit 0; fi

rm -rf "$venv"
python3 -m venv "$venv" >&2 || { rm -rf "$venv"; fail "python3 -m venv failed (Debian: apt-get install python3-venv)"; }

limit="${MS_TF_INSTALL_TIMEOUT_SECS:-900}"
install() {
  # pip warns about every package the second local index lacks: keep the rest of its output.
  timeout "$limit" "$python" -m pip install --quiet --disable-pip-version-check --no-input \
    --retries 0 --timeout 30 "${index_args[@]}" "$1" 2>&1 | grep -v "is neither a file nor a directory" >&2
  return "${PIPESTATUS[0]}"
}
started=$(date +%s)
if install tensorflow-cpu; then package=tensorflow-cpu
elif install tensorflow; then package=tensorflow
else
  rm -rf "$venv"
  fail "pip could not install tensorflow-cpu or tensorflow (index: ${indexes[*]:-none}; find-links: ${links[*]:-none}; time limit ${limit}s)"
fi
version=$("$python" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null) \
  || { rm -rf "$venv"; fail "$package installed but 'import tensorflow' fails"; }
echo "tensorflow-venv: $package $version installed in $(( $(date +%s) - started ))s at $venv" >&2
touch "$marker"
echo "$python"
