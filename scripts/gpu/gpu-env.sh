# gpu-env.sh (sourced on the GPU machine, repo root): unpacks the carried Debian run-time
# libraries (.deb/, from scripts/fetch-gpu-deps.sh) into /tmp/ljdeps with dpkg -x (nothing is
# installed) and points LD_LIBRARY_PATH at them and at the CUDA libraries.
deps=/tmp/ljdeps
mkdir -p "$deps"
for f in .deb/*.deb; do dpkg -x "$f" "$deps"; done
libpath=$(find "$deps" -name '*.so*' -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ':')
cudalib=""
for lib in libcublasLt.so.13 libcudart.so.13; do
  d=$(for c in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
               /usr/local/cuda/targets/sbsa-linux/lib; do
        [ -e "$c/$lib" ] && echo "$c" && break; done)
  [ -z "$d" ] && d=$(find /usr/local /opt /usr/lib -name "$lib*" -printf '%h\n' 2>/dev/null | head -1)
  [ -n "$d" ] && cudalib="$cudalib$d:"
done
export LD_LIBRARY_PATH="$libpath$cudalib${LD_LIBRARY_PATH:-}"
export PATH=/usr/local/cuda/bin:$PATH
# cuDNN is not on the default library path of the GPU machine's image (PyTorch's environment
# has it): point LJ_CUDNN_LIBRARY at libcudnn_graph.so.9 for the cuDNN attention path.
if [ -z "${LJ_CUDNN_LIBRARY:-}" ]; then
  for d in /usr/local/cuda/lib64 /usr/lib/"$(uname -m)"-linux-gnu /opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib; do
    [ -e "$d/libcudnn_graph.so.9" ] && { export LJ_CUDNN_LIBRARY="$d/libcudnn_graph.so.9"; break; }
  done
  [ -z "${LJ_CUDNN_LIBRARY:-}" ] && LJ_CUDNN_LIBRARY=$(find /opt /usr/local /usr/lib -name libcudnn_graph.so.9 2>/dev/null | head -1) && export LJ_CUDNN_LIBRARY
fi

# lj_check_ops STEP OP...: for each op, `test_ops_cuda check --op OP` and the same (--quick) under
# compute-sanitizer memcheck; logs check_OP.log and memcheck_OP.log in $OUT, one line each through
# the calling script's say (its $dev holds test_ops_cuda).
lj_check_ops() {
  local step=$1 op
  shift
  for op in "$@"; do
    timeout 300 "$dev/test_ops_cuda" check --op "$op" >"$OUT/check_$op.log" 2>&1
    say "$step. test_ops_cuda check --op $op rc=$? $(tail -1 "$OUT/check_$op.log")"
    timeout 300 compute-sanitizer --tool memcheck "$dev/test_ops_cuda" check --quick --op "$op" \
      >"$OUT/memcheck_$op.log" 2>&1
    say "${step}b. memcheck --op $op rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_$op.log" | tail -1)"
  done
}
