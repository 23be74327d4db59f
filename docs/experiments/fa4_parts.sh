#!/usr/bin/env bash
# Repack ../shared/gpu/fa4-wheels.sh's download (SRC: its a/ and b/ folders) into two parts that each travel
# with one device call beside a ~10 MB tracked tree: DEST/p1 (the small wheels, pydantic's, install.sh, the
# first piece of the CUDA 13 cutlass-dsl libs as tar.xz) and DEST/p2 (the other two pieces). xz packs that
# wheel's 188 MB compiler library into 66 MB where the wheel's zip takes 92.
set -euo pipefail
SRC=${1:?usage: fa4_parts.sh SRC DEST}
DEST=${2:?usage: fa4_parts.sh SRC DEST}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat "$SRC"/a/cu13part.aa "$SRC"/b/cu13part.ab > "$work/cu13.whl"
(cd "$work" && python3 -m zipfile -e cu13.whl x && tar -C x -cf - . | xz -T2 -6 > cu13.tar.xz)
rm -rf "$DEST/p1" "$DEST/p2"
mkdir -p "$DEST/p1/wheels" "$DEST/p2"
cp "$SRC"/a/*.whl "$SRC"/b/deps/*.whl "$DEST/p1/wheels/"
split -b 27000000 "$work/cu13.tar.xz" "$DEST/p2/cu13.tar.xz.part-"
mv "$DEST/p2/cu13.tar.xz.part-aa" "$DEST/p1/"
cat > "$DEST/p1/install.sh" <<'INNER'
# source me on the GPU machine once /tmp/fa4 holds the files of p1 and p2 (two calls, same machine)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/fa4/wheels/*.whl
cat /tmp/fa4/cu13.tar.xz.part-* | xz -d | tar -x -C /tmp/site
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}
INNER
du -sh "$DEST/p1" "$DEST/p2"
