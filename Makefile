# fa: build the programs, set up the Python environment, run the main job and the tests.
#
#   make            every program this machine can build (cpu always; cuda with nvcc; hip with hipcc)
#   make run        environment + build what this machine can run + judge test case t01 with the
#                   best program here (GPU programs are built only where there is a GPU for them)
#   make test       environment + CPU build + the quick tests (GPU tests skip without a GPU)
#   make test-all   the same + the slow tests (marked slow: the wheel, Slurm, every build target)
#   make cpu | cuda | hw4 | hip | hw4-amd | hip-cuda
#   make submission submission/hw4.cu, hw4.hip and Makefile: the course's single files
#   make results    on a machine with an NVIDIA GPU: every file under docs/results/GPU/, the
#                   README's chart and docs/results.md's measured section, from this build
#                   (scripts/make_results.py; one part at a time: make results PARTS="bench floor")
#
# CUDA_ARCH: space-separated sm_XX list; default: the local GPU if one is present, else
# sm_75 sm_80 sm_90a, plus sm_61 (the course's GTX 1080) when this nvcc still lists it.
# HIP_ARCH: gfx targets; default: the local AMD GPU if present, else gfx908 gfx90a, plus
# gfx942 where this hipcc accepts it.

PYTHON ?= python3
VENV   ?= .venv
CXX    ?= g++
NVCC   ?= nvcc
HIPCC  ?= hipcc

CXXFLAGS  ?= -O3 -std=c++17 -Wall -Wextra
NVCCFLAGS ?= -O3 -std=c++17 -lineinfo
HIPFLAGS  ?= -O3 -std=c++17
# Added to nvcc's and hipcc's flags: fa sweep builds tile-size variants with it (-DFA_TILED_BR=8
# -DFA_TILED_BC=64 and the compiler's resource report) into bin/variants/.
EXTRA_FLAGS ?=

HAVE_NVCC  := $(shell command -v $(NVCC) >/dev/null 2>&1 && echo yes)
HAVE_HIPCC := $(shell command -v $(HIPCC) >/dev/null 2>&1 && echo yes)

BIN := bin
COMMON := $(wildcard src_common/host/*.h)

.PHONY: all cpu cuda hip hip-cuda hip-cuda-amd-tiles env run test test-all clean hw4 hw4-amd submission results source-revision
all: cpu $(if $(HAVE_NVCC),cuda) $(if $(HAVE_HIPCC),hip)

# ---------------------------------------------------------------- CUDA
# The local GPU's arch when one is present, else a portable list; sm_61 (the course's GTX 1080)
# only where this nvcc still lists it (CUDA 13 dropped Pascal).
# Probes are recursive variables: they run only when a CUDA or HIP target expands them.
LOCAL_SM = $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
NVCC_ARCHS = $(shell $(NVCC) --list-gpu-arch 2>/dev/null)
# Hopper (sm_90) is built as sm_90a, the target that has its warpgroup MMA (the wgmma kernel).
CUDA_ARCH ?= $(if $(LOCAL_SM),$(patsubst sm_90,sm_90a,sm_$(LOCAL_SM)),$(if $(filter compute_61,$(NVCC_ARCHS)),sm_61) sm_75 sm_80 sm_90a)
# Besides each target's machine code, the PTX of the first (oldest) one: a GPU newer than every
# target runs the program from it, JIT-compiled, with the kernels that PTX has (fp32 below sm_80).
CUDA_GENCODE = $(foreach a,$(CUDA_ARCH),-gencode=arch=compute_$(subst sm_,,$(a)),code=$(a)) \
  -gencode=arch=compute_$(subst sm_,,$(firstword $(CUDA_ARCH))),code=compute_$(subst sm_,,$(firstword $(CUDA_ARCH)))
CUDA_SRC := src_cuda/fa_cuda.cu $(wildcard src_cuda/*.cuh src_cuda/*/*.cuh) $(wildcard src_common/*.h src_common/host/*.h)

cuda: $(BIN)/fa-cuda
$(BIN)/fa-cuda: $(CUDA_SRC)
	@mkdir -p $(BIN)
	$(NVCC) $(NVCCFLAGS) $(EXTRA_FLAGS) $(CUDA_GENCODE) -Xcompiler -pthread -o $@ $<

hw4: $(BIN)/fa-cuda
	cp $< $@

# ---------------------------------------------------------------- HIP
# hipcc picks the NVIDIA platform when nvcc is installed: the AMD build names its platform.
# Targets: the local AMD GPU if present, else the course's gfx908 and MI210's gfx90a, plus
# gfx942 (MI300) where this hipcc accepts it (ROCm 5.2's clang 15 does not).
LOCAL_GFX = $(shell rocminfo 2>/dev/null | grep -o -m1 'gfx[0-9a-f]*')
HIP_ARCH_OK = $(shell t=$$(mktemp -d) && printf '#include <hip/hip_runtime.h>\n__global__ void k(){}\n' >$$t/k.hip && \
  TMPDIR=$$t HIP_PLATFORM=amd $(HIPCC) --offload-arch=$(1) -c -o /dev/null $$t/k.hip >/dev/null 2>&1 && echo $(1); rm -rf $$t)
HIP_ARCH ?= $(if $(LOCAL_GFX),$(LOCAL_GFX),gfx908 gfx90a $(if $(HAVE_HIPCC),$(call HIP_ARCH_OK,gfx942)))
HIP_SRC := src_hip/fa_hip.hip $(wildcard src_hip/*.h) $(wildcard src_common/*.h src_common/host/*.h) src_cuda/kernel_primitives.cuh

hip: $(BIN)/fa-hip
# hipcc (ROCm 5.2) leaves folders and archives in the temporary directory: it gets one of its own.
$(BIN)/fa-hip: $(HIP_SRC)
	@mkdir -p $(BIN)
	t=$$(mktemp -d) && trap 'rm -rf "$$t"' EXIT && \
	TMPDIR=$$t HIP_PLATFORM=amd $(HIPCC) $(HIPFLAGS) $(EXTRA_FLAGS) $(foreach a,$(HIP_ARCH),--offload-arch=$(a)) -pthread -o $@ $<

hw4-amd: $(BIN)/fa-hip
	cp $< $@

# The same HIP source compiled by nvcc through src_hip/hip_on_cuda.h, to run on NVIDIA GPUs.
# hip-cuda-amd-tiles: the same with the AMD simt tiles that fa-hip runs on CDNA (FA_SIMT_AMD=1):
# the tests check them on an NVIDIA GPU, where no AMD GPU is.
hip-cuda: $(BIN)/fa-hip-cuda
hip-cuda-amd-tiles: $(BIN)/fa-hip-cuda-amd-tiles
$(BIN)/fa-hip-cuda-amd-tiles: AMD_TILES := -DFA_SIMT_AMD=1
$(BIN)/fa-hip-cuda $(BIN)/fa-hip-cuda-amd-tiles: $(HIP_SRC)
	@mkdir -p $(BIN)
	$(NVCC) $(NVCCFLAGS) $(EXTRA_FLAGS) $(AMD_TILES) $(CUDA_GENCODE) -x cu -Xcompiler -pthread -o $@ $<

cpu: $(BIN)/fa-cpu
$(BIN)/fa-cpu: src_cpu/fa_cpu.cpp $(COMMON)
	@mkdir -p $(BIN)
	$(CXX) $(CXXFLAGS) -fopenmp -o $@ $<

# ---------------------------------------------------------------- the course submission
# One self-contained hw4.cu and hw4.hip (each main source with our headers inlined) and the
# course's Makefile for them, generated from the sources above: never edit them by hand.
SUBMISSION ?= submission
submission:
	$(PYTHON) scripts/bundle_submission.py $(SUBMISSION)

# ---------------------------------------------------------------- shipped results
# Parts: bench judge floor report summary (each fits a 10-minute call; all by default). fa's own
# environment where it has one, else the machine's python3 (a GPU node with numpy, click, rich,
# matplotlib, platformdirs, threadpoolctl and PyTorch).
PARTS ?=
RESULTS_PYTHON = $(if $(wildcard $(VENV)/bin/python),$(VENV)/bin/python,$(PYTHON))
results: cpu cuda hip-cuda
	$(RESULTS_PYTHON) scripts/make_results.py $(PARTS)

# Records name the commit they were made from (git); a copy of the checkout without its history
# takes it from this file, written where the history is.
source-revision:
	@{ printf '{"commit": "%s", "dirty": ' "$$(git rev-parse HEAD)" && \
	   if [ -n "$$(git status --porcelain --untracked-files=no)" ]; then echo 'true}'; else echo 'false}'; fi; } \
	   > .source-revision.tmp && mv .source-revision.tmp .source-revision && cat .source-revision

# ---------------------------------------------------------------- environment, main job, tests
$(VENV)/.installed: pyproject.toml
	@echo "creating $(VENV) (the Python packages fa needs; about a minute the first time)"
	@$(PYTHON) -m venv $(VENV)
	@# pip's and setuptools' notes go to a log, shown only if the install fails
	@{ $(VENV)/bin/pip install -q --disable-pip-version-check -e '.[test]'; } >$(VENV)/install.log 2>&1 || \
	   { cat $(VENV)/install.log; echo "make: installing into $(VENV) failed (log above: $(VENV)/install.log)"; exit 1; }
	@touch $@
env: $(VENV)/.installed

# make run: the programs this machine has a GPU for (make all builds every one its compilers can).
run: env cpu
	$(if $(LOCAL_SM),@$(MAKE) --no-print-directory cuda)
	$(if $(LOCAL_GFX),@$(MAKE) --no-print-directory hip)
	$(VENV)/bin/fa run t01 --program best

# Progress per test file; skips summarized by reason (tests/conftest.py).
PYTEST := $(VENV)/bin/python -m pytest -p no:cacheprovider
# make test: the quick tests on every core and one more (pytest-xdist: a test waits on a program
# part of its time); make test-all: every test, one at a time.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
# fa's modules are compiled once first: the tests start fa hundreds of times, and where
# PYTHONDONTWRITEBYTECODE is set each start would compile them again.
test: env cpu
	@$(VENV)/bin/python -m compileall -q fa_cli >/dev/null
	$(PYTEST) -m 'not slow' -n $(TEST_WORKERS) $(PYTEST_ARGS)

# test-all also installs the optional CUDA 12 ptxas (fa-toolkit[gtx1080]), so that the sm_61 tests run.
test-all: env cpu
	@$(VENV)/bin/pip install -q --disable-pip-version-check -e '.[test,gtx1080]' >>$(VENV)/install.log 2>&1 || \
	  echo "make: the optional CUDA 12 ptxas did not install (tests/test_pascal.py skips; $(VENV)/install.log)"
	$(PYTEST) $(PYTEST_ARGS)

clean:
	rm -rf $(BIN) hw4 hw4-amd submission
