package lab

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// A lab's names: the lab's own, its nodes' and client's, and reading a node or pod as a user gives it.

// DefaultName is the lab name used when --name is not given; it is the name of the seeds' kind cluster.
const DefaultName = "k8s-guide"

var namePattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)

// ValidateName checks a lab name: it prefixes namespace and node names, so it must be a short DNS label.
func ValidateName(name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("invalid lab name %q: use 1-32 lowercase letters, digits and '-', starting and ending with a letter or digit", name)
	}
	return nil
}

// NodeNames returns the kind-style node names of a lab: NAME-control-plane, NAME-worker, NAME-worker2, ...
func NodeNames(name string, workers int) []string {
	names := []string{name + "-control-plane"}
	for i := 1; i <= workers; i++ {
		if i == 1 {
			names = append(names, name+"-worker")
		} else {
			names = append(names, fmt.Sprintf("%s-worker%d", name, i))
		}
	}
	return names
}

// ClientName is the name of the lab's client: the machine outside the cluster ("the host" in the seeds).
func ClientName(name string) string { return name + "-client" }

// ResolveNode finds arg among nodes, the full names of lab labName's nodes (LAB-worker2; the client's too, where
// a command takes it). arg is a full name or a short one, without the lab's prefix, as node-ip prints it
// (worker2, control-plane). An unknown name is a *NotFoundError that lists the nodes and suggests the closest
// by edit distance, written the way arg was (short or full), when it is close enough to be a typo.
func ResolveNode(nodes []string, labName, arg string) (string, error) {
	if slices.Contains(nodes, arg) {
		return arg, nil
	}
	prefix := labName + "-"
	if labName != "" && slices.Contains(nodes, prefix+arg) {
		return prefix + arg, nil
	}
	nf := &NotFoundError{Kind: "node", Name: arg, Known: nodes}
	best := -1
	for _, n := range nodes {
		form := n
		if !strings.HasPrefix(arg, prefix) {
			form = strings.TrimPrefix(n, prefix)
		}
		// A guess more than half wrong is no help: the list follows anyway.
		if d := editDistance(arg, form); 2*d <= len(form) && (best < 0 || d < best) {
			best, nf.Suggest = d, form
		}
	}
	return "", nf
}

// editDistance is the Levenshtein distance between a and b, in bytes (node names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// PodRef reads a pod named as trace --from names one: "pod/NAME", or "pod/NAMESPACE/NAME" (namespace "" is any
// namespace). ok is false for anything else, which names a node or the client.
func PodRef(target string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(target, "pod/")
	if !ok {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	for _, p := range parts {
		if p == "" {
			return "", "", false
		}
	}
	switch len(parts) {
	case 1:
		return "", parts[0], true
	case 2:
		return parts[0], parts[1], true
	}
	return "", "", false
}
