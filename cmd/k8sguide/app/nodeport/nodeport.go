// Package nodeport implements `k8sguide nodeport`.
package nodeport

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/k8sguide/k8sguide/inspect/live"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"

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
	cmd.Flags().StringVar(&f.Name, "name", lab.DefaultName, "lab name")
	cmd.Flags().StringVarP(&f.Namespace, "namespace", "n", "default", "namespace")
	cmd.Flags().StringVar(&f.Deployment, "deployment", "web", "deployment to expose")
	cmd.Flags().StringVar(&f.Service, "service", "", "service name (default: the deployment's name)")
	cmd.Flags().Int32Var(&f.Port, "port", 80, "service port")
	cmd.Flags().Int32Var(&f.TargetPort, "target-port", 0, "container port (default: --port)")
	cmd.Flags().Int32Var(&f.NodePort, "node-port", 0, "request this node port (default: allocate one)")
	cmd.Flags().StringVar(&f.ExternalTrafficPolicy, "external-traffic-policy", "Cluster", "Cluster or Local")
	cmd.Flags().IntVar(&f.Check, "check", 10, "connections to make from the client to each node's NodePort (0: skip)")
	return cmd
}

func runE(cmd *cobra.Command, f *flags, streams lab.Streams) error {
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
	svc, err := w.Expose(ctx, lab.ExposeOptions{
		Namespace: f.Namespace, Deployment: f.Deployment, Service: f.Service,
		Port: f.Port, TargetPort: f.TargetPort, NodePort: f.NodePort, ExternalTrafficPolicy: etp,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(streams.Out, "service/%s exposed\n", svc.Name)
	// Return (and probe) once every node's dataplane serves it.
	created := func(s *v1.Service) bool { return s.Namespace == svc.Namespace && s.Name == svc.Name }
	if err := live.WaitServing(ctx, p, f.Name, created, live.ServingTimeout); err != nil {
		return err
	}
	if err := render.Services(streams.Out, []v1.Service{*svc}, svc.CreationTimestamp.Time); err != nil {
		return err
	}
	status, err := p.Status(ctx, f.Name)
	if err != nil {
		return err
	}
	nodePort := strconv.Itoa(int(svc.Spec.Ports[0].NodePort))
	fmt.Fprintln(streams.Out)
	var rows [][]string
	for _, n := range status.Nodes {
		addr := net.JoinHostPort(n.IP, nodePort)
		row := []string{n.Name, addr}
		if f.Check > 0 {
			pr := lab.ProbeAddr(ctx, p, f.Name, addr, f.Check)
			row = append(row, fmt.Sprintf("%d/%d", f.Check-pr.Failures, f.Check), counts(pr.Answers), counts(pr.Sources))
			if pr.Failures > 0 {
				row[len(row)-1] += "  (" + pr.LastErr + ")"
			}
		}
		rows = append(rows, row)
	}
	header := []string{"NODE", "NODEPORT"}
	if f.Check > 0 {
		header = append(header, "ANSWERED", "PODS", "SOURCE SEEN BY POD")
		fmt.Fprintf(streams.Out, "From %s (the client, outside the cluster), %d connections to each node:\n", lab.ClientName(f.Name), f.Check)
	}
	return render.WriteTable(streams.Out, header, rows)
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
