// Package doctor is the model of `k8sguide doctor`: what a provider and a dataplane need of this host (kernel
// features, tools, limits, permissions, a Docker engine), each need checked and said as pass, warn or fail with
// what was found and how to fix it. The providers make the checks (lab/netns, lab/kind); `up` runs their quick
// part before it makes anything, and stops at the first failure.
package doctor

import (
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
)

// Status is a check's verdict.
type Status string

const (
	// Pass: the need is met.
	Pass Status = "pass"
	// Warn: a lab can be made, but something will hurt (few labs fit, a module is not loaded yet).
	Warn Status = "warn"
	// Fail: `up` of what the check is for would fail.
	Fail Status = "fail"
)

// Check is one need and what this host showed of it.
type Check struct {
	// For is what needs it: a provider ("netns", "kind") or a provider and a dataplane ("netns/ipvs").
	For string `json:"for"`
	// Name says what is needed, in a few words ("root", "nft (nftables)", "inotify instances").
	Name   string `json:"name"`
	Status Status `json:"status"`
	// Found is what was found, in a sentence.
	Found string `json:"found"`
	// Fix says what to do about a warn or a fail.
	Fix string `json:"fix,omitempty"`
}

// Report is a doctor run: the checks in the order they were made.
type Report struct {
	Checks []Check `json:"checks"`
}

// Failed are the checks that failed.
func (r Report) Failed() []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.Status == Fail {
			out = append(out, c)
		}
	}
	return out
}

// Err is the first failed check as one line (what `up` prints), or nil.
func (r Report) Err() error {
	if f := r.Failed(); len(f) > 0 {
		return f[0].Err()
	}
	return nil
}

// Err is c as one error line: what was found, then the fix.
func (c Check) Err() error {
	if c.Status != Fail {
		return nil
	}
	if c.Fix == "" {
		return errors.New(c.Found)
	}
	return fmt.Errorf("%s: %s", strings.TrimSuffix(c.Found, "."), c.Fix)
}

// Tool checks that a program is on PATH; pkg is the package that installs it.
func Tool(forWhat, bin, pkg string) Check {
	c := Check{For: forWhat, Name: bin}
	if path, err := exec.LookPath(bin); err == nil {
		c.Status, c.Found = Pass, path
		return c
	}
	c.Status, c.Found, c.Fix = Fail, bin+" not found on PATH", "install the "+pkg+" package"
	return c
}

// FromError is a check that passes with found when err is nil, and otherwise fails with err's text, which
// says the fix already (the providers' own preflight errors do).
func FromError(forWhat, name, found string, err error) Check {
	if err != nil {
		return Check{For: forWhat, Name: name, Status: Fail, Found: err.Error()}
	}
	return Check{For: forWhat, Name: name, Status: Pass, Found: found}
}

// Inotify is the inotify budget of one user: each process watching files (the control plane's informers, the
// agents, kube-proxy's config watch) holds instances, and past the limit the next one fails with "too many open
// files".
type Inotify struct {
	// MaxInstances and MaxWatches are fs.inotify.max_user_instances and max_user_watches.
	MaxInstances, MaxWatches int
	// Instances is how many instances the user's processes hold now (one per open inotify descriptor; a
	// descriptor shared across a fork counts twice, so this can be a little high).
	Instances int
	// Unreadable is how many of the user's processes' descriptors could not be read (another user's, read
	// without root): Instances is then a lower bound, not a count.
	Unreadable int
}

// InotifyPerLab is about how many inotify instances one netns lab's processes hold: on a 3-node iptables lab,
// 13 for the control plane (its informers' and certificates' watches) and one per kube-proxy (counted in
// /proc/*/fd during make test).
const InotifyPerLab = 16

// RaiseInotifyTo is what --fix raises fs.inotify.max_user_instances to: kind's known-issues page's value for
// "too many open files", room for 30 labs.
const RaiseInotifyTo = 512

// InotifyCheck says how many more labs the inotify instance limit lets root (who runs them) run, perLab
// instances each.
func InotifyCheck(forWhat string, in Inotify, perLab int) Check {
	c := Check{For: forWhat, Name: "inotify instances"}
	if in.Unreadable > 0 {
		// Not root: root's processes, which hold the labs' instances, cannot be read. A count from the
		// readable ones would look surer than it is.
		c.Status = Warn
		c.Found = fmt.Sprintf("limit %d (fs.inotify.max_user_instances), a lab holds about %d: how many are in use is unknown (root's %d processes cannot be read without root)", in.MaxInstances, perLab, in.Unreadable)
		return c
	}
	free := in.MaxInstances - in.Instances
	fits := max(free, 0) / perLab
	c.Found = fmt.Sprintf("%d of %d in use (fs.inotify.max_user_instances); a lab holds about %d: room for %d more", in.Instances, in.MaxInstances, perLab, fits)
	fix := fmt.Sprintf("k8sguide doctor --fix sets fs.inotify.max_user_instances=%d (put it in /etc/sysctl.d/ to keep it)", InotifyTarget(in, perLab))
	switch {
	case fits == 0:
		c.Status, c.Fix = Fail, "the next lab's kube-proxy would fail with \"too many open files\": "+fix
	case fits < 3:
		c.Status, c.Fix = Warn, fix
	default:
		c.Status = Pass
	}
	return c
}

// InotifyTarget is the limit --fix sets: RaiseInotifyTo, or room for three more labs if that is more.
func InotifyTarget(in Inotify, perLab int) int {
	return max(RaiseInotifyTo, in.Instances+3*perLab)
}

// Grouped orders checks by what needs them, each group where its first check was, keeping the order within it.
func Grouped(checks []Check) []Check {
	rank := map[string]int{}
	for _, c := range checks {
		if _, ok := rank[c.For]; !ok {
			rank[c.For] = len(rank)
		}
	}
	out := slices.Clone(checks)
	slices.SortStableFunc(out, func(a, b Check) int { return rank[a.For] - rank[b.For] })
	return out
}
