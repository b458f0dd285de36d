// Package nodeport implements `k8sguide nodeport`.
package nodeport

import (
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/k8sguide/k8sguide/inspect/live"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/kubectl/pkg/util/podutils"

	"github.com/k8sguide/k8sguide/inspect/render"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/providers"
)

type flags struct {
	Name                  string
	Namespace             string
	Deployment            string
	Service               string
	Port                  int32
	TargetPort            int32
	NodePort              int32
	ExternalTrafficPolicy string
	Check                 int
}

// NewCommand returns the nodeport command.
func NewCommand(streams lab.Streams) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "nodeport",
		Short: "Expose a Deployment as a NodePort Service, print each node's IP:nodePort and check them from the client",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runE(cmd, f, streams)
		},
	}
	cmd.Flags().StringVar(&f.Name, "name", "", providers.NameUsage)
	cmd.Flags().StringVarP(&f.Namespace, "namespace", "n", "default", "namespace")
	cmd.Flags().StringVar(&f.Deployment, "deployment", "web", "deployment to expose")
	cmd.Flags().StringVar(&f.Service, "service", "", "service name (default: the deployment's name)")
	cmd.Flags().Int32Var(&f.Port, "port", 80, "service port")
	cmd.Flags().Int32Var(&f.TargetPort, "target-port", 0, "container port (default: --port)")
	cmd.Flags().Int32Var(&f.NodePort, "node-port", 0, "request this node port (default: allocate one)")
	cmd.Flags().StringVar(&f.ExternalTrafficPolicy, "external-traffic-policy", "Cluster", "Cluster or Local")
	cmd.Flags().IntVar(&f.Check, "check", 10, "connections from the client to each node's NodePort, all nodes at once (0: skip); "+
		"exits non-zero when a connection fails that should not")
	return cmd
}

// MaxCheck bounds --check: connections per node, all of them made from the lab's client.
const MaxCheck = 10000

// validate checks the numbers a user can give before anything is changed.
func (f *flags) validate() error {
	if f.Check < 0 || f.Check > MaxCheck {
		return fmt.Errorf("--check %d: want 0 (no check) to %d connections per node", f.Check, MaxCheck)
	}
	if f.Port < 1 || f.Port > 65535 {
		return fmt.Errorf("--port %d: want a port 1-65535", f.Port)
	}
	if f.TargetPort < 0 || f.TargetPort > 65535 {
		return fmt.Errorf("--target-port %d: want a port 1-65535 (or 0: --port)", f.TargetPort)
	}
	if f.NodePort < 0 || f.NodePort > 65535 {
		return fmt.Errorf("--node-port %d: want a port in the lab's NodePort range (or 0: allocate one)", f.NodePort)
	}
	return nil
}

func runE(cmd *cobra.Command, f *flags, streams lab.Streams) error {
	if err := f.validate(); err != nil {
		return err
	}
	etp := v1.ServiceExternalTrafficPolicy(f.ExternalTrafficPolicy)
	if etp != v1.ServiceExternalTrafficPolicyCluster && etp != v1.ServiceExternalTrafficPolicyLocal {
		return fmt.Errorf("--external-traffic-policy %q: want Cluster or Local", f.ExternalTrafficPolicy)
	}
	ctx := cmd.Context()
	p, err := providers.ForLabFlag(&f.Name, cmd.Flags().Changed("name"))
	if err != nil {
		return err
	}
	w, err := p.Workloads(ctx, f.Name)
	if err != nil {
		return err
	}
	svc, created, err := w.Expose(ctx, lab.ExposeOptions{
		Namespace: f.Namespace, Deployment: f.Deployment, Service: f.Service,
		Port: f.Port, TargetPort: f.TargetPort, NodePort: f.NodePort, ExternalTrafficPolicy: etp,
	})
	if err != nil {
		return err
	}
	if created {
		fmt.Fprintf(streams.Out, "service/%s exposed\n", svc.Name)
	} else {
		fmt.Fprintf(streams.Out, "service/%s exists already, as nodeport makes it: using it\n", svc.Name)
	}
	// Return (and probe) once every node's dataplane serves it.
	exposed := func(s *v1.Service) bool { return s.Namespace == svc.Namespace && s.Name == svc.Name }
	if err := live.WaitServing(ctx, p, f.Name, exposed, live.ServingTimeout); err != nil {
		return err
	}
	now := svc.CreationTimestamp.Time // the apiserver's clock: a new Service is 0s old, whatever this host's says
	if !created {
		now = time.Now()
	}
	if err := render.Services(streams.Out, []v1.Service{*svc}, now); err != nil {
		return err
	}
	status, err := p.Status(ctx, f.Name)
	if err != nil {
		return err
	}
	nodePort := strconv.Itoa(int(svc.Spec.Ports[0].NodePort))
	fmt.Fprintln(streams.Out)
	if f.Check <= 0 {
		var rows [][]string
		for _, n := range status.Nodes {
			rows = append(rows, []string{n.Name, net.JoinHostPort(n.IP, nodePort)})
		}
		return render.WriteTable(streams.Out, []string{"NODE", "NODEPORT"}, rows)
	}
	// With externalTrafficPolicy Local a node without a ready endpoint of its own drops NodePort traffic:
	// its failures are what Local means, not a fault.
	withEndpoint := map[string]bool{}
	if etp == v1.ServiceExternalTrafficPolicyLocal {
		pods, err := w.Pods(ctx)
		if err != nil {
			return err
		}
		for _, pod := range pods {
			// A Service selects pods of its own namespace only: another namespace's pods of the same labels
			// are no endpoint of it.
			if pod.Namespace == svc.Namespace && len(svc.Spec.Selector) > 0 &&
				labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) && podutils.IsPodReady(&pod) {
				withEndpoint[pod.Spec.NodeName] = true
			}
		}
	}
	fmt.Fprintf(streams.Out, "From %s (the client, outside the cluster), %s to each node:\n",
		lab.ClientName(f.Name), render.Count(f.Check, "connection"))
	// Every node's probes at once: a node that drops the traffic costs one connect timeout, not one per try.
	probes := make([]lab.Probe, len(status.Nodes))
	var wg sync.WaitGroup
	for i, n := range status.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			probes[i] = lab.ProbeAddr(ctx, p, f.Name, net.JoinHostPort(n.IP, nodePort), f.Check)
		}()
	}
	wg.Wait()
	var rows [][]string
	var unexpected []string
	var notes []string
	pods := podNames(probes)
	interrupted := false
	for i, n := range status.Nodes {
		pr := probes[i]
		// Only what was made: an interrupted check made fewer than --check, and says so below.
		answered := fmt.Sprintf("%d/%d", pr.Made-pr.Failures, pr.Made)
		interrupted = interrupted || pr.Interrupted
		if pr.Failures > 0 {
			expected := etp == v1.ServiceExternalTrafficPolicyLocal && !withEndpoint[n.Name]
			if expected {
				answered += " (expected)"
				notes = append(notes, fmt.Sprintf("%s has no endpoint of %s, and externalTrafficPolicy Local keeps NodePort traffic to the node's own endpoints: it drops it (%s)", n.Name, svc.Name, pr.LastErr))
			} else {
				unexpected = append(unexpected, n.Name)
				notes = append(notes, fmt.Sprintf("%s: %d of %d failed: %s", n.Name, pr.Failures, pr.Made, pr.LastErr))
			}
		}
		// Nodes by the short names node-ip prints and --node takes; the header names the lab's prefix.
		rows = append(rows, []string{strings.TrimPrefix(n.Name, f.Name+"-"), pr.Addr, answered, pods.counts(pr.Answers), counts(pr.Sources)})
	}
	header := []string{"NODE (" + f.Name + "-…)", "NODEPORT", "ANSWERED", "PODS" + pods.headerNote(), "SOURCE SEEN BY POD"}
	width := render.Width(streams.Out)
	if err := render.FitTable(streams.Out, width, header, rows, []render.Column{{Min: 12, Shorten: render.ShortenMiddle}, {}, {}, {Min: 16}, {Min: 16}}); err != nil {
		return err
	}
	for _, n := range notes {
		io.WriteString(streams.Out, render.Wrap("  -", "    ", n, width))
	}
	if interrupted {
		made := make([]string, len(probes))
		for i, pr := range probes {
			made[i] = strconv.Itoa(pr.Made)
		}
		return fmt.Errorf("interrupted: %s of %d connections per node made (counted above); service/%s stays", strings.Join(made, ", "), f.Check, svc.Name)
	}
	if len(unexpected) > 0 {
		return fmt.Errorf("connections failed on %s, which should answer (see above)", strings.Join(unexpected, ", "))
	}
	io.WriteString(streams.Out, curlHint(p.Name(), f.Name, probes[len(probes)-1].Addr, width))
	return nil
}

// curlHint says how to make the guide's `curl NODE_IP:NODEPORT` yourself. It cannot be made from this host on a
// netns lab (the host has no route into it, and an address of the lab may answer from elsewhere: a student got
// an unrelated server's 404 and no error), nor from macOS with Docker Desktop on kind: from the lab's client it
// always can.
func curlHint(provider, labName, addr string, width int) string {
	where := "the lab's client namespace (this host has no route into a netns lab)"
	if provider != "netns" {
		where = "the lab's client, which on kind is this host (Docker Desktop's hosts reach no node address: there, use docker exec " + labName + "-worker curl …)"
	}
	return "\n" + render.Wrap("", "", "The guide's curl, from "+where+":", width) +
		"  k8sguide exec --name " + labName + " client -- curl -s " + addr + "\n"
}

// podNamer prints the pods that answered by what tells them apart: a Deployment's pods share
// "web-7b49f5dc7-", which the header says once.
type podNamer struct{ prefix string }

func podNames(probes []lab.Probe) podNamer {
	var names []string
	for _, pr := range probes {
		for n := range pr.Answers {
			names = append(names, n)
		}
	}
	if len(names) < 2 {
		return podNamer{}
	}
	prefix := names[0]
	for _, n := range names[1:] {
		for !strings.HasPrefix(n, prefix) {
			prefix = prefix[:len(prefix)-1]
		}
	}
	// Cut at the last dash: the Deployment's name and the ReplicaSet's hash.
	if i := strings.LastIndex(prefix, "-"); i > 0 {
		return podNamer{prefix: prefix[:i+1]}
	}
	return podNamer{}
}

func (p podNamer) headerNote() string {
	if p.prefix == "" {
		return ""
	}
	return " (" + p.prefix + "…)"
}

func (p podNamer) counts(m map[string]int) string {
	short := map[string]int{}
	for k, v := range m {
		short[strings.TrimPrefix(k, p.prefix)] += v
	}
	return counts(short)
}

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s×%d", k, m[k]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}
