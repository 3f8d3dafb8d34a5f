#!/usr/bin/env bash
# Render the plots of every archive in a folder (default results/h200) into another
# (default docs/plots), replacing plots of the same name: three PNGs per comparison,
# named after each archive. The README shows these.
#
#   bash scripts/render_plots.sh [ARCHIVES_DIR] [PLOTS_DIR]
set -euo pipefail
archives=${1:-results/h200}
plots=${2:-docs/plots}
shopt -s nullglob
found=0
for archive in "$archives"/*.json "$archives"/*.json.gz; do
    found=1
    qkbench report "$archive" --plot "$plots" > /dev/null
done
if [ "$found" = 0 ]; then
    echo "no archives (*.json, *.json.gz) in $archives" >&2
    exit 1
fi
