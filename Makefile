# Two commands do everything on a fresh machine: `make demo` (the main job) and `make test`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
# A pinned torch: CPU build where no NVIDIA GPU is present (an unpinned torch pulls several GB of CUDA).
TORCH  ?= torch==2.13.0
RUNS   ?= runs
STAMP  := $(VENV)/.installed

.PHONY: demo test setup clean

# System tools for full test coverage (Cortex-M builds with gcc, QEMU runs of them, callgrind counts) and for
# --synth-mix (flite's voices): installed when apt and root are at hand and they are missing; without them
# those tests use ziglang or skip.
SYSTOOLS := arm-none-eabi-gcc:gcc-arm-none-eabi qemu-system-arm:qemu-system-arm valgrind:valgrind \
            aarch64-linux-gnu-gcc:gcc-aarch64-linux-gnu flite:flite

$(STAMP): pyproject.toml Makefile
	@missing="$$(for t in $(SYSTOOLS); do command -v $${t%%:*} >/dev/null || echo $${t#*:}; done)"; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing $$missing"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing \
	   >/dev/null) || echo "apt-get failed: the tests needing $$missing will skip"; fi
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
