#!/usr/bin/env bash
# fetch-gpu-deps.sh: downloads (here, where the network is) the Debian packages of the
# run-time libraries that ljperf's binaries need besides CUDA and libc, into .deb/
# (gitignored), so that scripts/gpu/gpu-check.sh can unpack them on a GPU machine that has no
# network and no such packages (dpkg -x, nothing installed system-wide).
# The list is the non-CUDA, non-libc part of `ldd build-gpu/ljperf` (cJSON, PCRE2, OpenBLAS
# with gfortran/quadmath, libgomp, protobuf-c, ISA-L, libzstd, utf8proc, xxHash, the image
# libraries libjpeg-turbo, libpng, libwebp with its demuxer, libarchive with the libraries it
# links that a minimal image may lack, GNU libmicrohttpd with GnuTLS and its libraries for
# `serve`) plus cmocka for the test programs.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$repo/.deb"
cd "$repo/.deb"
pkgs=(libcjson1 libpcre2-8-0 libopenblas0-pthread libopenblas0 libgfortran5 libquadmath0 libgomp1 libcmocka0
      libprotobuf-c1 libisal2 libzstd1 libutf8proc2 libxxhash0
      libjpeg62-turbo libpng16-16 libwebp7 libwebpdemux2 libarchive13 libxml2 libicu72 libnettle8 liblz4-1 libacl1
      libmicrohttpd12 libgnutls30 libhogweed6 libp11-kit0 libtasn1-6 libffi8 libgmp10 libidn2-0 libunistring2
      libcurl4 libnghttp2-14 librtmp1 libssh2-1 libpsl5 libldap-2.5-0 libsasl2-2 libbrotli1 libgssapi-krb5-2
      libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libssl3)
missing=()
for p in "${pkgs[@]}"; do
  ls "${p}"_*.deb >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get download "${missing[@]}" >/dev/null
fi
ls -1 "$repo"/.deb/*.deb | sed "s#^$repo/##"
