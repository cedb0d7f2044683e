# spotwave — the two commands of the README, and a few more for developers.
#   make demo     install missing Debian packages, configure, build the command alone, run
#                 `spotwave demo`; the rest (tests, benchmarks, man pages) then builds in the
#                 background at low priority, so that a later `make test` finds it done
#                 (SW_NO_BACKGROUND=1 to skip that)
#   make test     the same setup, then the whole test suite through ctest; the skipped tests and
#                 why, and the slowest tests, are printed after ctest's summary
#   make install  PREFIX=/path (default /usr/local): the command, libspotwave.so and .a, headers,
#                 data, man pages, spotwave.pc and the CMake package
# The CUDA backend is built when nvcc is found (CUDA_ARCH, default 90 = Hopper); else CPU-only
# (CMAKE_ARGS=-DSW_WITH_CUDA=OFF forces a CPU-only build).

BUILD      ?= build
CUDA_ARCH  ?= 90
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=
DEMO_OUT   ?= spotwave-demo
PREFIX     ?= /usr/local

# Builds in one build folder never overlap: the background build of `make demo` and a later
# `make test` or `make` take turns through this lock.
LOCK = flock $(BUILD)/.build-lock

.PHONY: all deps configure build demo test install package clean

all: build

deps:
	@scripts/install-deps

$(BUILD)/CMakeCache.txt:
	@$(MAKE) --no-print-directory deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=$(CUDA_ARCH) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_ARGS)

configure: $(BUILD)/CMakeCache.txt

build: deps configure
	$(LOCK) cmake --build $(BUILD) -j $(JOBS)

demo: deps configure
	$(LOCK) cmake --build $(BUILD) -j $(JOBS) --target spotwave_cli
	./$(BUILD)/spotwave demo --out $(DEMO_OUT)
	@if [ -z "$(SW_NO_BACKGROUND)" ]; then \
	    echo "spotwave: building the tests and benchmarks in the background (nice; log in $(BUILD)/background-build.log)"; \
	    nohup nice -n 19 $(LOCK) cmake --build $(BUILD) -j $(JOBS) >$(BUILD)/background-build.log 2>&1 </dev/null & \
	fi

test: build
	@scripts/run-tests $(BUILD) $(JOBS)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

package: build
	cd $(BUILD) && cpack -G DEB

clean:
	rm -rf $(BUILD)
