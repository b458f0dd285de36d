package nftables

import "fmt"

// ParseText parses the output of `nft list ruleset` (with or without -a handles, counters or -s) into the
// model ParseRuleset builds from `nft -j list ruleset` of the same ruleset: the same tables, chains, sets and
// elements, and rules with the same statements and Text. It is the cheap way to read a node: nft prints text
// about twice as fast as JSON, and this parser reads it in one pass.
//
// Where the two differ, the text has more: nft 1.0.6's JSON leaves out table and chain comments, chain
// devices and the "dynamic" set flag, and ParseText keeps them. The text has no version (Version stays
// empty), and a statement's Raw is its text as nft printed it rather than its JSON. Handles are 0 when the
// text has no "# handle N" comments.
//
// Statements the model knows are parsed into it; statements nft prints that the tracer does not model (dup,
// fwd, tproxy, meter, ct count, …) become SUnknown statements named as their JSON is; text that is not
// understood at all becomes an SUnknown statement plus a Warning. It never panics; the error is only for
// input that is not nft's ruleset listing.
//
// The expressions of the result may share identical leaves (the same *Expr for every "meta l4proto"): treat
// them as read-only, as the walk does.
func ParseText(text string) (rs *Ruleset, err error) {
	defer func() {
		// Belt and braces: a parser bug must not take the caller down.
		if r := recover(); r != nil {
			rs, err = nil, fmt.Errorf("nft list ruleset: internal error: %v", r)
		}
	}()
	p := newTextParser(text)
	if err := p.ruleset(); err != nil {
		return nil, err
	}
	return p.rs, nil
}
