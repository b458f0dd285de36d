package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/state"
)

// What is wrong with a lab's nodes, read from what their inits and agents record and from the process table,
// without the apiserver (which may be what is down): commands say it at once instead of a bare "connection
// refused", and go on with what they can do without the sick node.

// nodeProblems says, for each node that is not well, what is wrong with it, in a few words a user can act on.
func (p *Provider) nodeProblems(st *state.Lab) map[string]string {
	name := st.Config.Name
	problems := map[string]string{}
	gone := initsGone(st)
	for _, n := range st.Nodes {
		var what []string
		if why, ok := gone[n.Name]; ok {
			what = append(what, why)
		} else if s, ok := readInitStatus(p.Store, name, n.Name); ok && s.AgentPID == 0 {
			msg := fmt.Sprintf("its agent stopped (%s)", s.LastExit)
			if s.RestartAt != nil {
				msg += fmt.Sprintf(" and starts again in %s (restart %d)", max(time.Until(*s.RestartAt), 0).Round(time.Second), s.Restarts)
			}
			what = append(what, msg+"; log: "+p.agentLog(name, n.Name))
		} else if ok && !processAlive(s.AgentPID) {
			what = append(what, fmt.Sprintf("its agent (pid %d) stopped a moment ago; log: %s", s.AgentPID, p.agentLog(name, n.Name)))
		}
		if n.Role == lab.ControlPlane && exists(ControlPlaneRecord(p.Store, name)) {
			if m := notRunning("control plane", ControlPlaneRecord(p.Store, name), filepath.Join(p.Store.Dir(name), "control-plane.log")); m != "" {
				what = append(what, m)
			}
		}
		if st.Phase == state.Ready {
			if m := notRunning("proxy", ProxyRecord(p.Store, name, n.Name), ProxyLog(p.Store, name, n.Name)); m != "" {
				what = append(what, m)
			}
		}
		if len(what) > 0 {
			problems[n.Name] = strings.Join(what, "; ")
		}
	}
	return problems
}

// initsGone names st's nodes whose init is gone, each with what its user is told: nothing restarts the node's
// agent, and so its pods, again.
func initsGone(st *state.Lab) map[string]string {
	gone := map[string]string{}
	for node, pid := range st.InitPIDs {
		if !processAlive(pid) {
			gone[node] = fmt.Sprintf("its init (pid %d) is gone, so nothing restarts its agent: remove the lab (k8sguide down --name %s) and make it again", pid, st.Config.Name)
		}
	}
	return gone
}

// notRunning says that a supervised process is not running, how it last ended and when its agent starts it
// again ("" while it runs).
func notRunning(what, record, logPath string) string {
	if livePID(record) != 0 {
		return ""
	}
	msg := "its " + what + " is not running"
	if s, ok := ReadProcStatus(record); ok && s.Restarts > 0 {
		msg += fmt.Sprintf(" (%s", s.LastExit)
		if s.LastLog != "" && !strings.HasPrefix(s.LastExit, "signal:") {
			// A process that exited by itself said why last; one that was killed did not.
			msg += ": " + s.LastLog
		}
		msg += ")"
		if s.RestartAt != nil {
			msg += fmt.Sprintf("; its agent starts it again in %s (restart %d)", max(time.Until(*s.RestartAt), 0).Round(time.Second), s.Restarts)
		}
	}
	return msg + "; log: " + logPath
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// removalPath records the `down` that is removing a lab: while it runs, the lab's processes stop one by one
// and a command that meets them gone is told the lab is going, not that its init is gone and to remove it.
func removalPath(store state.Store, labName string) string {
	return ProcRecordPath(store, labName, "down")
}

// removing says that a `down` is removing the lab ("" when none is).
func removing(store state.Store, labName string) string {
	if rec, ok := LiveRecord(removalPath(store, labName)); ok {
		return fmt.Sprintf("the lab is being removed (k8sguide down, pid %d)", rec.PID)
	}
	return ""
}

// describeProblems is the nodes' problems in one line, the nodes in the lab's order.
func describeProblems(st *state.Lab, problems map[string]string) string {
	var parts []string
	for _, n := range st.Nodes {
		if p, ok := problems[n.Name]; ok {
			parts = append(parts, "node "+n.Name+": "+p)
		}
	}
	return strings.Join(parts, "; ")
}

// apiUnreachableError is a failed request to the lab's apiserver, with what the lab's nodes say about why.
type apiUnreachableError struct {
	lab    string
	err    error
	reason string
}

func (e *apiUnreachableError) Error() string {
	msg := fmt.Sprintf("lab %s: the apiserver did not answer (%s)", e.lab, rootCause(e.err))
	if e.reason != "" {
		return msg + ": " + e.reason
	}
	return msg
}

func (e *apiUnreachableError) Unwrap() error { return e.err }

// rootCause is the innermost error's text: "connection refused", not client-go's URL and dial chain.
func rootCause(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		err = next
	}
}

// diagnosingTransport adds to a request that could not reach the lab's apiserver what is wrong with the lab
// (its control-plane node's agent is down, the control plane is restarting, ...).
type diagnosingTransport struct {
	p    *Provider
	lab  string
	next http.RoundTripper
}

// apiRestartWait bounds how long a request waits for a control plane that is starting again (at once, or after
// the kubelet's first back-off of 10 s, then some 8 s to serve).
const apiRestartWait = 25 * time.Second

func (t *diagnosingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	deadline := time.Now().Add(apiRestartWait)
	for {
		// The request reached the apiserver only if it was written: the apiserver ends the TLS the
		// forwarder carries, so nothing is written to a connection it never took.
		var wrote atomic.Bool
		traced := req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) }}))
		resp, err := t.next.RoundTrip(traced)
		if errors.Is(req.Context().Err(), context.Canceled) {
			return resp, err // the user's Ctrl-C, not the lab
		}
		if err == nil && resp.StatusCode >= 400 {
			// A control plane on a full disk answers what it cannot write with errors that do not say so
			// ("forbidden" while RBAC cannot load, 500s from etcd): name the disk instead.
			if d := diskProblem(t.p.Store.Dir(t.lab)); d != "" {
				resp.Body.Close()
				return nil, &apiUnreachableError{lab: t.lab, err: fmt.Errorf("HTTP %d", resp.StatusCode), reason: d}
			}
		}
		if err == nil || !unreachable(err) {
			return resp, err
		}
		st, serr := t.p.Store.View(t.lab)
		if serr != nil {
			return nil, err
		}
		back, comes := t.p.apiBackBy(st)
		if comes && back.Before(deadline) && time.Now().Before(deadline) && safeToRetry(req, wrote.Load()) {
			// The control plane (or the agent that forwards to it) is starting again and will be back in time:
			// wait for it rather than fail a command whose request never reached it.
			if req.GetBody != nil {
				body, berr := req.GetBody()
				if berr != nil {
					return nil, err
				}
				req = req.Clone(req.Context())
				req.Body = body
			}
			select {
			case <-req.Context().Done():
				return nil, err
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		reason := diskProblem(t.p.Store.Dir(t.lab))
		if reason == "" {
			reason = removing(t.p.Store, t.lab)
		}
		if reason == "" {
			reason = describeProblems(st, t.p.nodeProblems(st))
		}
		if reason == "" {
			reason = "no node reports a problem; the control plane may be starting again (log: " + filepath.Join(t.p.Store.Dir(t.lab), "control-plane.log") + ")"
		}
		return nil, &apiUnreachableError{lab: t.lab, err: err, reason: reason}
	}
}

// unreachable tells whether err is a failure to reach the apiserver (no answer at all), not an answer.
func unreachable(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || isEOF(err) ||
		strings.Contains(err.Error(), "TLS handshake")
}

// safeToRetry tells whether a failed request may be sent again: one that was never written (it cannot have
// reached the apiserver), or one that does the same when sent twice.
func safeToRetry(req *http.Request, wrote bool) bool {
	if req.Body != nil && req.GetBody == nil {
		return false
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	return !wrote
}

// apiBackBy is when the lab's apiserver should serve again, from what its control-plane node reports: now if
// nothing is down, the restart time of the agent or the control plane if one is, and false if nothing will
// start it (the node's init is gone).
func (p *Provider) apiBackBy(st *state.Lab) (time.Time, bool) {
	now := time.Now()
	for _, n := range st.Nodes {
		if n.Role != lab.ControlPlane {
			continue
		}
		if pid, ok := st.InitPIDs[n.Name]; ok && !processAlive(pid) {
			return time.Time{}, false
		}
		if s, ok := readInitStatus(p.Store, st.Config.Name, n.Name); ok && s.AgentPID == 0 && s.RestartAt != nil {
			return *s.RestartAt, true
		}
		if livePID(ControlPlaneRecord(p.Store, st.Config.Name)) == 0 {
			if s, ok := ReadProcStatus(ControlPlaneRecord(p.Store, st.Config.Name)); ok && s.RestartAt != nil && s.RestartAt.After(now) {
				return *s.RestartAt, true
			}
		}
	}
	return now, true
}

// WrappedRoundTripper lets client-go reach the transport beneath (to cancel a request).
func (t *diagnosingTransport) WrappedRoundTripper() http.RoundTripper { return t.next }

func isEOF(err error) bool {
	return err != nil && (strings.HasSuffix(err.Error(), "EOF") || strings.Contains(err.Error(), "connection reset"))
}
