# The two commands of the README: `make demo` and `make test`. Each sets up .venv on first use
# (TensorFlow, test tools, Horovod, the op library) and skips what is already in place.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(abspath $(VENV))/bin/python
export PATH := $(abspath $(VENV))/bin:$(PATH)

DEPS_STAMP := $(VENV)/.sok_lite_deps
HOROVOD_STAMP := $(VENV)/.sok_lite_horovod
BUILD_STAMP := build/.sok_lite_ops
KERNEL_SOURCES := $(shell find kernels -name '*.cc' -o -name '*.h' -o -name '*.cu' 2>/dev/null)
CXX_FILES := $(shell find kernels -name '*.cc' -o -name '*.h' 2>/dev/null)

.PHONY: setup build demo test test-matrix wheel wheel-check test-asan fuzz lint bench bench-e2e bench-distributed bench-fbgemm fbgemm-venv clean

setup: $(DEPS_STAMP) $(HOROVOD_STAMP) $(BUILD_STAMP)

$(DEPS_STAMP): requirements-dev.txt sok_lite/_tf_range.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $$($(PY) -c "import runpy; print(runpy.run_path('sok_lite/_tf_range.py')['minor_requirement']())") -r requirements-dev.txt
	# tf_keras requires the `tensorflow` wheel, which would install a second TF over tensorflow-cpu.
	$(PY) -m pip install --quiet --no-deps $$($(PY) -c "import runpy; print(runpy.run_path('sok_lite/_tf_range.py')['minor_requirement']('tf_keras'))")
	touch $@

$(HOROVOD_STAMP): $(DEPS_STAMP) scripts/install_horovod.sh
	bash scripts/install_horovod.sh $(PY)
	touch $@

build: $(BUILD_STAMP)
$(BUILD_STAMP): $(DEPS_STAMP) $(KERNEL_SOURCES) CMakeLists.txt setup.py pyproject.toml sok_lite/_version.py
	$(PY) -m pip install --quiet --no-build-isolation --no-deps -e .
	mkdir -p build && touch $@

demo: setup
	$(PY) examples/quickstart.py
	horovodrun -np 2 -H localhost:2 --gloo $(PY) examples/dlrm/train.py

test: setup
	$(PY) -m pytest -q --doctest-modules sok_lite tests

# The smoke subset under every supported TensorFlow minor x (its lowest Keras, the newest Keras),
# each in a fresh venv under build/matrix (docs/install.md, "Tested versions"). MINORS=2.16,2.21
# narrows it.
test-matrix:
	$(PYTHON) scripts/test_matrix.py $(if $(MINORS),--minors $(MINORS))

# A manylinux wheel for this venv's TensorFlow minor, in dist/ (docs/install.md, "Wheels");
# wheel-check also installs it into a bare venv with that TensorFlow and runs the smoke subset.
wheel: $(DEPS_STAMP)
	$(PY) scripts/build_wheel.py

wheel-check: $(DEPS_STAMP)
	$(PY) scripts/build_wheel.py --check

# The single-process suite against an ASan + UBSan build of the op library (docs/development.md).
test-asan: setup
	PYTHON=$(PY) bash scripts/run_sanitized_tests.sh

# A long op-fuzzing campaign (make test runs a bounded one).
fuzz: setup
	SOK_LITE_FUZZ_EXAMPLES=$${SOK_LITE_FUZZ_EXAMPLES:-500} SOK_LITE_FAULT_SEEDS=$${SOK_LITE_FAULT_SEEDS:-20} \
		$(PY) -m pytest -q tests/ops/fuzz/test_op_fuzz.py tests/robustness/test_fuzz_calls.py \
		tests/checkpoint/test_dump_faults.py

lint: $(DEPS_STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(VENV)/bin/clang-format --dry-run -Werror $(CXX_FILES)

bench: setup
	$(PY) benchmarks/lookup_bench.py

# model.fit of a Criteo-shaped DLRM: plain Keras, sok_lite static and hash tables, the floor.
bench-e2e: setup
	cd benchmarks && $(PY) e2e_bench.py

bench-distributed: setup
	cd benchmarks && horovodrun -np 2 -H localhost:2 --gloo $(PY) distributed_bench.py

# Our table step against FBGEMM's CPU table-batched embedding. FBGEMM runs on PyTorch, in a
# virtualenv of its own (~5 GB from the package registry; not needed by `make test`).
FBGEMM_VENV := .venv-fbgemm
FBGEMM_STAMP := $(FBGEMM_VENV)/.sok_lite_fbgemm
fbgemm-venv: $(FBGEMM_STAMP)
$(FBGEMM_STAMP):
	$(PYTHON) -m venv $(FBGEMM_VENV)
	$(FBGEMM_VENV)/bin/pip install --quiet torch==2.14.1 fbgemm-gpu-cpu==1.9.0 numpy
	touch $@

bench-fbgemm: setup fbgemm-venv
	cd benchmarks && $(PY) fbgemm_peer.py --peer-python $(abspath $(FBGEMM_VENV))/bin/python

clean:
	rm -rf build sok_lite/_sok_lite_ops*.so sok_lite/_sok_lite_*.build.json *.egg-info
