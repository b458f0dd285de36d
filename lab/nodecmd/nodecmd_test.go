package nodecmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/podserver"
)

// inProcess is an Exec that runs argv through this package's commands in the test's own process, the way
// k8sguide's main does inside a node: a failure is one "ERROR: ..." line on stderr and a non-zero exit.
func inProcess(t *testing.T, h Handlers) Exec {
	return func(ctx context.Context, argv []string, streams lab.Streams) error {
		if streams.In == nil {
			streams.In = strings.NewReader("")
		}
		if len(argv) < 2 || argv[0] != "/k8sguide" || argv[1] != Group {
			t.Fatalf("argv %q: want /k8sguide %s ...", argv, Group)
		}
		root := &cobra.Command{Use: "k8sguide", SilenceUsage: true, SilenceErrors: true}
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		root.AddCommand(NewCommand(streams, h))
		root.SetArgs(argv[1:])
		if err := root.ExecuteContext(ctx); err != nil {
			fmt.Fprintf(streams.Err, "ERROR: %v\n", err)
			return errors.New("exit status 1")
		}
		return nil
	}
}

func TestCollect(t *testing.T) {
	var gotBPFFS, gotFor string
	run := inProcess(t, Handlers{Collect: func(ctx context.Context, bpffs, forPacket string) (any, error) {
		gotBPFFS, gotFor = bpffs, forPacket
		if bpffs == "/missing" {
			return nil, fmt.Errorf("no maps at %s", bpffs)
		}
		return map[string]int{"version": 2}, nil
	}})
	out, err := Collect(context.Background(), run, "/k8sguide", "/sys/fs/bpf/lab", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != `{"version":2}` || gotBPFFS != "/sys/fs/bpf/lab" || gotFor != "" {
		t.Errorf("collect printed %s with --bpffs %q --for %q", got, gotBPFFS, gotFor)
	}
	// The packet travels as one argument, whatever it holds.
	packet := `{"request":{"Dst":"10.96.0.10:53","From":"pod/a b"}}`
	if _, err := Collect(context.Background(), run, "/k8sguide", "", packet); err != nil || gotBPFFS != "" || gotFor != packet {
		t.Errorf("no bpffs, a packet: %v, handler saw %q and %q", err, gotBPFFS, gotFor)
	}
	// The collector's own one-line error is what the caller reports, not "exit status 1".
	if _, err := Collect(context.Background(), run, "/k8sguide", "/missing", ""); err == nil || err.Error() != "no maps at /missing" {
		t.Errorf("failed collect: %v", err)
	}
}

func TestKernelTrace(t *testing.T) {
	flow := trace.Flow{Src: netip.MustParseAddr("10.0.0.9"), Dst: netip.MustParseAddr("172.18.0.2"), Dport: 30080, Sport: 41234, Proto: "tcp"}
	var got trace.Flow
	var gotEngine string
	var stopped atomic.Bool
	run := inProcess(t, Handlers{KernelTrace: func(ctx context.Context, engine string, f trace.Flow) (func() ([]string, error), error) {
		got, gotEngine = f, engine
		if engine == "broken" {
			return nil, errors.New("nft: Operation not permitted")
		}
		return func() ([]string, error) {
			stopped.Store(true)
			return []string{"trace id 1 ip raw PREROUTING packet: ...", "trace id 1 ip nat KUBE-SERVICES rule ..."}, nil
		}, nil
	}})
	kt, err := StartKernelTrace(context.Background(), run, "/k8sguide", "nftables", flow)
	if err != nil {
		t.Fatal(err)
	}
	// Between READY and Events the caller's connection runs; the trace must still be on.
	if stopped.Load() {
		t.Fatal("the trace stopped before its stdin closed")
	}
	lines, err := kt.Events()
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 2 || !stopped.Load() {
		t.Errorf("events %q, stopped %v", lines, stopped.Load())
	}
	if got != flow || gotEngine != "nftables" {
		t.Errorf("the handler traced %+v with %s, want %+v with nftables", got, gotEngine, flow)
	}

	// A flow from anywhere (the node's own packets) has no --src.
	fromAnywhere := flow
	fromAnywhere.Src = netip.Addr{}
	kt, err = StartKernelTrace(context.Background(), run, "/k8sguide", "iptables", fromAnywhere)
	if err != nil {
		t.Fatal(err)
	}
	kt.Events()
	if got != fromAnywhere || gotEngine != "iptables" {
		t.Errorf("the handler traced %+v with %s, want %+v", got, gotEngine, fromAnywhere)
	}

	if _, err := StartKernelTrace(context.Background(), run, "/k8sguide", "broken", flow); err == nil || err.Error() != "nft: Operation not permitted" {
		t.Errorf("a trace that cannot start: %v", err)
	}
}

func TestConnect(t *testing.T) {
	srv := httptest.NewServer(podserver.Handler("web-1", "worker"))
	defer srv.Close()
	run := inProcess(t, Handlers{})
	c := Connect(context.Background(), run, "/k8sguide", srv.Listener.Addr().String(), 0)
	if !c.Answered || c.Pod != "web-1" || c.Client == "" || c.Error != "" {
		t.Errorf("connect to a pod server: %+v", c)
	}
	// A port nobody listens on: answered false, and the reason.
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	c = Connect(context.Background(), run, "/k8sguide", closed, 0)
	if c.Answered || !strings.Contains(c.Error, "refused") {
		t.Errorf("connect to a closed port: %+v", c)
	}
	// A command that cannot run at all.
	broken := func(ctx context.Context, argv []string, s lab.Streams) error {
		fmt.Fprintln(s.Err, "exec: k8sguide: not found")
		return errors.New("exit status 127")
	}
	if c := Connect(context.Background(), broken, "/k8sguide", closed, 0); c.Answered || c.Error != "exec: k8sguide: not found" {
		t.Errorf("connect that could not run: %+v", c)
	}
}

// TestKubeProxyArgv checks that kube-proxy gets its flags untouched (cobra would refuse them as unknown).
func TestKubeProxyArgv(t *testing.T) {
	var got []string
	run := inProcess(t, Handlers{KubeProxy: func(ctx context.Context, args []string) error {
		got = args
		return nil
	}})
	if err := run(context.Background(), KubeProxyArgv("/k8sguide", "/run/k8sguide/lab/kube-proxy.yaml", "lab-worker2"), lab.Streams{Out: io.Discard, Err: io.Discard}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []string{"--config=/run/k8sguide/lab/kube-proxy.yaml", "--hostname-override=lab-worker2"}) {
		t.Errorf("kube-proxy ran with %q", got)
	}
}

func TestPodServerArgv(t *testing.T) {
	var ports []int
	for range 2 {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
		ln.Close()
	}
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	udpPort := pc.LocalAddr().(*net.UDPAddr).Port
	pc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var stderr strings.Builder
	go func() {
		done <- inProcess(t, Handlers{})(ctx, PodServerArgv("/k8sguide", "web-2", "worker", ports, []int{udpPort}), lab.Streams{Out: io.Discard, Err: &stderr})
	}()
	defer func() {
		cancel()
		<-done
	}()
	for _, port := range ports {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		var pod string
		var err error
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if pod, _, err = podserver.Get(ctx, addr, 0); err == nil {
				break
			}
		}
		if pod != "web-2" {
			t.Errorf("port %d: pod %q, %v (stderr %q)", port, pod, err, stderr.String())
		}
	}
	// UDP: the echo names the pod and the source it saw.
	conn, err := net.Dial("udp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(udpPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	want := "web-2 " + conn.LocalAddr().String() + ": ping"
	buf := make([]byte, 100)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		conn.Write([]byte("ping"))
		conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if n, err := conn.Read(buf); err == nil {
			if got := string(buf[:n]); got != want {
				t.Errorf("udp echo %q, want %q", got, want)
			}
			return
		}
	}
	t.Errorf("no udp echo (stderr %q)", stderr.String())
}
