#!/usr/bin/env bash
# Installs Horovod (TensorFlow + Gloo, no MPI) into the active Python environment.
#
# Horovod 0.28.1 (the latest release) does not build against TF >= 2.16 as shipped: its
# horovod/tensorflow/xla_mpi_ops.cc includes tensorflow/compiler/xla headers that the TF pip
# package no longer carries. We drop that one source file (the XLA custom-call ops) from the
# build, build a wheel once into a cache outside the repository, and reuse it afterwards.
#
# Usage: scripts/install_horovod.sh [python]   (default: python on PATH)
# Cache: $SOK_LITE_CACHE (default ~/.cache/sok_lite)/wheels/<python>-tf<version>/
set -euo pipefail

PY=${1:-python}
PY=$("$PY" -c "import sys; print(sys.executable)")  # absolute: the build runs elsewhere
HVD_VERSION=0.28.1

if "$PY" -c "import horovod.tensorflow" >/dev/null 2>&1; then
  echo "horovod: already installed"
  exit 0
fi

tf_version=$("$PY" -c "import tensorflow as tf; print(tf.__version__)" 2>/dev/null)
py_tag=$("$PY" -c "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')")
cache="${SOK_LITE_CACHE:-$HOME/.cache/sok_lite}/wheels/${py_tag}-tf${tf_version}"
mkdir -p "$cache"

wheel=$(ls "$cache"/horovod-${HVD_VERSION}-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$wheel" ]; then
  echo "horovod: building ${HVD_VERSION} against TensorFlow ${tf_version} (several minutes)"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  "$PY" -m pip download --quiet --no-deps --no-binary :all: "horovod==${HVD_VERSION}" -d "$work"
  tar -xzf "$work"/horovod-${HVD_VERSION}.tar.gz -C "$work"
  src="$work/horovod-${HVD_VERSION}"
  # The only change: leave the XLA custom-call ops out of the TensorFlow extension.
  sed -i '/xla_mpi_ops\.cc/d' "$src/horovod/tensorflow/CMakeLists.txt"
  if grep -q xla_mpi_ops "$src/horovod/tensorflow/CMakeLists.txt"; then
    echo "horovod: could not patch horovod/tensorflow/CMakeLists.txt" >&2
    exit 1
  fi
  (
    cd "$src"
    HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
      HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_GPU_OPERATIONS= \
      MAKEFLAGS="-j$(nproc)" \
      "$PY" -m pip wheel --quiet --no-build-isolation --no-deps . -w "$work/dist"
  )
  cp "$work"/dist/horovod-*.whl "$cache/"
  wheel=$(ls "$cache"/horovod-${HVD_VERSION}-*.whl | head -n 1)
fi

"$PY" -m pip install --quiet "$wheel"
"$PY" -c "import horovod.tensorflow as hvd; assert hvd.gloo_built(), 'horovod built without gloo'"
echo "horovod: installed from $wheel"
