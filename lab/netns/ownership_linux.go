package netns

import (
	"context"
	"encoding/json"
	"os"
	"strings"

	"github.com/k8sguide/k8sguide/lab/state"
)

// A lab's network namespaces carry a mark of whose they are: the alias of their loopback interface, set right
// after the namespace is made and before anything else is put in it. `down` removes only namespaces that bear
// its lab's mark, so a state file that is lost, stale or names another lab can neither hide a lab from `down`
// nor turn `down` against another lab or against a namespace someone else made under a lab-like name.

// LabMark is the loopback alias of every namespace of lab name in store: its name and its store's root, so
// that a lab of the same name in another store (another K8SGUIDE_STATE_DIR) is not taken for it.
func LabMark(store state.Store, name string) string { return markPrefix + name + " " + store.Root }

const markPrefix = "k8sguide lab "

// markNamespace gives a namespace just made its lab's mark, uninterrupted (see AddNamespace).
func markNamespace(ns, mark string) error {
	return ipUninterrupted("-n", ns, "link", "set", "lo", "alias", mark)
}

// markOf is the mark a namespace bears ("" when it has none or does not exist).
func markOf(ctx context.Context, ns string) string {
	out, err := ipOutput(ctx, "-n", ns, "-j", "link", "show", "lo")
	if err != nil {
		return ""
	}
	var links []struct {
		IfAlias string `json:"ifalias"`
	}
	if json.Unmarshal([]byte(out), &links) != nil || len(links) != 1 {
		return ""
	}
	return links[0].IfAlias
}

// ownNamespaces are the namespaces the kernel holds that bear lab name's mark: its nodes, its client and its
// pods, whatever its state file says (or if it has none).
func ownNamespaces(ctx context.Context, store state.Store, name string) ([]string, error) {
	entries, err := os.ReadDir(netnsDir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	var own []string
	for _, e := range entries {
		// Every namespace of a lab is named after it (NAME-control-plane, NAME-worker, NAME-client,
		// NAME-pod-UID): only those are worth asking.
		if strings.HasPrefix(e.Name(), name+"-") && markOf(ctx, e.Name()) == LabMark(store, name) {
			own = append(own, e.Name())
		}
	}
	return own, nil
}

// KernelLabs names the labs of store whose control-plane namespace the kernel holds, by their marks, whether
// or not their state is still there.
func KernelLabs(ctx context.Context, store state.Store) []string {
	entries, _ := os.ReadDir(netnsDir)
	var labs []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), "-control-plane") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(markOf(ctx, e.Name()), markPrefix), " ")
		if e.Name() == name+"-control-plane" && markOf(ctx, e.Name()) == LabMark(store, name) {
			labs = append(labs, name)
		}
	}
	return labs
}
