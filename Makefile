# rs-lightning: every target creates .venv on first use (README.md, "Quickstart").
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
DEMO_DIR := outputs/demo/$(shell date +%Y%m%d-%H%M%S)

.PHONY: venv demo test test-all lint bench clean

venv: $(STAMP)

# exact versions from constraints.txt (the library's own dependencies are lower bounds: pyproject.toml)
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet -c constraints.txt torch torchvision
	$(VENV)/bin/pip install --quiet -c constraints.txt -e '.[dev,models,diffusion]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) train.py method=gaussian sigma=0.25 hydra.run.dir=$(DEMO_DIR)/train
	$(PY) certify.py checkpoint=$(DEMO_DIR)/train/checkpoints/last.ckpt n=10000 \
		hydra.run.dir=$(DEMO_DIR)/certify

# pytest-xdist: one worker per core, at most 4 (tests/conftest.py shares the session fixtures and the cores)
XDIST := -n auto --maxprocesses 4

test: $(STAMP)
	$(PY) -m pytest -q $(XDIST)

test-all: $(STAMP)
	$(PY) -m pytest -q $(XDIST) -m ''

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(PY) -m bench.run
	$(PY) -m bench.run --competing-job --out bench/results/certify_throughput_competing.json
	$(PY) -m bench.methods
	$(PY) -m bench.certify_scaling
	$(PY) -m bench.lattice
	$(PY) -m bench.ars
	$(PY) -m bench.sequential
	$(PY) -m bench.sequential_levers
	$(PY) -m bench.denoised

# GPU device check (bench/README.md): writes bench/results/gpu.json in < 8 min on one GPU; stops at once
# without CUDA. On a machine whose python3 already has torch (a lent GPU, no .venv): make bench-gpu GPU_PY=python3
.PHONY: bench-gpu bench-gpu-smoke
GPU_PY ?= $(PY)
bench-gpu: $(if $(filter $(PY),$(GPU_PY)),$(STAMP))
	$(GPU_PY) -m bench.gpu $(BENCH_GPU_ARGS)
	$(GPU_PY) -m bench.lattice --device cuda

# the same code path on the CPU with tiny sizes (seconds); tests/bench runs it too
bench-gpu-smoke: $(STAMP)
	$(PY) -m bench.gpu --device cpu --smoke --out outputs/bench/gpu_smoke.json

clean:
	rm -rf outputs multirun lightning_logs .pytest_cache
