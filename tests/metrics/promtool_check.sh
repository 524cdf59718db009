#!/bin/sh
# Runs promtool on a file or a deploy/prometheus check.
#   promtool_check.sh metrics SCRAPE_DUMP_BINARY   # dump, then check metrics
#   promtool_check.sh ARGS...                      # promtool ARGS...
# Exits 77 (ctest SKIP_RETURN_CODE) when promtool is not installed, or 1
# when METALSERVE_REQUIRE_TOOLS=1 (CI, set by scripts/test).
set -eu
if ! command -v promtool >/dev/null 2>&1; then
  if [ "${METALSERVE_REQUIRE_TOOLS:-}" = 1 ]; then
    echo "FAILED: promtool not found on PATH, and METALSERVE_REQUIRE_TOOLS=1" \
         "(scripts/setup installs it: Debian prometheus)"
    exit 1
  fi
  echo "SKIPPED: promtool not found on PATH (Debian: apt-get install prometheus)"
  exit 77
fi
if [ "$1" = metrics ]; then
  out=$(mktemp)
  trap 'rm -f "$out"' EXIT
  "$2" "$out"
  problems=$(promtool check metrics <"$out" 2>&1) || {
    echo "$problems"; exit 1; }
  if [ -n "$problems" ]; then echo "$problems"; exit 1; fi
  echo "promtool check metrics: no problems in $(grep -c '^# TYPE' "$out") families"
  exit 0
fi
exec promtool "$@"
