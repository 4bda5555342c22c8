#!/usr/bin/env bash
# examples/fan_out.py on Dask, from a virtual environment of its own (Dask is the example's
# dependency alone): against the stand-in (examples/local_service.py --port 0), on a LocalCluster
# and on a separate `dask scheduler` with two `dask worker` processes on 127.0.0.1. Checks the
# summary lines, that a re-run fetches only what is missing or altered, --by month's clipping,
# a failure's line and exit 1, and the one-line advice without Dask. When pip cannot reach the
# package index, a line "SKIPPED: why" (.ci/run counts it), exit status 0. Stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${TMPDIR:-/tmp}/dataset-client-ci-fan-out"
pins="dask[distributed]==2026.8.0"
if [ "$(cat "$venv/pins" 2>/dev/null)" != "$pins" ]; then # made anew when the pins change
  if ! { python3 -m venv --clear "$venv" &&
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --timeout 20 --retries 1 "$pins"; }; then
    echo "SKIPPED: the Dask example: no package index reachable (pip install $pins failed)"
    exit 0
  fi
  echo "$pins" >"$venv/pins"
fi

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
# check STATUS PATTERN ARGUMENTS...: fan_out.py exits STATUS and its last line matches PATTERN.
check() {
  local want="$1" pattern="$2" status=0
  shift 2
  "$venv/bin/python" examples/fan_out.py "$@" >"$work/out" 2>"$work/err" || status=$?
  sed 's/^/    /' "$work/out"
  [ "$status" = "$want" ] || fail "fan_out.py $* exited $status, not $want"
  [[ "$(tail -n 1 "$work/out")" =~ $pattern ]] || fail "fan_out.py $*: its last line does not match $pattern"
}
local_summary() { echo "^$1 files, [0-9]+ bytes, $2 failed in [0-9.]+ s on tcp://127\.0\.0\.1:[0-9]+ \(2 workers\)$"; }
bars=(daily_bars --symbols AAPL,MSFT,NVDA --start 2024-01-01 --end 2024-03-31 --into "$work/bars")

echo "== fan_out.py on a LocalCluster (2 workers): 3 symbols, then a re-run, then a re-run after a file went and one was altered"
check 0 "$(local_summary 3 0)" "${bars[@]}" --workers 2
made="$(exports)"
[ "$made" = 3 ] || fail "the stand-in received $made exports for 3 symbols"  # what the server saw, not only the summary
check 0 "$(local_summary 3 0)" "${bars[@]}"
[ "$(exports)" = "$made" ] || fail "the re-run made $(($(exports) - made)) exports; nothing was missing"
rm "$work/bars/daily_bars-MSFT.parquet"
printf 'x' >>"$work/bars/daily_bars-NVDA.parquet"
check 0 "$(local_summary 3 0)" "${bars[@]}"
[ "$(exports)" = "$((made + 2))" ] || fail "the re-run made $(($(exports) - made)) exports, not the 2 missing or altered"

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

echo "== a failure: an unknown symbol, its own line, exit 1"
check 1 "$(local_summary 1 1)" daily_bars --symbols AAPL,ZZZZ --start 2024-01-01 --end 2024-01-31 --into "$work/failing"
grep -q "^failed ZZZZ: ServiceError: 422 " "$work/out" || fail "no line names the failed symbol ZZZZ and its error"

echo "== a separate dask scheduler and two dask worker processes on 127.0.0.1 (PYTHONPATH: dataset_client importable)"
export PYTHONPATH="$PWD"
"$venv/bin/dask" scheduler --host 127.0.0.1 --port 0 --no-dashboard --scheduler-file "$work/scheduler.json" \
  >"$work/scheduler.log" 2>&1 &
started+=($!)
for _ in $(seq 600); do [ -s "$work/scheduler.json" ] && break; sleep 0.1; done
address="$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['address'])" "$work/scheduler.json")"
for n in 1 2; do
  "$venv/bin/dask" worker "$address" --host 127.0.0.1 --nthreads 2 --no-dashboard >"$work/worker$n.log" 2>&1 &
  started+=($!)
done
cluster=(daily_bars --symbols AAPL,MSFT,NVDA,TSLA --start 2024-01-01 --end 2024-06-30 --into "$work/cluster")
pattern="^4 files, [0-9]+ bytes, 0 failed in [0-9.]+ s on ${address//./\\.} \(2 workers\)$"
check 0 "$pattern" "${cluster[@]}" --scheduler "$address" --workers 2
made="$(exports)"
check 0 "$pattern" "${cluster[@]}" --scheduler "$address" --workers 2
[ "$(exports)" = "$made" ] || fail "the re-run on the scheduler made exports; nothing was missing"
unset PYTHONPATH

echo "== without Dask: one line saying how to install it, exit 2"
if python3 -c "import dask" 2>/dev/null; then
  echo "SKIPPED: fan_out.py without Dask: this machine's python3 has Dask"
else
  status=0
  python3 examples/fan_out.py "${bars[@]}" >"$work/out" 2>"$work/err" || status=$?
  [ "$status" = 2 ] && [ "$(wc -l <"$work/err")" = 1 ] && grep -q 'pip install "dask\[distributed\]"' "$work/err" ||
    fail "without Dask: exit $status, stderr: $(cat "$work/err")"
  sed 's/^/    /' "$work/err"
fi
echo "== fan_out.py: every check passed"
