# vl_data_lib.sh: sourced by the Qwen3-VL training tests. Prepares, from tests/data/vl_example.jsonl
# (scikit-image's photographs from the set-up script's cache, small images: 16 tokens each),
# two multimodal datasets under $1: "$1/four" (the four samples) and "$1/one" (the first alone).
# Needs LJPERF, LJ_CACHE, LJ_SOURCE_DIR and the caller's fail().
vl_prepare_datasets() {
  local dir=$1 images="$LJ_CACHE/images/skimage" jsonl="$LJ_SOURCE_DIR/tests/data/vl_example.jsonl"
  [ -s "$images/chelsea.png" ] && [ -s "$LJ_CACHE/tokenizer/qwen3/tokenizer.json" ] \
    || fail "$images or the Qwen3 tokenizer is missing: run scripts/setup.sh"
  local px=(--image-root "$images" --tokenizer qwen3 --min-pixels 4096 --max-pixels 16384 --quiet)
  "$LJPERF" prepare --input "$jsonl" --output-prefix "$dir/four" "${px[@]}" >/dev/null 2>"$dir/prep.err" \
    || { cat "$dir/prep.err"; fail "prepare"; }
  head -n 1 "$jsonl" >"$dir/one.jsonl"
  "$LJPERF" prepare --input "$dir/one.jsonl" --output-prefix "$dir/one" "${px[@]}" >/dev/null 2>"$dir/prep.err" \
    || { cat "$dir/prep.err"; fail "prepare of one sample"; }
}
