package nftables

import (
	"encoding/json"
	"reflect"
	"testing"
)

// A part written by marshal reads back as the part json.Marshal would have written.
func TestPartMarshal(t *testing.T) {
	for _, p := range []Part{
		{},
		{Text: "table ip kube-proxy {\n\tchain x {\n\t\tcomment \"a \\\"b\\\"\"\n\t}\n}\n"},
		{Transaction: "add table ip kube-proxy\n"},
		{Text: "table ip t {\n}\n", Transaction: "add chain ip t c\n", Omitted: []string{"ip nat", "ip filter"}},
		{Omitted: []string{"ip nat"}},
		{JSON: json.RawMessage(`{"nftables": [ {"metainfo": {}} ]}`)},
	} {
		got, err := p.marshal()
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(p)
		var a, b Part
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatalf("%+v: %s: %v", p, got, err)
		}
		json.Unmarshal(want, &b)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("marshal(%+v) = %s; json.Marshal: %s", p, got, want)
		}
	}
}
