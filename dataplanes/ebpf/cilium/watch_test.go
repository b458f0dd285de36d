package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/cilium/pkg/loadbalancer/maps"
	"github.com/cilium/cilium/pkg/maglev"
	"github.com/cilium/ebpf"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func testNode(name, ip string) *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
			{Type: v1.NodeHostName, Address: name},
			{Type: v1.NodeInternalIP, Address: ip},
		}},
	}
}

func testService(name, clusterIP string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: v1.ServiceSpec{
			Type:      v1.ServiceTypeClusterIP,
			ClusterIP: clusterIP,
			Ports:     []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80}},
		},
	}
}

func testSlice(svc, node string, ips ...string) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: svc + "-abcde",
			Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	for _, ip := range ips {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}, NodeName: ptr.To(node)})
	}
	return es
}

// startCluster runs the informers of watch on cs until the test ends, and waits for their caches.
func startCluster(t *testing.T, cs kubernetes.Interface) *cluster {
	t.Helper()
	factory, c, err := watch(cs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	if !cache.WaitFor(ctx, "", c.synced...) {
		t.Fatal("caches did not sync")
	}
	return c
}

func TestClusterState(t *testing.T) {
	cs := fake.NewClientset(
		testNode("n2", "192.168.0.3"), testNode("n1", "192.168.0.2"), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "new"}},
		testService("b", "10.96.0.11"), testService("a", "10.96.0.10"),
		testSlice("a", "n1", "10.244.1.5"),
	)
	st, err := startCluster(t, cs).state()
	if err != nil {
		t.Fatal(err)
	}
	want := []clusterNode{{"n1", netip.MustParseAddr("192.168.0.2")}, {"n2", netip.MustParseAddr("192.168.0.3")}}
	if fmt.Sprint(st.Nodes) != fmt.Sprint(want) {
		t.Errorf("nodes: got %v, want %v (sorted, and without the node that has no InternalIP)", st.Nodes, want)
	}
	if len(st.Services) != 2 || st.Services[0].Name != "a" || st.Services[1].Name != "b" {
		t.Errorf("services: want a, b in that order, got %d", len(st.Services))
	}
	if len(st.EndpointSlices) != 1 {
		t.Errorf("endpoint slices: got %d, want 1", len(st.EndpointSlices))
	}
}

// A Node's status changes all the time (conditions, heartbeats); only a change of its InternalIP is a change of the
// state.
func TestNodeUpdatesThatChangeNothing(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(testNode("n1", "192.168.0.2"))
	c := startCluster(t, cs)
	c.drain()
	notified := func() bool {
		select {
		case <-c.changed:
			return true
		case <-time.After(200 * time.Millisecond):
			return false
		}
	}
	n := testNode("n1", "192.168.0.2")
	n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if notified() {
		t.Error("a status update that keeps the InternalIP asked for an apply")
	}
	n = testNode("n1", "192.168.0.9")
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !notified() {
		t.Error("a new InternalIP did not ask for an apply")
	}
}

// syncBuffer is a log the test reads while follow writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testDatapath has the load-balancing maps of a datapath, unpinned and without programs.
func testDatapath(t *testing.T) *datapath {
	hash := func(k, v any) *ebpf.Map {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: uint32(binary.Size(k)), ValueSize: uint32(binary.Size(v)), MaxEntries: 4096})
		if err != nil {
			t.Skipf("creating a BPF map (this test needs the bpf syscall): %v", err)
		}
		return m
	}
	mcfg := maglev.DefaultConfig
	inner := &ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: uint32(4 * mcfg.TableSize), MaxEntries: 1}
	d := &datapath{
		services:        hash(maps.Service4Key{}, maps.Service4Value{}),
		backends:        hash(maps.Backend4KeyV3{}, maps.Backend4ValueV3{}),
		revNat:          hash(maps.RevNat4Key{}, maps.RevNat4Value{}),
		affinityMatch:   hash(maps.AffinityMatchKey{}, maps.AffinityMatchValue{}),
		maglevInner:     inner,
		maglevTableSize: mcfg.TableSize,
		hashSeed:        mcfg,
	}
	var err error
	d.maglevOuter, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.HashOfMaps, KeySize: uint32(binary.Size(maps.MaglevOuterKey{})), ValueSize: 4, MaxEntries: 64, InnerMap: inner})
	if err != nil {
		t.Skipf("creating a BPF map (this test needs the bpf syscall): %v", err)
	}
	t.Cleanup(d.Close)
	return d
}

func count(m *ebpf.Map) int {
	n := 0
	var k, v []byte
	it := m.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	return n
}

// follow applies the caches once they synced, then every burst of changes once, and removes what went.
func TestFollow(t *testing.T) {
	var log syncBuffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	dp := testDatapath(t)
	w, err := newWriter(logger, dp, options{node: "n1", nodeIP: netip.MustParseAddr("192.168.0.2"), lbAlgorithm: "random"})
	if err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset(testNode("n1", "192.168.0.2"), testService("a", "10.96.0.10"), testSlice("a", "n1", "10.244.1.5"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.follow(ctx, cs) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: timed out; log:\n%s", what, log.String())
			}
		}
	}
	applies := func() int { return strings.Count(log.String(), "msg=applied") }

	// A ClusterIP frontend with one backend: the master slot and the backend's.
	waitFor("the initial apply", func() bool { return count(dp.services) == 2 && count(dp.backends) == 1 })

	// A burst of Services, each with its slice: far fewer applies than changes.
	before := applies()
	const burst = 20
	for i := range burst {
		name := fmt.Sprintf("s%d", i)
		if _, err := cs.CoreV1().Services("default").Create(ctx, testService(name, fmt.Sprintf("10.96.1.%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.DiscoveryV1().EndpointSlices("default").Create(ctx, testSlice(name, "n2", fmt.Sprintf("10.244.2.%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor("the burst", func() bool { return count(dp.services) == 2*(burst+1) && count(dp.backends) == burst+1 })
	if n := applies() - before; n >= burst {
		t.Errorf("%d changes took %d applies: they were not batched", 2*burst, n)
	}

	// Deleting the first Service and its slice removes its frontend and backend.
	if err := cs.CoreV1().Services("default").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.DiscoveryV1().EndpointSlices("default").Delete(ctx, "a-abcde", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("the removal", func() bool {
		return count(dp.services) == 2*burst && count(dp.backends) == burst && count(dp.revNat) == burst
	})
}
