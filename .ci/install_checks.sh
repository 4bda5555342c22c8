#!/usr/bin/env bash
# pip install . into a fresh virtual environment: the dataset-client script, python -m dataset_client and
# python -m dataset_client_cli, run from elsewhere, print what the checkout's command line prints, byte
# for byte, against the stand-in service. The build backend (setuptools) comes from the package index,
# else the one the venv was made with (--no-build-isolation); neither: SKIPPED, saying why.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
work="$(mktemp -d)"
service=""
cleanup() { [ -z "$service" ] || kill "$service" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
echo "== pip install . into a fresh venv: dataset-client, python -m dataset_client, python -m dataset_client_cli"
python3 -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check --timeout 20 --retries 1)
if ! "${pip[@]}" "$repo" >"$work/pip.log" 2>&1 && ! "${pip[@]}" --no-build-isolation "$repo" >>"$work/pip.log" 2>&1; then
  echo "SKIPPED: pip install .: no build backend (no package index, and none in the venv); see:"
  tail -n 3 "$work/pip.log"
  exit 0
fi
rm -rf "$repo/build"  # setuptools builds in the tree
env -u DATASET_CLIENT_API_KEY -u DATASET_CLIENT_BASE_URL python3 examples/local_service.py --port 0 >"$work/env" 2>/dev/null &
service=$!
for _ in $(seq 100); do grep -q KEY "$work/env" && break; sleep 0.1; done
# shellcheck disable=SC1091
. "$work/env"
export NO_PROXY=127.0.0.1,localhost HOME="$work"
expected="$(python3 -m dataset_client datasets; echo "exit $?")"
cd "$work"  # away from the checkout: only what was installed is importable
status=0
for way in "$work/venv/bin/dataset-client" "$work/venv/bin/python -m dataset_client" \
  "$work/venv/bin/python -m dataset_client_cli"; do
  got="$($way datasets; echo "exit $?")"
  if [ "$got" = "$expected" ]; then
    echo "same output and status: ${way#"$work/venv/bin/"} datasets"
  else
    echo "FAILED: ${way#"$work/venv/bin/"} datasets printed otherwise:"
    diff <(echo "$expected") <(echo "$got") | head -n 10 || true
    status=1
  fi
done
usage="$("$work/venv/bin/dataset-client" --outptu csv datasets 2>&1 >/dev/null || true)"
case "$usage" in "usage: dataset-client "*"did you mean '--output'?"*) echo "the installed script's usage error names dataset-client" ;;
  *) echo "FAILED: the installed script's usage error: $usage"; status=1 ;; esac
exit "$status"
