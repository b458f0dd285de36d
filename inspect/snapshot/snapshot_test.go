package snapshot

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/nftables"
)

// The golden test's v1 snapshots (cmd/k8sguide/app/testdata/README.md says where they come from): real
// `k8sguide snapshot` output of the last version before engine parts.
const v1Fixtures = "../../cmd/k8sguide/app/testdata/"

func TestParseV1(t *testing.T) {
	// iptables: its dumps by backend become the iptables part as they were; nftables keeps the tables it left
	// to iptables even with no rules of its own, so that the walk still leaves them out.
	data := read(t, "iptables-worker2.v1.json")
	s, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	var old map[string]json.RawMessage
	if err := json.Unmarshal(data, &old); err != nil {
		t.Fatal(err)
	}
	if s.Version != Version || s.Node != "gold-iptables-worker2" || s.Dataplane != dataplanes.IPTables {
		t.Errorf("header: %s %s %s", s.Version, s.Node, s.Dataplane)
	}
	if !jsonEqual(t, s.Part(dataplanes.IPTables), old["iptables"]) {
		t.Errorf("iptables part %s, want v1's iptables field", s.Part(dataplanes.IPTables))
	}
	var nft nftables.Part
	if err := json.Unmarshal(s.Part(dataplanes.NFTables), &nft); err != nil {
		t.Fatalf("nftables part %s: %v", s.Part(dataplanes.NFTables), err)
	}
	if nft.Text != "" || !reflect.DeepEqual(nft.Omitted, []string{"ip filter", "ip mangle", "ip nat"}) {
		t.Errorf("nftables part %+v", nft)
	}
	if s.Part(dataplanes.IPVS) != nil || s.Part(dataplanes.EBPF) != nil || len(s.Engines) != 2 {
		t.Errorf("engines %v: want iptables and nftables only", keys(s.Engines))
	}
	if s.Kubernetes == nil || len(s.Kubernetes.Services) == 0 || len(s.Net.Addresses) == 0 {
		t.Errorf("names and network not kept: %+v %+v", s.Kubernetes, s.Net)
	}

	// nftables: the ruleset text moves into the part.
	s, err = Parse(read(t, "nftables-worker2.v1.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(s.Part(dataplanes.NFTables), &nft); err != nil || !strings.Contains(nft.Text, "table ip kube-proxy") {
		t.Errorf("nftables part: %v %.80q", err, nft.Text)
	}
	if s.Part(dataplanes.IPTables) != nil {
		t.Errorf("an nftables node's v1 snapshot has no iptables field, yet the part is %s", s.Part(dataplanes.IPTables))
	}
}

// TestRoundTrip: a snapshot Parse read, written again, reads back the same (v2 documents are written as is).
func TestRoundTrip(t *testing.T) {
	for _, f := range []string{"iptables-worker2.v1.json", "nftables-worker2.v1.json", "ebpf-worker2.v1.json"} {
		s, err := Parse(read(t, f))
		if err != nil {
			t.Fatal(err)
		}
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(out, []byte(`"version":"`+Version+`"`)) {
			t.Errorf("%s written as %.60s", f, out)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatal(err)
		}
		out2, _ := json.Marshal(again)
		if !bytes.Equal(out, out2) {
			t.Errorf("%s: v2 does not read back as written", f)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	if _, err := Parse([]byte(`{"nftables":[{"metainfo":{}}]}`)); !errors.Is(err, ErrNotSnapshot) {
		t.Errorf("a document without a version: %v, want ErrNotSnapshot (engines then sniff it)", err)
	}
	_, err := Parse([]byte(`{"version":"k8sguide.snapshot/v9"}`))
	if err == nil || !strings.Contains(err.Error(), Version) || !strings.Contains(err.Error(), VersionV1) {
		t.Errorf("an unknown version: %v, want the versions this k8sguide reads", err)
	}
	if _, err := Parse([]byte(`{"version":`)); err == nil {
		t.Error("truncated JSON parsed")
	}
}

func read(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(v1Fixtures + name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func jsonEqual(t *testing.T, a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func keys(m map[dataplanes.Name]json.RawMessage) []dataplanes.Name {
	var out []dataplanes.Name
	for k := range m {
		out = append(out, k)
	}
	return out
}
