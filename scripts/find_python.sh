#!/usr/bin/env bash
# Prints the path of a working Python >= 3.12 interpreter, or nothing.
# `python3.12` on PATH can be a pyenv shim that fails when 3.12 is not the active version,
# so each candidate is actually run before it is chosen.
for c in python3.12 python3.13 python3 \
         "$HOME"/.pyenv/versions/3.12*/bin/python3.12 "$HOME"/.pyenv/versions/3.13*/bin/python3.13 \
         /usr/local/bin/python3.12 /usr/bin/python3.12; do
  p=$(command -v "$c" 2>/dev/null) || continue
  if "$p" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
    "$p" -c 'import sys; print(sys.executable)'
    exit 0
  fi
done
