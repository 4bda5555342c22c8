#!/usr/bin/env bash
# examples/fan_out.py without Dask and on Dask, against the stand-in (examples/local_service.py
# --port 0). First with python3 alone, no venv (Dask absent): the jobs on threads of one client,
# "(N threads)" and "(1 thread)", a re-run skipping what is there, --scheduler refused in one line.
# Then on Dask, from a virtual environment of its own (Dask is the example's dependency alone), on
# a LocalCluster (the same files and records as on threads) and on separate `dask scheduler`s
# with `dask worker` processes on 127.0.0.1. Checks the summary lines (and "N fetched, M already
# there" before), that a re-run fetches only what is missing or altered (a record in upper case or
# padded is accepted), --by month's clipping, a failure's line (escaped) and exit 1, no
# dashboard-port warning while another process holds 8787, --into another user's directory
# refused, dataset_client shipped to a cluster without it, a worker without the profile's
# ca_bundle (a mount namespace hides it) and a cluster without workers each ending in failed
# lines and the summary. When pip cannot reach the package index, a line "SKIPPED: why" (.ci/run
# counts it) after the checks without Dask, exit status 0. Stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${TMPDIR:-/tmp}/dataset-client-ci-fan-out"
pins="dask[distributed]==2026.8.0"
work="$(mktemp -d)"
started=() # the pids of what this script started, stopped on exit
stop_all() {
  for pid in "${started[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${started[@]}"; do
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done # 10 s each at most
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap stop_all EXIT

# The environment the example meets: no proxy, no profile of the user's, the stand-in's address and key.
unset HTTP_PROXY HTTPS_PROXY http_proxy https_proxy ALL_PROXY all_proxy DATASET_CLIENT_CONFIG DATASET_CLIENT_PROFILE
export NO_PROXY=127.0.0.1,localhost HOME="$work"
python3 examples/local_service.py --port 0 --verbose >"$work/service.env" 2>"$work/service.log" &
started+=($!)
for _ in $(seq 300); do [ "$(wc -l <"$work/service.env")" -ge 2 ] && break; sleep 0.1; done
# shellcheck disable=SC1091  # the stand-in's two export lines
. "$work/service.env"

exports() { grep -c "POST /exports" "$work/service.log" || true; }
fail() {
  echo "FAILED: $*"
  tail -n 20 "$work/err" 2>/dev/null || true
  exit 1
}
# check STATUS PATTERN ARGUMENTS...: fan_out.py, run by "${python[@]}", exits STATUS and its last
# line matches PATTERN.
check() {
  local want="$1" pattern="$2" status=0
  shift 2
  "${python[@]}" examples/fan_out.py "$@" >"$work/out" 2>"$work/err" || status=$?
  sed 's/^/    /' "$work/out"
  [ "$status" = "$want" ] || fail "fan_out.py $* exited $status, not $want"
  [[ "$(tail -n 1 "$work/out")" =~ $pattern ]] || fail "fan_out.py $*: its last line does not match $pattern"
}
# counts N M: the line before the summary says N fetched, M already there.
counts() {
  [ "$(tail -n 2 "$work/out" | head -n 1)" = "$1 fetched, $2 already there" ] || fail "not '$1 fetched, $2 already there'"
}
local_summary() { echo "^$1 files, [0-9]+ bytes, $2 failed in [0-9.]+ s on tcp://127\.0\.0\.1:[0-9]+ \(${3:-2 workers}\)$"; }
# start_cluster NAME WORKERS [COMMAND PREFIX...]: a dask scheduler and WORKERS workers (each run
# under the prefix, if any) on 127.0.0.1, stopped on exit; its address in $address.
start_cluster() {
  local name="$1" count="$2"
  shift 2
  "$venv/bin/dask" scheduler --host 127.0.0.1 --port 0 --no-dashboard --scheduler-file "$work/$name.json" \
    >"$work/$name.log" 2>&1 &
  started+=($!)
  for _ in $(seq 600); do [ -s "$work/$name.json" ] && break; sleep 0.1; done
  address="$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['address'])" "$work/$name.json")"
  for n in $(seq "$count"); do
    "$@" "$venv/bin/dask" worker "$address" --host 127.0.0.1 --nthreads 2 --no-dashboard >"$work/$name-worker$n.log" 2>&1 &
    started+=($!)
  done
}
bars=(daily_bars --symbols AAPL,MSFT,NVDA --start 2024-01-01 --end 2024-03-31 --into "$work/bars")

# python3 without Dask: as it is where it has none (as in CI), else with Dask's import blocked
python=(python3)
if python3 -c "import dask" 2>/dev/null; then
  python=(python3 -c "import runpy, sys; sys.modules['dask'] = None; sys.argv.pop(0); runpy.run_path(sys.argv[0], run_name='__main__')")
fi
echo "== without Dask (python3 alone, no venv): 3 symbols on 4 threads of one client, then a re-run on 1"
threads_summary() { echo "^$1 files, [0-9]+ bytes, 0 failed in [0-9.]+ s on this machine \\($2\\)$"; }
check 0 "$(threads_summary 3 "4 threads")" "${bars[@]:0:7}" --into "$work/threads"
counts 3 0
[ "$(exports)" = 3 ] || fail "the stand-in received $(exports) exports for 3 symbols" # what the server saw
check 0 "$(threads_summary 3 "1 thread")" "${bars[@]:0:7}" --into "$work/threads" --workers 1
counts 0 3
[ "$(exports)" = 3 ] || fail "the re-run made $(($(exports) - 3)) exports; nothing was missing"

echo "== without Dask, --scheduler: one line saying how to install Dask, exit 2"
status=0
"${python[@]}" examples/fan_out.py "${bars[@]}" --scheduler tcp://127.0.0.1:8786 >"$work/out" 2>"$work/err" || status=$?
[ "$status" = 2 ] && [ "$(wc -l <"$work/err")" = 1 ] && grep -q 'pip install "dask\[distributed\]"' "$work/err" ||
  fail "--scheduler without Dask: exit $status, stderr: $(cat "$work/err")"
sed 's/^/    /' "$work/err"

if [ "$(cat "$venv/pins" 2>/dev/null)" != "$pins" ]; then # made anew when the pins change
  if ! { python3 -m venv --clear "$venv" &&
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --timeout 20 --retries 1 "$pins"; }; then
    echo "SKIPPED: the Dask example: no package index reachable (pip install $pins failed)"
    exit 0
  fi
  echo "$pins" >"$venv/pins"
fi
python=("$venv/bin/python")

echo "== fan_out.py on a LocalCluster (2 workers): 3 symbols (the files and records made on threads), then a re-run, then a re-run after a file went and one was altered"
check 0 "$(local_summary 3 0)" "${bars[@]}" --workers 2
counts 3 0
made="$(exports)"
[ "$made" = 6 ] || fail "the stand-in received $((made - 3)) exports for 3 symbols" # what the server saw, not only the summary
diff -r "$work/threads" "$work/bars" >/dev/null || fail "the files or records made on Dask and on threads differ"
record="$work/bars/daily_bars-AAPL.parquet.sha256"  # as another tool may write it: upper case, white space after
python3 -c "import sys; p = sys.argv[1]; a, b = open(p).read().splitlines(); open(p, 'w').write(f'{a}  \n{b.upper()}  \n\n')" "$record"
check 0 "$(local_summary 3 0)" "${bars[@]}"
counts 0 3
[ "$(exports)" = "$made" ] || fail "the re-run made $(($(exports) - made)) exports; nothing was missing"
rm "$work/bars/daily_bars-MSFT.parquet"
printf 'x' >>"$work/bars/daily_bars-NVDA.parquet"
check 0 "$(local_summary 3 0)" "${bars[@]}"
counts 2 1
[ "$(exports)" = "$((made + 2))" ] || fail "the re-run made $(($(exports) - made)) exports, not the 2 missing or altered"

echo "== 1 worker while another process holds the dashboard's port 8787: no warning"
python3 -c "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 8787)); s.listen(); time.sleep(300)" 2>/dev/null &
started+=($!)  # if 8787 is taken already, it is held all the same
sleep 0.5
check 0 "$(local_summary 1 0 "1 worker")" "${bars[@]:0:7}" --into "$work/one" --symbols AAPL --workers 1
! grep -q "already in use" "$work/err" || fail "a port warning: $(cat "$work/err")"

echo "== --by month, clipped to --start and --end"
check 0 "$(local_summary 3 0)" daily_bars --symbols AAPL,MSFT --start 2024-01-15 --end 2024-03-10 --by month \
  --format csv --into "$work/months"
python3 - "$work/months" <<'PY' || fail "--by month: a file holds days outside its month's part of the range"
import csv, sys
expected = {"2024-01": ("2024-01-15", "2024-01-31"), "2024-02": ("2024-02-01", "2024-02-29"), "2024-03": ("2024-03-01", "2024-03-10")}
for month, (first, last) in expected.items():
    with open(f"{sys.argv[1]}/daily_bars-{month}.csv", newline="") as file:
        days = sorted({row["date"] for row in csv.DictReader(file)})
    assert days and first <= days[0] and days[-1] <= last, (month, days[0], days[-1])
    print(f"    daily_bars-{month}.csv: {days[0]} .. {days[-1]}")
PY

echo "== a failure: an unknown symbol (its escapes and bidi control echoed by the service), its own line, exit 1"
check 1 "$(local_summary 1 1)" daily_bars --symbols $'AAPL,ZZ\e]0;owned\a\xe2\x80\xaeZZ' --start 2024-01-01 \
  --end 2024-01-31 --into "$work/failing"
grep -qF 'failed ZZ\x1b]0;owned\x07\u202eZZ: ServiceError: 422 ' "$work/out" || fail "no line names the failed symbol and its error"
python3 -c "import re, sys; sys.exit(bool(re.search('[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e]', open(sys.argv[1]).read())))" \
  "$work/out" || fail "a control or bidi character reached the terminal raw"

echo "== --into a directory another user owns: refused in one line, exit 2"
if [ "$(id -u)" = 0 ]; then
  mkdir -m 1777 "$work/theirs" && chown 4242:4242 "$work/theirs"
  status=0
  "$venv/bin/python" examples/fan_out.py "${bars[@]:0:7}" --into "$work/theirs" >"$work/out" 2>"$work/err" || status=$?
  [ "$status" = 2 ] && [ "$(wc -l <"$work/err")" = 1 ] && grep -q "belongs to another user (uid 4242)" "$work/err" ||
    fail "--into another user's directory: exit $status, stderr: $(cat "$work/err")"
  sed 's/^/    /' "$work/err"
else
  echo "SKIPPED: --into another user's directory: needs root to give one to another user"
fi

echo "== a separate dask scheduler and two dask worker processes on 127.0.0.1 (PYTHONPATH: dataset_client importable)"
export PYTHONPATH="$PWD"
start_cluster importing 2
cluster=(daily_bars --symbols AAPL,MSFT,NVDA,TSLA --start 2024-01-01 --end 2024-06-30 --into "$work/cluster")
pattern="^4 files, [0-9]+ bytes, 0 failed in [0-9.]+ s on ${address//./\\.} \(2 workers\)$"
check 0 "$pattern" "${cluster[@]}" --scheduler "$address" --workers 2
made="$(exports)"
check 0 "$pattern" "${cluster[@]}" --scheduler "$address" --workers 2
[ "$(exports)" = "$made" ] || fail "the re-run on the scheduler made exports; nothing was missing"

echo "== a worker without the profile's ca_bundle (a mount namespace hides it): failed lines naming it, the summary"
mkdir "$work/ca" && cp tests_data/ca.pem "$work/ca/corp.pem"
printf '[default]\nca_bundle = "%s"\n' "$work/ca/corp.pem" >"$work/config.toml" && chmod 600 "$work/config.toml"
if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
  start_cluster hidden 1 unshare -m sh -c 'mount -t tmpfs tmpfs "$0" && exec "$@"' "$work/ca"
  export DATASET_CLIENT_CONFIG="$work/config.toml"
  check 1 "^0 files, 0 bytes, 2 failed in [0-9.]+ s on ${address//./\\.} \(1 worker\)$" \
    "${cluster[@]:0:1}" --symbols AAPL,MSFT "${cluster[@]:3}" --into "$work/hidden" --scheduler "$address" --workers 1
  unset DATASET_CLIENT_CONFIG
  [ "$(grep -c "^failed [A-Z]*: FileNotFoundError: ca_bundle names $work/ca/corp.pem, which is not" "$work/out")" = 2 ] ||
    fail "no failed line names the missing ca_bundle"
  ! grep -qr "$DATASET_CLIENT_API_KEY" "$work"/hidden*.log || fail "the key is in a Dask log"
else
  echo "SKIPPED: a worker without the ca_bundle: needs root and unshare -m to hide a file from one process"
fi
unset PYTHONPATH

echo "== a scheduler and two workers that cannot import dataset_client: it is shipped (Client.upload_file)"
start_cluster bare 2
check 0 "^4 files, [0-9]+ bytes, 0 failed in [0-9.]+ s on ${address//./\\.} \(2 workers\)$" "${cluster[@]:0:7}" \
  --into "$work/shipped" --scheduler "$address" --workers 2
grep -q "^fan_out.py: shipped dataset_client.py to the scheduler, tcp://" "$work/err" || fail "not shipped: $(cat "$work/err")"
sed 's/^/    /' "$work/err"

echo "== a scheduler without any worker: the tasks fail once LOST_AFTER (3 s here) has passed, and the summary"
start_cluster alone 0
status=0
"$venv/bin/python" - "${cluster[@]:0:7}" --into "$work/alone" --scheduler "$address" >"$work/out" 2>"$work/err" <<'PY' || status=$?
import runpy, sys
example = runpy.run_path("examples/fan_out.py", run_name="fan_out")  # main() not run yet
example["main"].__globals__["LOST_AFTER"] = 3.0
sys.exit(example["main"](sys.argv[1:]))
PY
sed 's/^/    /' "$work/out"
[ "$status" = 1 ] && [ "$(grep -c "^failed [A-Z]*: no worker left to run it for 3 s" "$work/out")" = 4 ] ||
  fail "without workers: exit $status"
[[ "$(tail -n 1 "$work/out")" =~ ^0\ files,\ 0\ bytes,\ 4\ failed\ in\ [0-9.]+\ s\ on\ .*\(0\ workers\)$ ]] || fail "no summary"

echo "== fan_out.py: every check passed"
