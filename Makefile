# acemq-flow — see README.md. Every target works on a fresh machine with Go;
# `make services` installs and starts RabbitMQ and PostgreSQL when missing.

GO        ?= go
BIN       := bin
PLUGINS   := $(notdir $(wildcard examples/plugins/*))
GO_PLUGINS:= $(foreach p,$(PLUGINS),$(if $(wildcard examples/plugins/$(p)/main.go),$(p)))
FLOWS     ?= examples/flows

export ACEMQ_TEST_AMQP_URL     ?= amqp://guest:guest@127.0.0.1:5672/
export ACEMQ_TEST_POSTGRES_URL ?= postgres://acemq:acemq@127.0.0.1:5432/test?sslmode=disable
export ACEMQ_TEST_PYTHON       ?= /usr/bin/python3
# The services' TLS listeners and the test CA's files (scripts/services-tls.sh).
export ACEMQ_TEST_TLS_DIR          ?= /var/lib/acemq-flow/tls
export ACEMQ_TEST_AMQPS_URL        ?= amqps://guest:guest@localhost:5671/
export ACEMQ_TEST_POSTGRES_TLS_URL ?= postgres://acemq:acemq@localhost:5432/test
export CGO_ENABLED             ?= 0

.PHONY: all build test run bench chaos chaos-short cluster cluster-stop generate lint services fuzz clean image image-test

all: build

build:
	@mkdir -p $(BIN)/plugins
	$(GO) build -trimpath -buildvcs=auto -o $(BIN)/acemq-flow ./cmd/acemq-flow
	@for p in $(GO_PLUGINS); do \
		echo "$(GO) build -o $(BIN)/plugins/$$p ./examples/plugins/$$p"; \
		$(GO) build -trimpath -o $(BIN)/plugins/$$p ./examples/plugins/$$p || exit 1; \
	done

services:
	@scripts/services.sh

# The test command CI runs (.ci/run): every package against the real broker
# and database, then a short fuzz of the flow loader.
test: services build
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 25m ./...
	$(GO) test -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime 15s -fuzzminimizetime 5s ./spec
	$(GO) test -run '^$$' -fuzz '^FuzzParseItinerary$$' -fuzztime 10s -fuzzminimizetime 5s ./runtime/decide
	$(GO) test -run '^$$' -fuzz '^FuzzReadClaimCheck$$' -fuzztime 10s -fuzzminimizetime 5s ./runtime/decide
	$(GO) test -run '^$$' -fuzz '^FuzzReadAvroFrame$$' -fuzztime 10s -fuzzminimizetime 5s ./runtime/codec
	$(MAKE) -s chaos-short

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime 5m ./spec
	$(GO) test -run '^$$' -fuzz '^FuzzFastDecode$$' -fuzztime 2m ./runtime/codec
	$(GO) test -run '^$$' -fuzz '^FuzzFastEncode$$' -fuzztime 2m ./runtime/codec
	$(GO) test -run '^$$' -fuzz '^FuzzFastEncodeRoundTrip$$' -fuzztime 2m ./runtime/codec

# The main job: the example flows with their example plugins against the
# local RabbitMQ, until Ctrl-C (which drains). Send an order from another
# terminal: see README.md.
RUN_FLOWS ?= examples/flows/fulfilment.yaml examples/flows/approval.yaml examples/flows/place-order.yaml
RUN_STORE ?= sqlite:acemq.db
run: build
	@scripts/services.sh rabbitmq
	$(BIN)/acemq-flow validate $(FLOWS)
	$(BIN)/acemq-flow run --store $(RUN_STORE) --create-schema $(RUN_FLOWS)

# Speed, as ratios against raw amqp091-go in the same run (see DESIGN.md).
bench: services build
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 ./test/bench ./plugins/host ./runtime/decide ./runtime/relay ./spec

# Long fault injection under load (a short form runs in `make test`).
# The reliability suite (test/reliability, research/reliability.md §7) prints
# its table at the end; ACEMQ_RELIABILITY_TABLE=FILE also writes it there.
# Both start the private cluster first (make cluster): S5, S25 and S26 stop,
# restart and kill its nodes, never the shared broker's.
chaos: services build cluster
	$(GO) test -count=1 -tags chaos -run '^TestChaos' -timeout 60m -v ./test/e2e
	$(GO) test -count=1 -tags chaos -run '^TestChaosS' -timeout 90m -v ./test/reliability

chaos-short: services build cluster
	$(GO) test -count=1 -tags chaos -run '^TestChaos' -timeout 15m -v ./test/e2e -soak 45s
	$(GO) test -count=1 -tags chaos -short -run '^TestChaosS' -timeout 15m -v ./test/reliability

# Three more RabbitMQ nodes on this machine, clustered (AMQP 5681-5683),
# beside the broker on 5672; both targets can be run again.
cluster:
	@scripts/cluster.sh start

cluster-stop:
	@scripts/cluster.sh stop

generate:
	@scripts/generate.sh

# The container images, built by ko without a Docker daemon or a registry:
# bin/image/acemq-flow and bin/image/acemq-flow-plugins, each an OCI layout
# and a tarball (deploy/README.md says how to push and run them).
image:
	@scripts/image.sh

# Builds the images and inspects them: user, entrypoint, labels, size, no shell.
image-test:
	@scripts/image.sh install-ko
	PATH="$$($(GO) env GOPATH)/bin:$$PATH" $(GO) test -count=1 -v ./test/image

lint:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }

clean:
	rm -rf $(BIN)
