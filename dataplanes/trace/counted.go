package trace

// Counted is a counted run (`k8sguide counters`): the trace of a packet from the client, N real connections
// like it, and what the kernel and the pods said of them: which pod answered each, and, on iptables, each
// choice rule's packet counter before and after.
type Counted struct {
	Node      string `json:"node"`
	Dst       string `json:"dst"`
	Dataplane string `json:"dataplane"`
	Made      int    `json:"made"`
	Answered  int    `json:"answered"`
	// Endpoints are the trace's endpoints with the connections each pod answered.
	Endpoints []CountedEndpoint `json:"endpoints"`
	// ConntrackRecord says which of the kernel's records the endpoints' Conntrack counts come from ("" when
	// none was read).
	ConntrackRecord string `json:"conntrackRecord,omitempty"`
	// Rules are the choice rules of kube-proxy's cascade (iptables), in their chain's order; empty where the
	// dataplane's counters are not read (Notes say so).
	Rules []CountedRule `json:"rules,omitempty"`
	// ChiSquare is Pearson's statistic of the answers against the trace's chances, with DF degrees of freedom,
	// and P the chance of a statistic at least that large were the chances right.
	ChiSquare float64 `json:"chiSquare"`
	DF        int     `json:"df"`
	P         float64 `json:"p"`
	// Verdict is what the numbers support, in a sentence.
	Verdict string   `json:"verdict"`
	Notes   []string `json:"notes,omitempty"`
}

// CountedEndpoint is one endpoint: the trace's chance for a new connection, the connections its pod answered,
// and, where the node's conntrack was read, the run's new conntrack entries whose reply comes from it (the
// kernel's own record of where it sent each connection).
type CountedEndpoint struct {
	Endpoint  Endpoint `json:"endpoint"`
	Answered  int      `json:"answered"`
	Conntrack *int     `json:"conntrack,omitempty"`
}

// CountedRule is one rule of the choice: its own chance when a packet reaches it (statistic's probability; 1
// for the last rule, which takes the rest), and the kernel's packet counter before and after.
type CountedRule struct {
	Chain    string  `json:"chain"`
	Rule     int     `json:"rule"`
	Text     string  `json:"text"`
	Chance   float64 `json:"chance"`
	Before   uint64  `json:"before"`
	After    uint64  `json:"after"`
	Endpoint string  `json:"endpoint"` // the pod (or address) it sends to
	// Reached is how many counted packets reached the rule: its own and those of the rules after it.
	Reached uint64 `json:"reached"`
}

// Counted returns how many of the run's packets the rule matched.
func (r CountedRule) Counted() uint64 { return r.After - r.Before }
