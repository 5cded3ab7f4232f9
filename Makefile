# Two commands do everything on a fresh machine: `make demo` (the main job) and `make test`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
# A pinned torch: CPU build where no NVIDIA GPU is present (an unpinned torch pulls several GB of CUDA).
TORCH  ?= torch==2.13.0
RUNS   ?= runs
STAMP  := $(VENV)/.installed

.PHONY: demo test setup clean

# System tools for full test coverage (Cortex-M builds with gcc, QEMU runs of them, callgrind counts) and for
# --synth-mix (the recorded speakers' voices: flite, MBROLA, SVOX Pico, Festival): installed when apt and root are at
# hand and they are missing; without them those tests use ziglang or skip. MBROLA and Pico are in Debian's contrib and
# non-free components, which are enabled for them (a file in /etc/apt/sources.list.d) on Debian if apt lacks them.
SYSTOOLS := arm-none-eabi-gcc:gcc-arm-none-eabi qemu-system-arm:qemu-system-arm valgrind:valgrind \
            aarch64-linux-gnu-gcc:gcc-aarch64-linux-gnu flite:flite espeak-ng:espeak-ng \
            text2wave:festival /usr/share/festival/voices/english/ked_diphone:festvox-kdlpc16k
MBROLA_VOICES := us1 us2 us3 en1  # recorded.Mbrola.BASES
NONFREE  := mbrola:mbrola pico2wave:libttspico-utils $(foreach v,$(MBROLA_VOICES),/usr/share/mbrola/$(v)/$(v):mbrola-$(v))
NONFREE_SOURCES := /etc/apt/sources.list.d/edgeosc-contrib-non-free.sources
# the packages of those tools (or files) that are absent
absent = $$(for t in $(1); do c=$${t%%:*}; { command -v $$c || [ -e $$c ]; } >/dev/null || echo $${t\#*:}; done)
APT := DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends

$(STAMP): pyproject.toml Makefile
	@main="$(call absent,$(SYSTOOLS))"; nonfree="$(call absent,$(NONFREE))"; \
	if [ -n "$$main$$nonfree" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo installing $$main $$nonfree; apt-get update -qq; \
	  if [ "$$(apt-cache madison $$nonfree 2>/dev/null | awk '{print $$1}' | sort -u | wc -l)" -lt "$$(echo $$nonfree | wc -w)" ] \
	     && . /etc/os-release && [ "$$ID" = debian ]; then \
	    echo "enabling Debian contrib and non-free in $(NONFREE_SOURCES)"; \
	    printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: contrib non-free\nSigned-By: %s\n' \
	      "$$VERSION_CODENAME" /usr/share/keyrings/debian-archive-keyring.gpg > $(NONFREE_SOURCES); apt-get update -qq; fi; \
	  for pkgs in "$$main" "$$nonfree"; do [ -z "$$pkgs" ] || $(APT) $$pkgs >/dev/null \
	    || echo apt-get failed: the tests needing $$pkgs will skip; done; fi
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
