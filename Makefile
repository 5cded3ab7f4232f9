# Two commands do everything on a fresh machine: `make demo` (the main job) and `make test`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
# A pinned torch: CPU build where no NVIDIA GPU is present (an unpinned torch pulls several GB of CUDA).
TORCH  ?= torch==2.13.0
RUNS   ?= runs
STAMP  := $(VENV)/.installed

.PHONY: demo test setup clean

$(STAMP): pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e ".[test]"
	touch $@

setup: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/edgeosc pipeline --out $(RUNS)/demo

test: $(STAMP)
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) $(RUNS) .cache
