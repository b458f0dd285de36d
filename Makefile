# k8sguide: the guide's lab targets, mapped onto the CLI. Run as root (the netns lab makes network namespaces).
BIN       ?= bin/k8sguide
NAME      ?= k8s-guide
DATAPLANE ?= iptables
# auto: kind where a Docker engine answers, the netns lab otherwise.
PROVIDER  ?= auto
K8SGUIDE  := ./$(BIN)
# The guide's own kubectl commands, with the kubectl built into k8sguide, against the lab.
KUBECTL   := $(K8SGUIDE) kubectl --name $(NAME) --

# Every Go build and test here is static and free of local paths, as Kubernetes' release builds are: one set of
# flags, so that `make build`, `make test` and the offline kind image's Kubernetes binaries share one build cache
# (k8sguide's in-process control plane compiles most of Kubernetes already). Nothing needs cgo.
export CGO_ENABLED := 0
export GOFLAGS += -trimpath

# Where a node keeps its NodePorts, per dataplane.
ifeq ($(DATAPLANE),nftables)
NODEPORT_VIEW := $(K8SGUIDE) exec --name $(NAME) $(NAME)-worker2 -- nft list map ip kube-proxy service-nodeports
else ifeq ($(DATAPLANE),ebpf)
NODEPORT_VIEW := $(K8SGUIDE) lb list --name $(NAME) --node $(NAME)-worker2
else
NODEPORT_VIEW := $(K8SGUIDE) exec --name $(NAME) $(NAME)-worker2 -- iptables -t nat -nvL KUBE-NODEPORTS
endif

.PHONY: deps lab-deps lab-absent build cross lab up down deployment scale-up scale-down nodeport reset curl node-ip-1 node-ip-2 node-ip-3 trace test bench campaign fuzz scenarios scenarios-ipvs pictures \
	kind-engine kind-engine-stop kind-engine-tools kind-image kind-image-tool cilium-images test-kind random-agreement

# What a lab needs: ip, iptables, nft and conntrack in its nodes (the snapshot reads conntrack -L), curl for
# the guide's own requests, ipset for kube-proxy's IPVS mode.
LAB_PACKAGES := iproute2 iptables nftables conntrack curl ipset
# clang-19: Cilium's datapath (the ebpf dataplane) needs clang >= 18.1 (bookworm's clang is 14).
EBPF_PACKAGES := clang-19
# What only the tests need. shellcheck: the workflow test lints the run: scripts of .github/workflows with it.
# ipvsadm: the IPVS tests list with it. chromium: the picture test opens trace -o html in it. time: the
# benchmarks measure peak memory under GNU time.
TEST_PACKAGES := shellcheck ipvsadm chromium time
# The IPVS test VM: QEMU alone, without the firmware and tools it recommends.
VM_PACKAGES := qemu-system-x86

# apt-get install $(1), updating the package lists first only when they are too old to have a package.
APT_INSTALL = DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1) >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1) >/dev/null; }

# What `make lab` needs from Debian (Go itself comes with the machine): the lab's tools, and clang only for
# DATAPLANE=ebpf. Nothing of the tests': a student who makes a lab needs no QEMU nor the VM's kernel.
lab-deps:
	$(call APT_INSTALL,$(strip $(LAB_PACKAGES) $(if $(filter ebpf,$(DATAPLANE)),$(EBPF_PACKAGES))))

# What the tests need besides (`make test` as root and .ci/run install it): every dataplane's tools, the tests'
# own, QEMU, and the Debian kernel the IPVS test VM boots (fetched with apt-get download, extracted into the VM
# cache).
deps:
	$(call APT_INSTALL,$(LAB_PACKAGES) $(EBPF_PACKAGES) $(TEST_PACKAGES))
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(VM_PACKAGES) >/dev/null
	go run ./internal/vmtest/cmd/vmkernel

# k8sguide; beside it k8sguide-lab, what k8sguide runs rather than links (a netns lab's programs: node agents,
# kube-proxy, the control plane; kubectl): apart, no command pays for their initialisation; k8sguide-graphviz,
# which lays out trace -o svg|html (Graphviz in WebAssembly: a program of its own so k8sguide does not start it
# on every command); and k8sguide-cilium, the ebpf dataplane's node agent: a nested module (Cilium's Go
# packages stay out of the main module), whose build also puts Cilium's bpf/ sources in the module cache. The
# agent runs only in netns labs, which need Linux; on macOS `build` makes the CLI, k8sguide-lab (kubectl there)
# and the layout program.
build:
	go build -trimpath -o $(BIN) ./cmd/k8sguide
	go build -trimpath -o $(dir $(BIN))k8sguide-lab ./cmd/k8sguide-lab
	go build -trimpath -o $(dir $(BIN))k8sguide-graphviz ./cmd/k8sguide-graphviz
ifeq ($(shell uname -s),Linux)
	cd dataplanes/ebpf/cilium && go build -trimpath -o $(abspath $(dir $(BIN)))/k8sguide-cilium .
endif

# Linux builds for kind nodes of either architecture, for hosts that cannot give them one (macOS, or another
# architecture): `trace` and `snapshot` copy the right one into the node. And the macOS CLI (kind provider,
# offline trace), which CI builds too so that Linux-only code cannot creep back outside *_linux.go.
# CROSS_PROGRAMS narrows the programs built (k8sguide-lab compiles most of Kubernetes again per platform).
CROSS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
CROSS_PROGRAMS := k8sguide k8sguide-lab k8sguide-graphviz
cross:
	for target in $(CROSS); do \
	  os=$${target%/*}; arch=$${target#*/}; \
	  for prog in $(CROSS_PROGRAMS); do \
	    CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -o $(dir $(BIN))$$prog-$$os-$$arch ./cmd/$$prog || exit 1; \
	  done; \
	done

# The README's main job: a fresh lab, the web Deployment with 3 replicas, a NodePort, checked from the client,
# the NodePort's rules on a node, and a NodePort packet traced through them and checked against the kernel.
# The lab stays up to explore; `make down` removes it. A lab of that name already there stops it (lab-absent)
# before anything is installed: it is the student's, maybe with work in it, so it is neither replaced nor
# reused (its dataplane may not be DATAPLANE, nor its Deployments the guide's).
lab: build lab-absent lab-deps
	$(K8SGUIDE) up --name $(NAME) --provider $(PROVIDER) --dataplane $(DATAPLANE)
	$(K8SGUIDE) deploy --name $(NAME)
	$(K8SGUIDE) nodeport --name $(NAME)
	$(K8SGUIDE) get endpoints --name $(NAME)
	$(NODEPORT_VIEW)
	$(K8SGUIDE) trace --name $(NAME) --node $(NAME)-worker2 --service web
	$(K8SGUIDE) trace --name $(NAME) --node $(NAME)-worker2 --service web --verify

# Fails when a lab named NAME exists (get answers for it), saying what to do instead.
lab-absent: build
	@if $(K8SGUIDE) get nodes --name $(NAME) >/dev/null 2>&1; then \
	  echo "make lab: lab $(NAME) exists already: explore it ($(K8SGUIDE) get nodes --name $(NAME))," \
	    "remove it first (make down NAME=$(NAME)) or make another (make lab NAME=OTHER)" >&2; \
	  exit 1; \
	fi

up: build
	$(K8SGUIDE) up --name $(NAME) --provider $(PROVIDER) --dataplane $(DATAPLANE)

down:
	$(K8SGUIDE) down --name $(NAME)

# The guide's steps, as the guide writes them; the image pinned (nginx:1.22.1, as the web scenario's): :latest
# is pulled on every start, which a kind node with no registry (the offline node image) cannot do.
deployment:
	$(KUBECTL) create deployment web --image=nginx:1.22.1

scale-up:
	$(KUBECTL) scale --replicas=3 deployment/web

scale-down:
	$(KUBECTL) scale --replicas=0 deployment/web

nodeport:
	$(KUBECTL) expose deployment web --port=80 --type=NodePort
	$(KUBECTL) get svc web

# The guide's blank state (the IPTABLES chapter's first step): the guide's web Deployment and Service gone, with
# their pods, the lab kept.
reset:
	$(KUBECTL) delete service web --ignore-not-found
	$(KUBECTL) delete deployment web --ignore-not-found --wait
	$(KUBECTL) wait --for=delete pod -l app=web --timeout=120s 2>/dev/null || true

# The guide's `curl -s NODE_IP:NODEPORT | grep Welcome` for each node, made from the lab's client: a netns lab's
# host has no route into the lab (and on kind the client is the host). A node that does not answer fails it.
curl:
	@port=$$($(KUBECTL) get service web -o jsonpath='{.spec.ports[0].nodePort}') && test -n "$$port" && \
	for n in 1 2 3; do \
	  ip=$$($(K8SGUIDE) node-ip --name $(NAME) $$n | cut -d: -f2) || exit 1; \
	  echo "curl -s $$ip:$$port | grep Welcome"; \
	  $(K8SGUIDE) exec --name $(NAME) client -- curl -s --max-time 5 $$ip:$$port | grep Welcome || exit 1; \
	done

# A packet from the client to web's NodePort on worker2: every rule, every endpoint's chance; then the same
# flow for real, compared with the kernel's own trace.
trace:
	$(K8SGUIDE) trace --name $(NAME) --node $(NAME)-worker2 --service web
	$(K8SGUIDE) trace --name $(NAME) --node $(NAME)-worker2 --service web --verify

node-ip-1:
	@$(K8SGUIDE) node-ip --name $(NAME) 1
node-ip-2:
	@$(K8SGUIDE) node-ip --name $(NAME) 2
node-ip-3:
	@$(K8SGUIDE) node-ip --name $(NAME) 3

# Unit tests everywhere; the end-to-end tests on real namespaces need root and skip without it. As root on
# Linux, the tests' tools are installed first (deps); without root the tests that need them skip.
TEST_DEPS := $(if $(and $(filter 0,$(shell id -u)),$(filter Linux,$(shell uname -s))),deps)
# gotestsum (a tool of go.mod's) runs go test with these flags, prints what go test prints, and keeps the run as
# JSON in TEST_JSON; from it the ten slowest tests (subtests too) are printed at the end, pass or fail, so the
# test budget (docs/development.md) shows in every run's log. -parallel 3: the randomized agreement's three
# engines verify side by side, each on its own lab (go test's default is one test per core, two here).
TEST_JSON ?= test-results.json
test: $(TEST_DEPS)
	@status=0; go tool gotestsum --format standard-quiet --jsonfile $(TEST_JSON) -- -count=1 -parallel 3 -timeout 60m ./... || status=$$?; \
	  echo "== make test: the ten slowest tests"; go tool gotestsum tool slowest --jsonfile $(TEST_JSON) --num 10; exit $$status

# The shipped lessons (k8sguide scenario list) on every dataplane, those of the default lab sharing one lab per
# dataplane (scenario run puts it back between them), with JUnit for CI.
# PROVIDER=kind: the kind column, real kind clusters on the node image KIND_IMAGE (default: the offline one,
# built by make kind-image) for KIND_DATAPLANES, run where the engine's networks are (the private engine's
# namespace, when make kind-engine started it), JUnit in junit-scenarios-kind.xml.
SCENARIO_DATAPLANES ?= iptables,nftables,ebpf
# SCENARIO_PARALLEL: netns labs at once. A lesson mostly waits (pods, the proxies' next sync, connections): one
# lab at a time took 364 s here, three at once 211 s with the 2 cores 89 % busy, every cell as before. (kind's
# column stays one lab at a time: two kind labs at once made each command 3 to 4 times as slow.)
SCENARIO_PARALLEL ?= 3
JUNIT ?= junit-scenarios.xml
KIND_DATAPLANES ?= iptables,nftables,ebpf
ifeq ($(PROVIDER),kind)
scenarios: build kind-image-tool $(if $(KIND_EXEC),kind-engine-tools) $(if $(findstring ebpf,$(KIND_DATAPLANES)),cilium-images)
	$(KIND_EXEC) $(K8SGUIDE) scenario run --provider kind --image $${KIND_IMAGE:-$$($(KIND_DOCKER_HOST) bin/k8sguide-kind-image | tail -1)} \
	  --dataplane $(KIND_DATAPLANES) --lab-prefix kscn --junit $(patsubst %.xml,%-kind.xml,$(JUNIT))
else
scenarios: build deps
	$(K8SGUIDE) scenario run --dataplane $(SCENARIO_DATAPLANES) --parallel $(SCENARIO_PARALLEL) --junit $(JUNIT)
endif

# scenarios-ipvs: the ipvs column, the nodeport and clusterip lessons, natively where the kernel has ip_vs and in
# the IPVS test VM where it has not (this machine's: 14 minutes on two emulated CPUs, two labs). Not in .ci/run:
# with it the run passed 80 minutes here; CI's ipvs proof is TestTraceAgreesWithKernelInVM (make test), every
# kind of packet those lessons send, traced and checked against the VM's kernel.
scenarios-ipvs: build deps
	K8SGUIDE_IPVS_VM_SCENARIOS=1 go test -count=1 -timeout 60m -run '^TestIPVSScenarios(InVM)?$$' ./scenarios/run/

# kind on a machine with no Docker engine and no registry (these; CI here). A user's kind runs on their own
# engine, with kind's public node image or the offline one.
#
# kind-engine: a private Docker engine (Debian's docker.io) for the tests, on its own socket, data root and
# pidfile, in a network namespace of its own, with no iptables rules, ip forwarding or default bridge, and a
# runtime wrapper for these machines' missing CAP_SYS_RESOURCE (internal/kindengine). The default socket stays
# absent, so --provider auto still picks netns. Its last line is the DOCKER_HOST to use; run k8sguide in its
# namespace with bin/kind-engine exec -- CMD. kind-engine-stop removes everything it made.
KIND_ENGINE_STATE := /run/k8sguide-kind/engine.json
KIND_EXEC := $(if $(wildcard $(KIND_ENGINE_STATE)),bin/kind-engine exec --)
kind-engine-tools:
	go build -o bin/ ./internal/kindengine/cmd/kind-engine ./internal/kindengine/cmd/runcwrap

kind-engine: kind-engine-tools
	$(call APT_INSTALL,docker.io iproute2)
	bin/kind-engine start $(abspath bin/runcwrap)

kind-engine-stop: kind-engine-tools
	bin/kind-engine stop

# kind-image: k8sguide's offline kind node image (Kubernetes v1.36.4, lab/kind/nodeimage), built with no registry
# from Debian packages and Go modules and loaded into the engine DOCKER_HOST names (the private one when it runs).
# Linux, as root. Its last line is the image's name: --image $$(make -s kind-image | tail -1).
kind-image-tool:
	go build -o bin/k8sguide-kind-image ./cmd/k8sguide-kind-image

kind-image: kind-image-tool
	$(call APT_INSTALL,debootstrap)
	$(KIND_DOCKER_HOST) bin/k8sguide-kind-image

# cilium-images: Cilium's agent and operator images (v1.20.2, lab/kind/nodeimage/cilium_linux.go), built with no
# registry from Cilium's Go module and Debian packages and loaded into the engine DOCKER_HOST names: what
# `up --provider kind --dataplane ebpf` installs where quay.io cannot be reached. Linux, as root.
cilium-images: kind-image-tool
	$(call APT_INSTALL,debootstrap)
	$(KIND_DOCKER_HOST) bin/k8sguide-kind-image --cilium

# The kind tests on real kind clusters (internal/kindtest): up, deploy, nodeport on every node, trace --verify,
# compare with a netns lab, down, with nothing left and the root namespace untouched, for KIND_TEST_DATAPLANES.
# They need an engine (make kind-engine here) and build the offline image first, and Cilium's images for ebpf.
KIND_TEST_DATAPLANES ?= iptables,nftables,ebpf
test-kind: kind-image $(if $(findstring ebpf,$(KIND_TEST_DATAPLANES)),cilium-images)
	$(KIND_DOCKER_HOST) K8SGUIDE_KIND_IMAGE=$$($(KIND_DOCKER_HOST) bin/k8sguide-kind-image | tail -1) \
	  K8SGUIDE_KIND_DATAPLANES=$(KIND_TEST_DATAPLANES) go test -count=1 -timeout 60m -v -run '^TestKind' ./internal/kindtest/

KIND_DOCKER_HOST := $(if $(wildcard $(KIND_ENGINE_STATE)),$(if $(DOCKER_HOST),,DOCKER_HOST=unix:///run/k8sguide-kind/docker.sock))

# The README's pictures (docs/images/*.png): the picture test's screenshots of trace -o html in headless
# Chromium, from the golden snapshots. Look at them before committing.
pictures:
	mkdir -p docs/images
	K8SGUIDE_SCREENSHOTS=$(abspath docs/images) go test -count=1 -run 'TestPictureInChromium/(iptables|ebpf)-nodeport$$' ./inspect/render/

# A longer campaign of the randomized agreement test (random Services and flows, each traced and verified
# against the kernel, on a netns lab per engine, the engines side by side; make test runs 100 per engine).
RANDOM_CASES ?= 1000
random-agreement: build
	K8SGUIDE_RANDOM_CASES=$(RANDOM_CASES) go test -count=1 -parallel 3 -timeout 0 -v -run '^TestRandomizedAgreement$$' ./inspect/tracer/

# A campaign as a hostile or clumsy user: every flag of every user command with bad values (empty, negative,
# huge, a newline, escape sequences, ...) against a running netns lab; each panic, hang, error that is not one
# line, or control character on the terminal is a defect, and the root namespace must stay as it was (minutes).
campaign: build
	K8SGUIDE_CAMPAIGN=1 go test -count=1 -timeout 60m -v -run '^TestCampaign' ./lab/netns/

# Every fuzz target for FUZZTIME each (a fresh corpus cache per run, so each run starts from the seeds), one
# after the other: fails on a crash; prints each target's execs, new inputs and longest stretch at 0 execs/s.
# Go's fuzzer stops fuzzing while its workers minimize each new input (golang/go#48820, #51484), by default
# for up to 60 s each; on the parsers, whose execs cost 0.2-1 ms, that minimizing is quadratic in the input's
# length and took both workers for the rest of the run (FuzzTransaction, 60 s: 41,907 execs and 7 new inputs,
# all of them in the first 9 s). FUZZMINIMIZE bounds it per input (1000x: 1,105,331 execs, 437 new inputs);
# a crasher is still written, minimized as far as that got (rerun it with a larger -fuzzminimizetime).
# FUZZ_TARGETS picks some (package:Target ...).
FUZZTIME ?= 60s
FUZZMINIMIZE ?= 1000x
FUZZ_TARGETS ?= dataplanes/iptables:FuzzParse dataplanes/nftables:FuzzParseRuleset dataplanes/nftables:FuzzParseText \
	dataplanes/nftables:FuzzTransaction dataplanes/ipvs:FuzzIPVSList dataplanes/netstate:FuzzIPSetList inspect/paste:FuzzClean
fuzz:
	@set -e; cache=$$(mktemp -d); trap 'rm -rf "$$cache"' EXIT; \
	for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; fn=$${t##*:}; log="$$cache/$$fn.log"; \
	  if ! go test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./$$pkg/ -test.fuzzcachedir "$$cache/$$fn" >"$$log" 2>&1; then \
	    cat "$$log"; echo "$$fn: FAILED"; exit 1; fi; \
	  awk -v fn="$$fn" '/^fuzz: elapsed: .*execs: / { n = $$5; sub(",", "", n); t = $$3; sub(",", "", t); ni = $$9; sub(",", "", ni); \
	      if ($$0 ~ /\(0\/sec\)/) { if (since == "") since = prev } else since = ""; \
	      if (since != "" && secs(t) - secs(since) > worst) worst = secs(t) - secs(since); prev = t } \
	    function secs(s,  m) { m = 0; if (s ~ /m/) { m = substr(s, 1, index(s, "m") - 1); s = substr(s, index(s, "m") + 1) } sub("s", "", s); return m * 60 + s } \
	    END { printf "%-18s %10s execs, %5s new inputs, longest stall %3d s\n", fn, n, ni, worst }' "$$log"; \
	done

# Figures, not pass/fail: up time per dataplane, deploy+nodeport time, the deploy of 1,000 and 5,000 Services
# through the apiserver (with the proxy's sync time and the control plane's memory), and snapshot+trace against
# iptables-save / nft list at 5,000 NodePort Services (time ratio and peak memory).
# The benchmarks (root), then their table (internal/benchtable): k8sguide's figures beside their floor's from the
# same run. The trace benchmarks take their own medians (5 to 9 runs each, interleaved with the floor), the lab
# benchmarks average 3. K8SGUIDE_BENCH_SERVICES=1000,5000,20000 runs the scale benchmarks at those sizes; BENCH=RE
# only the benchmarks RE matches (BENCH=TraceOffline: trace --snapshot of a 5,000-Service dump beside --help).
BENCH_OUT ?= bench.out
BENCH     ?= .
bench:
	{ go test -run '^$$' -bench '$(BENCH)' -benchtime 1x -timeout 90m ./inspect/tracer/ && \
	  go test -run '^$$' -bench '$(BENCH)' -benchtime 3x -timeout 90m ./lab/netns/; echo $$? > $(BENCH_OUT).status; } | tee $(BENCH_OUT)
	go run ./internal/benchtable < $(BENCH_OUT)
	@exit $$(cat $(BENCH_OUT).status)
