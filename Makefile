# The two commands a newcomer needs:
#   make demo   - install build deps if missing, build, run the main job
#   make check  - build and run every test through ctest
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
WERROR := $(if $(CI),ON,OFF)
CMAKE_ARGS ?=

.PHONY: all deps build demo check check-asan bench clean

all: build

deps:
	@bash tools/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DTSL_WERROR=$(WERROR) $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# the demo builds quietly: its own output is what a newcomer reads
demo: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DTSL_WERROR=$(WERROR) $(CMAKE_ARGS) >/dev/null
	@echo "building tensile (log: $(BUILD)/build.log) ..."
	@cmake --build $(BUILD) -j $(JOBS) >$(BUILD)/build.log 2>&1 || { tail -n 40 $(BUILD)/build.log; exit 1; }
	@$(BUILD)/bin/tensile demo

check: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The same tests under AddressSanitizer + UndefinedBehaviorSanitizer.
check-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTSL_SANITIZE=ON -DTSL_FUZZ=OFF -DTSL_WERROR=$(WERROR) $(CMAKE_ARGS) >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	@cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		TSL_ASAN=1 ctest --output-on-failure -j $(JOBS)

bench: build
	@$(BUILD)/bin/tensile bench ops

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
