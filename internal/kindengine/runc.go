package kindengine

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// SpecFile is the JSON file a runc invocation reads its capabilities from: the bundle's config.json for create
// and run (--bundle, -b, or the working directory), the --process file of exec; "" for other commands.
func SpecFile(args []string) string {
	cmd, rest := "", []string(nil)
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			cmd, rest = a, args[i+1:]
			break
		}
		// runc's global flags that take a value in the next word.
		if !strings.Contains(a, "=") && globalFlagTakesValue[strings.TrimLeft(a, "-")] {
			i++
		}
	}
	flag := func(names ...string) string {
		for i, a := range rest {
			for _, n := range names {
				if a == n && i+1 < len(rest) {
					return rest[i+1]
				}
				if v, ok := strings.CutPrefix(a, n+"="); ok {
					return v
				}
			}
		}
		return ""
	}
	switch cmd {
	case "create", "run":
		bundle := flag("--bundle", "-b")
		if bundle == "" {
			bundle, _ = os.Getwd()
		}
		return filepath.Join(bundle, "config.json")
	case "exec":
		return flag("--process", "-p")
	}
	return ""
}

var globalFlagTakesValue = map[string]bool{"root": true, "log": true, "log-format": true, "criu": true, "rootless": true}

// RealRunc is the runc the wrapper hands over to: $K8SGUIDE_RUNC, else runc on PATH.
func RealRunc() (string, error) {
	if p := os.Getenv(RuncEnv); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("runc")
	if err != nil {
		return "", fmt.Errorf("no runc on PATH (install the runc package, or set %s)", RuncEnv)
	}
	return p, nil
}

// RuncEnv names the real runc for the wrapper.
const RuncEnv = "K8SGUIDE_RUNC"
