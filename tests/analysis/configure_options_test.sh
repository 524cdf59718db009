#!/usr/bin/env bash
# Configures the tree with every combination of the documented build options
# (README "Build options": METALSERVE_WITH_TORCH, METALSERVE_BUILD_TESTS,
# METALSERVE_BUILD_BENCH) and checks that each configures and offers exactly
# the programs its options promise (the server with torch, the test binaries
# with tests, the benchmarks with bench; metalserve-bench always). Builds
# nothing. Used by ctest (label "analysis").
#
#   configure_options_test.sh SOURCE_DIR TREE_DIR
set -euo pipefail
src=$1 tree=$2
failed=0
has_target() {  # has_target DIR TARGET
  local targets
  targets=$(cmake --build "$1" --target help 2>/dev/null) || return 1
  grep -Eq "(^|[ .:])$2(\$|[ :])" <<<"$targets"
}
expect() {  # expect DIR TARGET yes|no
  local got=no
  if has_target "$1" "$2"; then got=yes; fi
  if [[ $got != "$3" ]]; then
    echo "configure_options: $(basename "$1"): target $2 present=$got, want $3" >&2
    failed=1
  fi
}
for torch in ON OFF; do
  for tests in ON OFF; do
    for bench in ON OFF; do
      name=torch-$torch.tests-$tests.bench-$bench
      dir=$tree/$name
      rm -rf "$dir"
      mkdir -p "$tree"
      if ! cmake -S "$src" -B "$dir" -DMETALSERVE_WITH_TORCH=$torch \
          -DMETALSERVE_BUILD_TESTS=$tests -DMETALSERVE_BUILD_BENCH=$bench \
          >"$dir.log" 2>&1; then
        echo "configure_options: $name does not configure:" >&2
        # The errors, not the tail: CMake reports them before "Generating".
        { grep -A6 "CMake Error" "$dir.log" || tail -20 "$dir.log"; } | head -40 >&2
        failed=1
        continue
      fi
      [[ $torch == ON ]] && want=yes || want=no
      expect "$dir" metalserve $want
      expect "$dir" metalserve-bench yes
      [[ $tests == ON ]] && want=yes || want=no
      expect "$dir" service_test $want
      [[ $bench == ON ]] && want=yes || want=no
      expect "$dir" metrics_bench $want
      echo "configure_options: $name configures"
    done
  done
done
exit $failed
