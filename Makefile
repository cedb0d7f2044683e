# spotwave — the two commands of the README, and a few more for developers.
#   make demo   install missing Debian packages, configure, build, run `spotwave demo`
#   make test   the same setup, then the whole test suite through ctest
# The CUDA backend is built when nvcc is found (CUDA_ARCH, default 90 = Hopper); else CPU-only.

BUILD      ?= build
CUDA_ARCH  ?= 90
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=
DEMO_OUT   ?= spotwave-demo

.PHONY: all deps configure build demo test clean

all: build

deps:
	@scripts/install-deps

$(BUILD)/CMakeCache.txt:
	@$(MAKE) --no-print-directory deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=$(CUDA_ARCH) $(CMAKE_ARGS)

configure: $(BUILD)/CMakeCache.txt

build: deps configure
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	./$(BUILD)/spotwave demo --out $(DEMO_OUT)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD)
