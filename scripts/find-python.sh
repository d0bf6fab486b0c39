#!/usr/bin/env bash
# Print the path of a Python interpreter >= 3.12 (and < 3.15, what pymc 6.4 supports).
# Tries versioned names on PATH first, then pyenv's versions folder (pyenv shims on PATH fail
# for versions that are installed but not selected), then plain python3.
set -u
ok() { "$1" -c 'import sys; sys.exit(0 if (3, 12) <= sys.version_info[:2] < (3, 15) else 1)' >/dev/null 2>&1; }
for c in python3.12 python3.13 python3.14 python3; do
  if p=$(command -v "$c" 2>/dev/null) && ok "$p"; then
    "$p" -c 'import sys; print(sys.executable)'; exit 0
  fi
done
root=${PYENV_ROOT:-$HOME/.pyenv}
for p in "$root"/versions/3.12*/bin/python3.12 "$root"/versions/3.13*/bin/python3.13 "$root"/versions/3.14*/bin/python3.14; do
  if [ -x "$p" ] && ok "$p"; then echo "$p"; exit 0; fi
done
echo "error: pymc_ibp needs Python >= 3.12 (< 3.15); none found on PATH (tried python3.12, python3.13, python3.14, python3) nor under $root/versions. Install one (e.g. 'apt-get install python3.12' or 'pyenv install 3.12') and re-run." >&2
exit 1
