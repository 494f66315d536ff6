#!/usr/bin/env bash
# Build the carry for a real SGLang on the H200 machine (Python 3.12, torch 2.11.0+cu130, no package
# registry there). Runs HERE, where PyPI is reachable:
#   bash gpu/sglang/build_carry.sh RELEASE OUTDIR      RELEASE: 0.5.17 or 0.5.13.post1
# Writes OUTDIR/sglcarry.tar.xz.part-NN (<= 56 MiB each) and OUTDIR/ARCHIVE_SHA256. The releases whose
# wheels pin the image's torch 2.11.0 are 0.5.11-0.5.17; 0.5.18+ pin a newer torch, which is too large
# to carry. What is trimmed and why: gpu/sglang/README.md.
set -euo pipefail
RELEASE=$1; OUT=$(mkdir -p "$2" && realpath "$2"); HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PY312:-$(ls -d "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12 2>/dev/null | tail -n 1)}
PY=${PY:-python3.12}
"$PY" --version >/dev/null 2>&1 || { echo "no Python 3.12 here: set PY312=/path/to/python3.12" >&2; exit 2; }
case "$RELEASE" in   # each release's own pins, read from its wheel's METADATA
  0.5.17)       CORE="sglang==0.5.17 sglang-kernel==0.4.5 flashinfer-python==0.6.15.post1 apache-tvm-ffi==0.1.11"
                AHEAD="transformers==5.12.1 tokenizers==0.22.2" ;;
  0.5.13.post1) CORE="sglang==0.5.13.post1 sglang-kernel==0.4.3 flashinfer-python==0.6.12 apache-tvm-ffi==0.1.9 cuda-tile"
                AHEAD="transformers==5.8.1 tokenizers==0.22.2" ;;
  *) echo "no pins recorded for SGLang $RELEASE: read its wheel's METADATA and add a case here" >&2; exit 2 ;;
esac
PLATFORM=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_34_x86_64
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT; cd "$WORK"
export PIP_CONSTRAINT=
# 1. wheels the image lacks: pins/closure.txt is sglang's closure resolved against the image's packages
"$PY" -m pip download -q --no-deps "${PLATFORM[@]}" -d wheels -r "$HERE/pins/closure.txt" $CORE
# the image's transformers 5.17 breaks these releases' imports: their own pin goes first on PYTHONPATH
"$PY" -m pip download -q --no-deps "${PLATFORM[@]}" -d wheels-ahead $AHEAD
# 2. install without bytecode, then trim what a Hopper start with the flags in run_matrix.sh never loads
"$PY" -m pip install -q --no-index --no-deps --no-compile --target stage/sgl-site wheels/*.whl
"$PY" -m pip install -q --no-index --no-deps --no-compile --target stage/sgl-pin wheels-ahead/*.whl
rm -rf stage/sgl-pin/bin
( cd stage/sgl-site && rm -rf bin share jedi/third_party xgrammar/lib/libxgrammar.a \
    sgl_kernel/flash_ops.abi3.so sgl_kernel/sm100 sgl_kernel/flashmla_ops.abi3.so \
    sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so zstandard/_cffi.cpython-312-x86_64-linux-gnu.so \
    sglang/srt/server/_core.cpython-312-x86_64-linux-gnu.so sglang/srt/grpc/_core.cpython-312-x86_64-linux-gnu.so )
# 3. one deterministic archive, split so one part plus the checkout stays under 64 MiB per command
( cd stage && tar --sort=name --owner=0 --group=0 --numeric-owner --mtime='2026-11-30 00:00:00' -cf - sgl-site sgl-pin \
    | xz -9e -T2 > "$WORK/sglcarry.tar.xz" )
rm -f "$OUT"/sglcarry.tar.xz.part-*
( cd "$OUT" && split -b 56M -d -a 2 "$WORK/sglcarry.tar.xz" sglcarry.tar.xz.part- )
sha256sum "$WORK/sglcarry.tar.xz" | cut -d' ' -f1 > "$OUT/ARCHIVE_SHA256"
echo "$RELEASE carry in $OUT: $(du -sh "$OUT" | cut -f1), archive sha256 $(cat "$OUT/ARCHIVE_SHA256")"
