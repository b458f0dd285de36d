//go:build linux

// Command runcwrap is the OCI runtime the test engine (internal/kindengine) registers as its default: it removes
// the capabilities this machine's processes may not hold from the spec it is handed, then runs the real runc.
//
// Why: the sandboxes these tests run in lack CAP_SYS_RESOURCE in every process's bounding set, and `docker run
// --privileged` (how kind runs each node) asks for every capability, so runc fails with "unable to apply caps:
// operation not permitted". A user's laptop or CI runner has the capability; this is a quirk of these machines,
// kept in the test harness. The capabilities removed are exactly those missing from this process's bounding set.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/k8sguide/k8sguide/internal/kindengine"
	"github.com/k8sguide/k8sguide/lab/kind/nodeimage/capability"
)

func main() {
	if err := run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "runcwrap:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	missing := capability.Missing()
	if len(missing) > 0 {
		if file := kindengine.SpecFile(args[1:]); file != "" {
			if err := dropCapabilities(file, missing); err != nil {
				return err
			}
		}
	}
	runc, err := kindengine.RealRunc()
	if err != nil {
		return err
	}
	return syscall.Exec(runc, append([]string{runc}, args[1:]...), os.Environ())
}

// dropCapabilities rewrites file (a bundle's config.json, whose capabilities sit under "process", or an exec's
// process.json, where they sit at the top) without the missing capabilities.
func dropCapabilities(file string, missing []string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	changed := false
	if raw, ok := doc["process"]; ok && filepath.Base(file) == "config.json" {
		var process map[string]json.RawMessage
		if err := json.Unmarshal(raw, &process); err != nil {
			return fmt.Errorf("%s: process: %w", file, err)
		}
		if drop(process, missing) {
			if doc["process"], err = json.Marshal(process); err != nil {
				return err
			}
			changed = true
		}
	} else {
		changed = drop(doc, missing)
	}
	if !changed {
		return nil
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return os.WriteFile(file, out, 0o600)
}

// drop removes the missing capabilities from every set of process's "capabilities" and says whether it did.
func drop(process map[string]json.RawMessage, missing []string) bool {
	raw, ok := process["capabilities"]
	if !ok {
		return false
	}
	var sets map[string][]string
	if err := json.Unmarshal(raw, &sets); err != nil {
		return false
	}
	changed := false
	for name, caps := range sets {
		kept := slices.DeleteFunc(slices.Clone(caps), func(c string) bool { return slices.Contains(missing, c) })
		if len(kept) != len(caps) {
			sets[name], changed = kept, true
		}
	}
	if changed {
		process["capabilities"], _ = json.Marshal(sets)
	}
	return changed
}
