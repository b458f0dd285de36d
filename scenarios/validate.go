package scenarios

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
)

// Ref is one ${...} reference in a scenario's text.
type Ref struct {
	What  string // client | node | service | pod
	Name  string // the node's short name, the Service, or the pod's Deployment
	Field string // service: clusterIP | nodePort | port
	Node  string // pod: the node it runs on
}

var refPattern = regexp.MustCompile(`\$\{([^}]*)\}`)

// ParseRef reads the inside of ${...}: client, node.NODE, service.NAME.clusterIP|nodePort|port or
// pod.DEPLOYMENT@NODE.
func ParseRef(s string) (Ref, error) {
	parts := strings.Split(s, ".")
	switch {
	case s == "client":
		return Ref{What: "client"}, nil
	case parts[0] == "node" && len(parts) == 2:
		return Ref{What: "node", Name: parts[1]}, nil
	case parts[0] == "service" && len(parts) == 3 && slices.Contains([]string{"clusterIP", "nodePort", "port"}, parts[2]):
		return Ref{What: "service", Name: parts[1], Field: parts[2]}, nil
	case parts[0] == "pod" && len(parts) == 2 && strings.Count(parts[1], "@") == 1:
		d, n, _ := strings.Cut(parts[1], "@")
		return Ref{What: "pod", Name: d, Node: n}, nil
	}
	return Ref{}, fmt.Errorf("${%s}: want ${client}, ${node.NODE}, ${service.NAME.clusterIP|nodePort|port} or ${pod.DEPLOYMENT@NODE}", s)
}

// Refs are the references in s, in order.
func Refs(s string) ([]Ref, error) {
	var out []Ref
	for _, m := range refPattern.FindAllStringSubmatch(s, -1) {
		r, err := ParseRef(m[1])
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Expand replaces every reference in s with what resolve says of it.
func Expand(s string, resolve func(Ref) (string, error)) (string, error) {
	var firstErr error
	out := refPattern.ReplaceAllStringFunc(s, func(m string) string {
		r, err := ParseRef(m[2 : len(m)-1])
		if err == nil {
			var v string
			if v, err = resolve(r); err == nil {
				return v
			}
		}
		if firstErr == nil {
			firstErr = err
		}
		return m
	})
	return out, firstErr
}

// WorkersOf is the number of workers the scenario's labs have.
func (s *Scenario) WorkersOf() int {
	if s.Lab.Workers != nil {
		return *s.Lab.Workers
	}
	return 2
}

// DataplanesOf are the dataplanes the scenario is for.
func (s *Scenario) DataplanesOf() []string {
	if len(s.Lab.Dataplanes) > 0 {
		return s.Lab.Dataplanes
	}
	return Dataplanes()
}

// NodeNames are the short names of the scenario's lab nodes: control-plane, worker, worker2, ….
func (s *Scenario) NodeNames() []string {
	names := []string{"control-plane"}
	for i := 1; i <= s.WorkersOf(); i++ {
		if i == 1 {
			names = append(names, "worker")
		} else {
			names = append(names, fmt.Sprintf("worker%d", i))
		}
	}
	return names
}

// Action is the one thing a step does, by its field name.
func (st *Step) Action() string {
	var set []string
	for name, on := range map[string]bool{
		"deploy": st.Deploy != nil, "scale": st.Scale != nil, "expose": st.Expose != nil, "delete": st.Delete != nil,
		"wait": st.Wait != nil, "connect": st.Connect != nil, "trace": st.Trace != nil, "object": st.Object != nil,
	} {
		if on {
			set = append(set, name)
		}
	}
	if len(set) != 1 {
		return ""
	}
	return set[0]
}

// IsCheck says whether a step checks something (and so is a test case of the report).
func (st *Step) IsCheck() bool {
	switch st.Action() {
	case "connect", "trace", "object":
		return true
	case "expose":
		return st.Expose.ExpectError != ""
	}
	return false
}

// Title is the step's name, or what it does.
func (st *Step) Title() string {
	if st.Name != "" {
		return st.Name
	}
	switch st.Action() {
	case "deploy":
		if st.Deploy.File != "" {
			return "deploy " + st.Deploy.File
		}
		return "deploy"
	case "scale":
		return fmt.Sprintf("scale %s to %d", st.Scale.Deployment, st.Scale.Replicas)
	case "expose":
		return "expose " + cmp.Or(st.Expose.Deployment, "web")
	case "delete":
		return "delete " + st.Delete.Kind + "/" + st.Delete.Name
	case "wait":
		return fmt.Sprintf("wait %ds", st.Wait.Seconds)
	case "connect":
		return "connect " + cmp.Or(st.Connect.From, "client") + " -> " + st.Connect.To
	case "trace":
		return "trace " + cmp.Or(st.Trace.From, "client") + " -> " + st.Trace.Dst
	case "object":
		return "object " + st.Object.Get + " " + st.Object.Path
	}
	return "step"
}

// validate checks what the schema cannot: one action per step, references, the files steps name.
func (s *Scenario) validate() []error {
	var errs []error
	bad := func(line int, format string, args ...any) {
		errs = append(errs, &LineError{File: s.File, Line: line, Msg: fmt.Sprintf(format, args...)})
	}
	nodes := s.NodeNames()
	runsOn := s.DataplanesOf()
	services, deployments := map[string]bool{}, map[string]bool{}
	// Objects a step makes, so later references can be checked; a reference to one no step makes is a typo.
	for _, st := range s.Steps {
		switch st.Action() {
		case "deploy":
			data, err := s.manifest(st.Deploy)
			if err != nil {
				bad(st.Line, "deploy: %v", err)
				continue
			}
			svcs, deps, err := objectNames(data)
			if err != nil {
				bad(st.Line, "deploy: %v", err)
			}
			for _, n := range svcs {
				services[n] = true
			}
			for _, n := range deps {
				deployments[n] = true
			}
		case "expose":
			if st.Expose.ExpectError == "" {
				services[cmp.Or(st.Expose.Service, cmp.Or(st.Expose.Deployment, "web"))] = true
			}
		}
	}
	checkText := func(line int, field, text string) {
		refs, err := Refs(text)
		if err != nil {
			bad(line, "%s: %v", field, err)
			return
		}
		for _, r := range refs {
			switch {
			case r.What == "node" && !slices.Contains(nodes, r.Name):
				bad(line, "%s: ${node.%s}: the lab's nodes are %s", field, r.Name, strings.Join(nodes, ", "))
			case r.What == "service" && !services[r.Name]:
				bad(line, "%s: ${service.%s.%s}: no step makes a Service %s", field, r.Name, r.Field, r.Name)
			case r.What == "pod" && !deployments[r.Name]:
				bad(line, "%s: ${pod.%s@%s}: no step deploys %s", field, r.Name, r.Node, r.Name)
			case r.What == "pod" && !slices.Contains(nodes, r.Node):
				bad(line, "%s: ${pod.%s@%s}: the lab's nodes are %s", field, r.Name, r.Node, strings.Join(nodes, ", "))
			}
		}
	}
	checkPlace := func(line int, place string) {
		switch {
		case strings.HasPrefix(place, "node/"):
			checkText(line, "from", "${node."+strings.TrimPrefix(place, "node/")+"}")
		case strings.HasPrefix(place, "pod/"):
			checkText(line, "from", "${pod."+strings.TrimPrefix(place, "pod/")+"}")
		}
	}
	checkNodes := func(line int, field string, p *PodSet) {
		if p == nil {
			return
		}
		for _, n := range p.Nodes {
			if !slices.Contains(nodes, n) {
				bad(line, "%s: node %s: the lab's nodes are %s", field, n, strings.Join(nodes, ", "))
			}
		}
	}
	checkDataplanes := func(line int, keys []string, knownAlone func(dp string) bool) {
		for _, key := range keys {
			d := key
			if p, dp, ok := strings.Cut(key, "/"); ok {
				if p != "kind" && p != "netns" {
					bad(line, "dataplanes: %s: a provider's entry is kind/DATAPLANE or netns/DATAPLANE", key)
				}
				d = dp
			}
			if !slices.Contains(runsOn, d) {
				bad(line, "dataplanes: %s: the scenario runs on %s only", d, strings.Join(runsOn, ", "))
			}
			if !knownAlone(key) {
				bad(line, "dataplanes: %s: known stands alone: a dataplane either has its own expectation (expect, reason) or a known failure", key)
			}
		}
	}
	for _, st := range s.Steps {
		switch st.Action() {
		case "":
			bad(st.Line, "a step does exactly one of deploy, scale, expose, delete, wait, connect, trace, object")
		case "scale":
			if !deployments[st.Scale.Deployment] {
				bad(st.Line, "scale: no step deploys %s", st.Scale.Deployment)
			}
		case "expose":
			if d := cmp.Or(st.Expose.Deployment, "web"); !deployments[d] {
				bad(st.Line, "expose: no step deploys %s", d)
			}
		case "connect":
			c := st.Connect
			checkPlace(st.Line, c.From)
			checkText(st.Line, "to", c.To)
			checkText(st.Line, "expect.source", c.Expect.Source)
			checkNodes(st.Line, "expect.pods", c.Expect.Pods)
			for _, d := range c.Dataplanes {
				if d.Expect != nil {
					checkText(st.Line, "expect.source", d.Expect.Source)
					checkNodes(st.Line, "expect.pods", d.Expect.Pods)
				}
			}
			checkDataplanes(st.Line, slices.Sorted(maps.Keys(c.Dataplanes)), func(dp string) bool { return knownAlone(c.Dataplanes[dp]) })
		case "trace":
			t := st.Trace
			checkPlace(st.Line, t.From)
			checkText(st.Line, "dst", t.Dst)
			checkText(st.Line, "src", t.Src)
			if t.Src != "" && t.Verify {
				bad(st.Line, "src: verify sends a real packet, which leaves with the sending place's own address: leave out src or verify")
			}
			if t.Node != "" && !slices.Contains(nodes, t.Node) {
				bad(st.Line, "node: %s: the lab's nodes are %s", t.Node, strings.Join(nodes, ", "))
			}
			if t.Expect.Verify != "" && !t.Verify {
				bad(st.Line, "expect.verify needs verify: true")
			}
			checkTraceSet := func(p *PodSet) {
				checkNodes(st.Line, "expect.endpoints", p)
				if p != nil && p.Word == "one" {
					bad(st.Line, "expect.endpoints: one is for connections (which pod answers); a trace lists every endpoint a new flow can reach")
				}
			}
			checkTraceSet(t.Expect.Endpoints)
			for _, d := range t.Dataplanes {
				if d.Expect != nil {
					checkTraceSet(d.Expect.Endpoints)
				}
			}
			checkDataplanes(st.Line, slices.Sorted(maps.Keys(t.Dataplanes)), func(dp string) bool { return knownAlone(t.Dataplanes[dp]) })
		case "object":
			if b := st.Object.Expect.Between; len(b) == 2 && b[0] > b[1] {
				bad(st.Line, "expect.between: %d > %d", b[0], b[1])
			}
		}
	}
	if a := s.Lab.LBAlgorithm; a != "" && !slices.ContainsFunc(runsOn, func(d string) bool {
		face, _ := engines.Lab(dataplanes.Name(d))
		return slices.Contains(face.LBAlgorithms, a)
	}) {
		bad(0, "lab.lbAlgorithm %s: none of the scenario's dataplanes (%s) chooses its backends by it", a, strings.Join(runsOn, ", "))
	}
	return errs
}

// knownAlone says a dataplane's entry is either its own expectation or a known failure, not both.
func knownAlone[E any](d Differs[E]) bool {
	return d.Known == "" || d.Expect == nil && d.Reason == ""
}

// Manifest is the manifest a deploy step applies ("" for the guide's web Deployment).
func (s *Scenario) Manifest(d *Deploy) ([]byte, error) { return s.manifest(d) }

func (s *Scenario) manifest(d *Deploy) ([]byte, error) {
	switch {
	case d.File != "" && d.Manifest != "":
		return nil, fmt.Errorf("give file or manifest, not both")
	case d.Manifest != "":
		return []byte(d.Manifest), nil
	case d.File != "":
		if s.files == nil {
			return nil, fmt.Errorf("%s: this scenario cannot name files", d.File)
		}
		return s.files(d.File)
	}
	return Web, nil
}

// objectNames are the Services and Deployments a manifest holds.
func objectNames(data []byte) (services, deployments []string, err error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var obj struct {
			Kind     string `yaml:"kind"`
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
		}
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return services, deployments, nil
			}
			return services, deployments, fmt.Errorf("the manifest: %v", err)
		}
		switch obj.Kind {
		case "Service":
			services = append(services, obj.Metadata.Name)
		case "Deployment":
			deployments = append(deployments, obj.Metadata.Name)
		}
	}
}
