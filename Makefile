# `make run` and `make test` on a fresh Debian 12 machine (python3, make; root
# installs the Debian packages the tests need), `make install` for a real install.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DATA_DIR ?= ./var
# pytest-xdist workers: measured on the 2-core machine (docs/DEVELOPING.md, "Tests").
TEST_WORKERS ?= 3

PREFIX ?= /opt/contentnode
BINDIR ?= /usr/local/bin
UNITDIR ?= /etc/systemd/system
CONFDIR ?= /etc/contentnode

.PHONY: run test peers bench install uninstall dist-check deb boot-check clean openapi

# Debian 12's pip (23) installs the editable package as it is: no pip upgrade. The tests'
# venv is one install of the package with both extras (it holds everything `run` needs):
# pip installs uv, and uv the rest, in a few seconds where pip takes about 45 s (docs/
# DEVELOPING.md, "Tests"). --system-certs: uv trusts the system's CA certificates, as pip does.
UV_VERSION := 0.13.9
$(PY):
	$(PYTHON) tests/peers/check.py --install-venv
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: setup.cfg pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[images,zstd,brotli,geoip]'
	touch $@

$(VENV)/.test-installed: setup.cfg pyproject.toml | $(PY)
	$(PY) -m pip install --quiet 'uv==$(UV_VERSION)'
	$(VENV)/bin/uv pip install --quiet --system-certs --python $(PY) -e '.[images,test]'
	touch $@ $(VENV)/.installed

# exec: no shell between make and the daemon; stopped through its process group, the daemon gets
# SIGTERM from the group and again from make, which it takes as one (a drain, docs/API.md)
run: $(VENV)/.installed
	exec $(VENV)/bin/contentnode serve --data-dir $(DATA_DIR)

# The HTTP cache test suite (tests/test_cache_suite.py) from the npm registry, as its lock pins it;
# again only when the lock changed, with no package's install scripts run (none needs one).
# npm's cache goes to $$HOME/.npm (CI: a fresh HOME each run).
CACHE_SUITE := tests/cache_suite
$(CACHE_SUITE)/node_modules/.installed: $(CACHE_SUITE)/package.json $(CACHE_SUITE)/package-lock.json
	cd $(CACHE_SUITE) && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --no-update-notifier --loglevel=error
	touch $@

# Debian peers first (root installs them, anyone else is told the command), then the suite's npm
# packages (npm is one of those peers), then one check of all.
peers: $(VENV)/.test-installed
	$(PYTHON) tests/peers/check.py --install
	$(MAKE) --no-print-directory $(CACHE_SUITE)/node_modules/.installed
	$(PY) tests/peers/check.py

# One file per worker at a time, the longest files first (tests/conftest.py STARTED_FIRST).
# Byte code written even where the shell sets PYTHONDONTWRITEBYTECODE: without it every daemon a
# test starts compiles the package again (~0.7 s of CPU each) and every pytest process compiles
# pytest, its plugins and the rewritten test files again (~15 s of CPU each; docs/DEVELOPING.md).
test: peers
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder tests

# docs/openapi.json is generated from the route table; a test fails when it is stale.
openapi: $(VENV)/.installed
	$(PY) -c 'import contentnode.api as api, sys; sys.stdout.write(api.openapi_json())' > docs/openapi.json

bench: $(VENV)/.test-installed
	$(PY) bench/run.py

# A venv of its own under PREFIX, the command in BINDIR, the unit, the example config
# (never over an existing one). Running it again upgrades in place; the data stays.
# The venv is made from the system's python3, never PATH's: the unit's ProtectHome=yes
# hides /root and /home, so a venv on a pyenv interpreter there cannot even start (rc 127).
# A venv an older install made from such an interpreter is made again.
INSTALL_PYTHON ?= /usr/bin/python3
install:
	@real=$$(readlink -f $(INSTALL_PYTHON)); if [ ! -x "$$real" ]; then \
	  echo "make install: $(INSTALL_PYTHON) is missing: apt-get install -y python3 python3-venv" >&2; exit 1; fi; \
	case "$$real" in /root/*|/home/*|/run/user/*) \
	  echo "make install: $(INSTALL_PYTHON) ($$real) is not a system interpreter the unit can run" \
	       "(ProtectHome=yes hides home folders); install Debian's python3 or pass INSTALL_PYTHON=/usr/bin/python3.11" >&2; \
	  exit 1;; esac
	$(INSTALL_PYTHON) tests/peers/check.py --install-venv
	if [ -f $(PREFIX)/pyvenv.cfg ] && [ "$$(readlink -f $(PREFIX)/bin/python)" != "$$(readlink -f $(INSTALL_PYTHON))" ]; then \
	  echo "make install: $(PREFIX) runs on $$(readlink -f $(PREFIX)/bin/python); making it again on $(INSTALL_PYTHON)"; \
	  $(INSTALL_PYTHON) -m venv --clear $(PREFIX); fi
	test -x $(PREFIX)/bin/python || $(INSTALL_PYTHON) -m venv $(PREFIX)
	$(PREFIX)/bin/python -m pip install --quiet --upgrade '.[images,zstd,brotli,geoip]'
	install -D -m 0644 -t $(PREFIX)/share/doc/contentnode README.md docs/API.md LICENSE
	ln -sfn $(PREFIX)/bin/contentnode $(BINDIR)/contentnode
	install -D -m 0644 contrib/contentnode.service $(UNITDIR)/contentnode.service
	test -e $(CONFDIR)/contentnode.toml || install -D -m 0644 contrib/contentnode.toml $(CONFDIR)/contentnode.toml
	if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
	@echo "installed $$($(BINDIR)/contentnode --version); start it: systemctl enable --now contentnode"

# Removes the program, the link and the unit; keeps the config and /var/lib/contentnode (the data).
uninstall:
	if [ -d /run/systemd/system ]; then systemctl disable --now contentnode || true; fi
	rm -f $(UNITDIR)/contentnode.service
	if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
	if [ "$$(readlink $(BINDIR)/contentnode)" = "$(PREFIX)/bin/contentnode" ]; then rm -f $(BINDIR)/contentnode; fi
	if [ -f $(PREFIX)/pyvenv.cfg ]; then rm -rf $(PREFIX); fi   # only a venv make install made
	@echo "removed contentnode; kept $(CONFDIR) and /var/lib/contentnode"

# sdist + wheel, the wheel installed into a clean venv, `contentnode --version`, serve to /healthz.
dist-check: $(VENV)/.test-installed
	$(PY) tests/dist_check.py

# dist/contentnode_<version>_amd64.deb and _arm64.deb: the program, every dependency and extra
# for that architecture (wheels fetched now), the unit, config, docs; installs with no network.
deb: | $(PY)
	$(PY) packaging/build_deb.py

# The installed unit under a real systemd (PID 1 in a container), on two CPUs and on one,
# with an upgrade from the previous version: tests/boot_check.py. Root only.
boot-check: $(VENV)/.test-installed
	$(PYTHON) tests/peers/check.py --install-boot
	$(PY) tests/boot_check.py

clean:
	rm -rf $(VENV) build dist *.egg-info
