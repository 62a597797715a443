#!/usr/bin/env bash
# test_layers.sh: the layer order holds. Data flows down; a file may include headers of its own
# folder and of folders below it, never above (ARCHITECTURE.md has the map). Fails naming
# every upward #include.
set -euo pipefail
src=${LJ_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
cd "$src"
# top to bottom
order=(cli bench serve train checkpoint plan parallel optim model ops data io config metrics base)
rank() {
    local i
    for i in "${!order[@]}"; do [ "${order[$i]}" = "$1" ] && { echo "$i"; return; }; done
    echo -1
}
bad=0
checked=0
while IFS= read -r file; do
    from=${file%%/*}
    rf=$(rank "$from")
    [ "$rf" -ge 0 ] || continue
    [ "$file" = "${file#bench/kernels/}" ] || continue # the kernel lab includes what it measures
    while IFS= read -r inc; do
        to=${inc%%/*}
        rt=$(rank "$to")
        [ "$rt" -ge 0 ] || continue
        checked=$((checked + 1))
        if [ "$rt" -lt "$rf" ]; then
            echo "test_layers: $file includes \"$inc\": $to/ is above $from/ (order: ${order[*]})"
            bad=$((bad + 1))
        fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done < <(git ls-files --cached --others --exclude-standard '*.c' '*.h' '*.cu' 2>/dev/null || find . -name '*.[ch]' -o -name '*.cu')
echo "test_layers: $checked includes checked, $bad upward"
[ "$checked" -gt 100 ] || { echo "test_layers: too few includes found (wrong directory?)"; exit 1; }
[ "$bad" -eq 0 ]
