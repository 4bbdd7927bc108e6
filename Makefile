# The two commands of the README.
DATA_ROOT ?= /var/lib/socialweb-kcp

.PHONY: run test check-fast install bench

# Installs the pinned components and builds our binaries (idempotent), then runs the
# cluster provider with its own front until Ctrl-C; bin/socialweb-kcp talks to it.
run: install
	bin/socialweb-clusterprovider serve --data-root $(DATA_ROOT) --bin-dir $(CURDIR)/bin

# Every test, live ones included (what CI runs).
test:
	bash deploy/check.sh

check-fast:
	bash deploy/check.sh --fast

install:
	bash deploy/install-components.sh

bench: install
	go run ./bench/spawn -runs 3
