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

.PHONY: all demo test test-c test-py sanitize bench venv clean

all: venv $(BUILD)/nkrt_tests

# ---- Python environment -------------------------------------------------
$(VENV)/.deps: Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "numpy>=1.24" "ml_dtypes>=0.3" "pytest>=7" "hypothesis>=6" setuptools wheel
	$(PY) -m pip install -q "torch==2.13.0"
	touch $@

$(VENV)/.built: $(VENV)/.deps $(RT_SRC) $(RT_HDR) spike/_spike.c setup.py pyproject.toml
	$(PY) -m pip install -q --no-build-isolation --no-deps -e .
	$(PY) setup.py -q build_ext --inplace
	touch $@

venv: $(VENV)/.built

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

test-c: $(BUILD)/nkrt_tests $(NEFFS)
	NKRT_TEST_NEFF_DIR=$(BUILD)/neff $(BUILD)/nkrt_tests

sanitize: $(BUILD)/nkrt_tests_san $(NEFFS)
	NKRT_TEST_NEFF_DIR=$(BUILD)/neff ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 $(BUILD)/nkrt_tests_san

# ---- Python tests -------------------------------------------------------
test-py: venv $(NEFFS)
	NKRT_TEST_NEFF_DIR=$(BUILD)/neff $(PY) -m pytest -q tests

test: test-c sanitize test-py

# ---- Demo and benchmarks ------------------------------------------------
demo: venv
	$(PY) examples/demo_spike.py

# matplotlib only draws docs/benchmarks/runtime.png; without it the PNG is skipped.
$(VENV)/.bench-deps: $(VENV)/.deps
	$(PY) -m pip install -q matplotlib || echo "matplotlib not installed: no PNG"
	touch $@

bench: venv $(VENV)/.bench-deps $(BUILD)/bench_nkrt $(NEFFS)
	$(PY) bench/run.py --c-bench $(BUILD)/bench_nkrt --neff-dir $(BUILD)/neff

$(BUILD)/bench_nkrt: $(RT_SRC) $(RT_HDR) bench/bench_nkrt.c
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS_OPT) $(RT_SRC) bench/bench_nkrt.c -o $@ $(LDLIBS)

clean:
	rm -rf $(BUILD) spike/*.so $(VENV)/.built
