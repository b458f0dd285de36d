package ipvs

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
)

// Engine is the IPVS engine's faces. Its part of a snapshot is the node's State.
type Engine struct{}

func (Engine) Name() dataplanes.Name { return dataplanes.IPVS }

// Monitor: IPVS nodes keep kube-proxy's rules in iptables, which xtables-monitor --trace reports.
func (Engine) Monitor() string { return "iptables" }

// Sniff reads the ipvsadm outputs of a paste (`ipvsadm -Ln`, `ipvsadm -L`, `ipvsadm -Lnc`, each possibly after
// its "$ COMMAND" line) and leaves the other commands' outputs to other engines. The virtual servers' addresses
// are the node's (kube-ipvs0 holds them).
func (Engine) Sniff(raw string) (dataplanes.Sniffed, bool, error) {
	st, readAs, ok, err := ReadPaste(raw)
	if !ok || err != nil {
		return dataplanes.Sniffed{}, ok, err
	}
	data, err := json.Marshal(st)
	return dataplanes.Sniffed{Part: data, ReadAs: readAs, Local: st.LocalAddresses()}, true, err
}

// Open makes the IPVS table a ruleset of its own two hooks. An IPVS table serves Services even where kube-proxy's
// rules in iptables are all a dump shows of them.
//
// A table from a paste says nothing of the nat rules that masquerade what IPVS translates. The contract does not
// tell an engine which other parts the input has; the nat table's rules are walked when an engine opened before
// this one covers "nat" (the iptables engine names a pasted dump's tables in Covers), and only then is the
// source a real server sees known.
func (Engine) Open(raw json.RawMessage, o dataplanes.OpenOptions) (*dataplanes.Opened, error) {
	st, err := Decode(raw)
	if err != nil {
		return nil, err
	}
	rs := &Ruleset{State: st, MasqueradeUnknown: st.FromPaste && !o.Covered["nat"]}
	opened := &dataplanes.Opened{Rulesets: []netfilter.Ruleset{rs}, Serves: true, Supersedes: []dataplanes.Name{dataplanes.IPTables}}
	if rs.MasqueradeUnknown {
		// A packet no virtual server takes is left to the node's iptables rules, which the paste lacks: that
		// nothing translated it says nothing (it was "forwarded without translation").
		opened.Missing = append(opened.Missing, "the node's iptables rules: the paste holds only its IPVS table, where no virtual server takes this packet, and what the iptables rules do with it then is not in the input (paste `iptables-save` too)")
	}
	return opened, nil
}

// Decode reads the engine's part of a snapshot.
func Decode(raw json.RawMessage) (*State, error) {
	var st State
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("ipvs part: %v", err)
	}
	return &st, nil
}

// Period is how often the kernel refreshes the counters round robin's turn is read from.
func (Engine) Period() time.Duration { return EstimatorPeriod }

// Same says whether two reads of the table show the same counters.
func (Engine) Same(before, after json.RawMessage) bool {
	a, aerr := Decode(before)
	b, berr := Decode(after)
	if len(before) == 0 || aerr != nil {
		a = nil
	}
	if len(after) == 0 || berr != nil {
		b = nil
	}
	return SameCounters(a, b)
}
