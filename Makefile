# Two commands do everything on a fresh machine: `make demo` (the main job) and `make test`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
# A pinned torch: CPU build where no NVIDIA GPU is present (an unpinned torch pulls several GB of CUDA).
TORCH  ?= torch==2.13.0
RUNS   ?= runs
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast setup apt-sources clean

# System tools for full test coverage (Cortex-M builds with gcc, QEMU runs of them, callgrind counts) and for
# --synth-mix (the recorded speakers' voices: flite, MBROLA, SVOX Pico, Festival): installed system-wide with apt-get
# when apt and root are at hand and they are missing; without them those tests use ziglang or skip. MBROLA and Pico are
# in Debian's contrib and non-free components: if apt lacks them, on Debian, a file in /etc/apt/sources.list.d
# (edgeosc-contrib-non-free.sources) enables those two components with the URIs, suites and Signed-By of this
# machine's own Debian entries (deb822 files in /etc/apt/sources.list.d, one-line deb lines in sources.list and
# sources.list.d/*.list), so apt keeps the mirror you chose; `make apt-sources` prints that file and writes nothing.
# SYSTEM=0 (`make test SYSTEM=0`, or EDGEOSC_NO_APT=1 in the environment) skips every system-wide step: no apt-get, no
# sources file; only .venv is written.
SYSTEM ?= $(if $(filter-out 0,$(EDGEOSC_NO_APT)),0,1)
SYSTOOLS := arm-none-eabi-gcc:gcc-arm-none-eabi qemu-system-arm:qemu-system-arm valgrind:valgrind \
            aarch64-linux-gnu-gcc:gcc-aarch64-linux-gnu flite:flite espeak-ng:espeak-ng \
            text2wave:festival /usr/share/festival/voices/english/ked_diphone:festvox-kdlpc16k
MBROLA_VOICES := us1 us2 us3 en1  # recorded.Mbrola.BASES
NONFREE  := mbrola:mbrola pico2wave:libttspico-utils $(foreach v,$(MBROLA_VOICES),/usr/share/mbrola/$(v)/$(v):mbrola-$(v))
NONFREE_SOURCES := /etc/apt/sources.list.d/edgeosc-contrib-non-free.sources
# the packages of those tools (or files) that are absent
absent = $$(for t in $(1); do c=$${t%%:*}; { command -v $$c || [ -e $$c ]; } >/dev/null || echo $${t\#*:}; done)
APT := DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends
# this machine's apt sources (one-line or deb822), less the file written here
APT_LISTS = $$(for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do \
              [ -f "$$f" ] && [ "$$f" != $(NONFREE_SOURCES) ] && echo "$$f"; done)
# deb822 stanzas with Components "contrib non-free" for each enabled "deb" entry with a suite of this release
# ($VERSION_CODENAME or $VERSION_CODENAME-*), keeping its URIs, suites and Signed-By
NONFREE_STANZAS = (. /etc/os-release && awk -v codename="$$VERSION_CODENAME" "$$NONFREE_AWK" $(APT_LISTS) /dev/null)
define NONFREE_AWK
function release(s,   n, a, i) {
  n = split(s, a, " ")
  for (i = 1; i <= n; i++) if (a[i] == codename || index(a[i], codename "-") == 1) return 1
  return 0
}
function emit(u, s, k) {
  if ((u, s, k) in seen) return
  seen[u, s, k] = 1
  printf "%sTypes: deb\nURIs: %s\nSuites: %s\nComponents: contrib non-free\n", (emitted++ ? "\n" : ""), u, s
  if (k != "") printf "Signed-By: %s\n", k
}
function flush() {
  if (types ~ /(^| )deb( |$$)/ && tolower(enabled) !~ /^(no|false)$$/ && uris != "" && release(suites))
    emit(uris, suites, signed)
  types = uris = suites = signed = enabled = field = ""
}
FNR == 1 { flush(); oneline = FILENAME !~ /\.sources$$/ }
/^[ \t]*#/ { next }
oneline {
  n = split($$0, w, " "); if (w[1] != "deb") next
  i = 2; k = ""
  if (w[2] ~ /^\[/) for (; i <= n; i++) {
    o = w[i]; gsub(/[\[\]]/, "", o)
    if (index(o, "signed-by=") == 1) k = substr(o, 11)
    if (w[i] ~ /\]$$/) { i++; break }
  }
  if (release(w[i + 1])) emit(w[i], w[i + 1], k)
  next
}
/^[ \t]*$$/ { flush(); next }
/^[ \t]/ {
  if (field == "signed-by") signed = signed "\n" $$0
  v = $$0; gsub(/^[ \t]+|[ \t]+$$/, "", v)
  if (field == "uris") uris = uris " " v; else if (field == "suites") suites = suites " " v
  next
}
{
  c = index($$0, ":"); field = tolower(substr($$0, 1, c - 1)); v = substr($$0, c + 1); gsub(/^[ \t]+|[ \t]+$$/, "", v)
  if (field == "types") types = v; else if (field == "uris") uris = v; else if (field == "suites") suites = v
  else if (field == "signed-by") signed = v; else if (field == "enabled") enabled = v
}
END { flush() }
endef
export NONFREE_AWK

$(STAMP): pyproject.toml Makefile
	@main="$(call absent,$(SYSTOOLS))"; nonfree="$(call absent,$(NONFREE))"; \
	if [ -z "$$main$$nonfree" ]; then :; \
	elif [ "$(SYSTEM)" = 0 ]; then \
	  echo "SYSTEM=0 or EDGEOSC_NO_APT=1: not installing $$main $$nonfree; the tests needing them skip"; \
	elif [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	  echo "not root or no apt-get: not installing $$main $$nonfree; the tests needing them skip"; \
	else \
	  echo installing $$main $$nonfree; apt-get update -qq; \
	  if [ "$$(apt-cache madison $$nonfree 2>/dev/null | awk '{print $$1}' | sort -u | wc -l)" -lt "$$(echo $$nonfree | wc -w)" ] \
	     && . /etc/os-release && [ "$$ID" = debian ]; then \
	    stanzas="$$( $(NONFREE_STANZAS) )"; \
	    if [ -n "$$stanzas" ]; then \
	      echo "enabling Debian contrib and non-free in $(NONFREE_SOURCES), with the URIs of your apt sources"; \
	      printf '%s\n' "$$stanzas" > $(NONFREE_SOURCES); apt-get update -qq; \
	    else echo "no Debian $$VERSION_CODENAME entry in the apt sources to add contrib and non-free to"; fi; fi; \
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

# the tests not marked slow (no training runs or whole-model exports; single kernels are built and emulated)
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

# The Raspberry Pi bundle of RUN proven on Raspberry Pi OS's Debian (bookworm and trixie, arm64) under user-mode QEMU:
# pip install, run_bench.sh, listen, the custom op built by its gcc, int8 outputs vs x86 (edgeosc/pi_check.py). Functional, not a
# measurement; minutes (the userland is built once under $$EDGEOSC_CACHE or ~/.cache/edgeosc); not part of `make test`.
.PHONY: pi-check
pi-check: | $(STAMP)
	@test -n "$(RUN)" || { echo "usage: make pi-check RUN=runs/demo (a pipeline run)"; exit 2; }
	@need="$(call absent,debootstrap:debootstrap qemu-aarch64-static:qemu-user-static)"; \
	if [ -n "$$need" ] && [ "$(SYSTEM)" != 0 ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo installing $$need; apt-get update -qq && $(APT) $$need >/dev/null; fi
	$(VENV)/bin/edgeosc deploy --target rpi $(RUN) --check --suite bookworm --suite trixie

apt-sources:  # print what `make setup` would write to $(NONFREE_SOURCES) if apt lacked MBROLA or Pico; writes nothing
	@$(NONFREE_STANZAS)

clean:
	rm -rf $(VENV) $(RUNS) .cache
