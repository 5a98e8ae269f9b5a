#!/usr/bin/env bash
# The runtime is the bottom layer ("No Python, no torch, no C++"):
# every #include under runtime/ must resolve either inside runtime/ itself
# (the including file's folder, runtime/include, runtime/src) or in the C
# compiler's own system search path. Anything else -- Python.h, torch, spike's
# headers -- is an upward include and fails `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
CC=${CC:-cc}
mapfile -t sysdirs < <(echo | "$CC" -xc -E -v - 2>&1 |
  sed -n '/#include <...> search starts here:/,/End of search list./p' | sed '1d;$d;s/^ *//')
bad=0
while IFS= read -r file; do
  dir=$(dirname "$file")
  while IFS= read -r line; do
    name=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]([^>"]+)[>"].*/\1/' <<<"$line")
    found=""
    if [[ $line =~ \#[[:space:]]*include[[:space:]]*\" ]]; then
      for d in "$dir" runtime/include runtime/src; do [[ -f $d/$name ]] && found=$d && break; done
    else
      for d in "${sysdirs[@]}"; do [[ -f $d/$name ]] && found=$d && break; done
    fi
    if [[ -z $found ]]; then
      echo "$file: '$(sed -E 's/^[[:space:]]+//' <<<"$line")' does not resolve inside runtime/ or the system headers" >&2
      bad=1
    fi
  done < <(grep -E '^[[:space:]]*#[[:space:]]*include' "$file")
done < <(find runtime -name '*.c' -o -name '*.h')
[[ $bad == 0 ]] && echo "check_c_includes: runtime/ includes nothing above it"
exit $bad
