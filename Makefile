# Convenience wrapper around CMake. `make demo` and `make check` do all set-up.
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 25
FUZZ_OPS_SECONDS ?= 90
FUZZ_NPY_SECONDS ?= 20
PREFIX ?= /usr/local
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build demo check check-optimized check-unoptimized check-coretypes asan fuzz format lint install bench clean

all: build

deps:
	@./scripts/deps.sh

# Runs after deps (its prerequisite), also under make -j. cmake is re-run every time (cheap
# when nothing changed) so CMAKE_FLAGS and PREFIX always apply, not only at first configure;
# values set this way stay in build/CMakeCache.txt until changed again or `make clean`.
configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=$(PREFIX) \
	  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	./$(BUILD)/demo --save $(BUILD)/demo-cnn

check: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The suite with every graph pass on in every session (the default, spelled out so it stays
# so whatever the default becomes), and with none (graphs run as built); docs/optimizer.md.
check-optimized: build
	cd $(BUILD) && NABLA_OPTIMIZE=all ctest --output-on-failure -j $(JOBS)
check-unoptimized: build
	cd $(BUILD) && NABLA_OPTIMIZE=none ctest --output-on-failure -j $(JOBS)

# The numeric tests (CTest label "numeric") under each OpenBLAS core type of CORETYPES, on
# one core and on two; a core type this CPU cannot run is skipped with a line saying so.
CORETYPES ?= Haswell SkylakeX Zen
check-coretypes: build
	./scripts/check_coretypes.sh $(BUILD) $(CORETYPES)

# The whole suite under AddressSanitizer + UndefinedBehaviorSanitizer, warnings as errors,
# built with clang (the main build uses gcc, so CI covers both compilers).
asan: deps
	CC=clang CXX=clang++ cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DNABLA_SANITIZE=ON -DNABLA_WERROR=ON
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

# libFuzzer (clang, ASan + UBSan, LeakSanitizer) on the IDX reader and on the checkpoint
# reader (fuzz/fuzz_checkpoint.c) for FUZZ_SECONDS each, on op programs (fuzz/fuzz_ops.c)
# for FUZZ_OPS_SECONDS, on the .npy reader for FUZZ_NPY_SECONDS, then on the GraphDef reader
# (fuzz/fuzz_graphdef.c) and the SavedModel reader (fuzz/fuzz_saved_model.c) for FUZZ_SECONDS
# each; every target starts from its committed seeds in fuzz/corpus/<target>. Inputs they
# find go to $(FUZZ_BUILD)/corpus-<target>; a crash stops the run with a non-zero status and leaves the input as $(FUZZ_BUILD)/crash-*.
# Op programs grow with their attrs, so that target may use up to 256 bytes at once.
FUZZ_RUN = ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  $(FUZZ_BUILD)/fuzz/fuzz_$(1) -max_total_time=$(2) -rss_limit_mb=2048 -print_final_stats=1 \
  $(3) -artifact_prefix=$(FUZZ_BUILD)/ $(FUZZ_BUILD)/corpus-$(1) fuzz/corpus/$(1)
fuzz: deps
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNABLA_FUZZ=ON \
	  -DNABLA_WERROR=ON -DNABLA_TESTS=OFF -DNABLA_BENCH=OFF
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_idx fuzz_checkpoint fuzz_ops fuzz_npy fuzz_graphdef \
	  fuzz_saved_model
	mkdir -p $(FUZZ_BUILD)/corpus-idx $(FUZZ_BUILD)/corpus-checkpoint $(FUZZ_BUILD)/corpus-ops \
	  $(FUZZ_BUILD)/corpus-npy $(FUZZ_BUILD)/corpus-graphdef $(FUZZ_BUILD)/corpus-saved_model
	$(call FUZZ_RUN,idx,$(FUZZ_SECONDS))
	$(call FUZZ_RUN,checkpoint,$(FUZZ_SECONDS))
	$(call FUZZ_RUN,ops,$(FUZZ_OPS_SECONDS),-max_len=256 -len_control=0)
	$(call FUZZ_RUN,npy,$(FUZZ_NPY_SECONDS))
	$(call FUZZ_RUN,graphdef,$(FUZZ_SECONDS))
	$(call FUZZ_RUN,saved_model,$(FUZZ_SECONDS))

# The C and C++ sources clang-format owns (.clang-format); tests/golden holds generated tables.
CLANG_FORMAT ?= clang-format
CLANG_TIDY ?= clang-tidy
FORMAT_FILES = $(shell find src include tools tests bench examples fuzz -path tests/golden -prune -o \
  -type f \( -name '*.c' -o -name '*.h' -o -name '*.cpp' \) -print | sort)

# Rewrites the sources in place in the project's style. Twice: clang-format 14 settles some
# macro bodies (backslash-continued lists of calls) only on its second pass.
format: deps
	$(CLANG_FORMAT) -i $(FORMAT_FILES)
	$(CLANG_FORMAT) -i $(FORMAT_FILES)

# Fails on any source clang-format would change, then runs clang-tidy (the checks in
# .clang-tidy, warnings as errors) on the library sources with the build's compile commands
# (the build also generates the protobuf-c header the checkpoint code includes).
lint: build
	$(CLANG_FORMAT) --dry-run -Werror $(FORMAT_FILES)
	find src -name '*.c' | sort | xargs -P $(JOBS) -n 4 $(CLANG_TIDY) -p $(BUILD) --quiet

install: build
	cmake --install $(BUILD)

# Every benchmark program; bench/dist under mpirun as a job of one and of two ranks.
bench: build
	./$(BUILD)/bench/peak
	./$(BUILD)/bench/matmul
	./$(BUILD)/bench/eager_ops
	./$(BUILD)/bench/grad_build 10000 100000
	./$(BUILD)/bench/eager_chain
	./$(BUILD)/bench/dataset
	./$(BUILD)/bench/conv
	./$(BUILD)/bench/batch_norm
	./$(BUILD)/bench/train_step
	./$(BUILD)/bench/rnn
	./$(BUILD)/bench/checkpoint
	./$(BUILD)/bench/formats
	./$(BUILD)/bench/forward
	./$(BUILD)/bench/optimize
	./$(BUILD)/bench/fusion
	mpirun --oversubscribe --allow-run-as-root -np 1 ./$(BUILD)/bench/dist
	mpirun --oversubscribe --allow-run-as-root -np 2 ./$(BUILD)/bench/dist

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
