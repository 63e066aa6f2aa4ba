# Set-up and entry points. Every target creates .venv at the repo root when it is missing
# (or when the pins changed) and installs the package with its pinned dependencies.
PYTHON ?= python3
VENV := .venv
PY := $(abspath $(VENV))/bin/python
STAMP := $(VENV)/.installed
export PYSPARK_PYTHON := $(PY)
export PYSPARK_DRIVER_PYTHON := $(PY)

.PHONY: test demo bench lint java cc browser zookeeper js venv clean

venv: $(STAMP)

# The Cython extensions (setup.py) are compiled at install, so a change to them reinstalls.
$(STAMP): pyproject.toml constraints.txt Makefile setup.py $(wildcard sparklog/*/*.pyx sparklog/*/*.pxd) | cc
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	@# compat mode: a plain path entry, so pkgutil (and with it PySpark's auto-registration of
	@# pyspark_sparklog in its Python workers) sees the top-level module from any directory
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt \
		--config-settings editable_mode=compat -e '.[dev]'
	@touch $(STAMP)

# The extensions need a C compiler and Python's headers; install the distribution's when
# missing (without them pip still installs sparklog, on its pure Python fallbacks).
cc:
	@if ! command -v cc >/dev/null 2>&1 || ! test -f "$$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h"; then \
		echo "C compiler or Python headers not found: installing gcc and python3-dev"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc python3-dev) \
		|| { echo "could not install a C compiler: install gcc and retry" >&2; exit 1; }; \
	fi

# Spark 4 needs Java 17 or newer; install OpenJDK 17 from the distribution when missing.
java:
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then \
		echo "Java 17+ not found: installing openjdk-17-jre-headless"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless) \
		|| { echo "could not install Java 17: install it and retry" >&2; exit 1; }; \
	fi

# The status page's test drives Debian's Chromium through its ChromeDriver; install both
# from the distribution when missing.
browser:
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
		echo "Chromium or ChromeDriver not found: installing chromium chromium-driver"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			chromium chromium-driver) \
		|| { echo "could not install Chromium: install it and retry" >&2; exit 1; }; \
	fi

# The cluster tests (and `sparklog cluster up`) run a throwaway ZooKeeper from Debian's
# package (its jars in /usr/share/java); install it when missing.
zookeeper: java
	@if [ ! -f /usr/share/java/zookeeper.jar ]; then \
		echo "ZooKeeper not found: installing zookeeper"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper) \
		|| { echo "could not install ZooKeeper: install it and retry" >&2; exit 1; }; \
	fi

# The JavaScript clients' tests (tests/test_js_clients.py) run kafkajs and @platformatic/kafka
# on Node.js: install the distribution's nodejs and npm when missing, then the packages pinned
# in tests/js/package-lock.json (again only when the pins changed).
JS_STAMP := tests/js/node_modules/.installed

js: $(JS_STAMP)

$(JS_STAMP): tests/js/package.json tests/js/package-lock.json
	@if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then \
		echo "Node.js or npm not found: installing nodejs npm"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm) \
		|| { echo "could not install Node.js: install nodejs and npm and retry" >&2; exit 1; }; \
	fi
	@cd tests/js && npm ci --no-audit --no-fund --loglevel=error \
		|| { echo "could not install the JavaScript clients (npm ci in tests/js): check the network and retry" >&2; exit 1; }
	@touch $(JS_STAMP)

test: $(STAMP) java browser zookeeper js
	$(PY) -m pytest $(PYTEST_ARGS)

demo: $(STAMP) java
	$(PY) -m sparklog.demo

bench: $(STAMP) java
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info sparklog/*/_*.c sparklog/*/*.so
