package nftables

import (
	"os"
	"testing"
)

// fixtureFromText makes loadFixture build rulesets with ParseText from the text listing alone, rather than
// with ParseRuleset from the JSON (TestFixtureTestsFromText sets it).
var fixtureFromText bool

func loadFixture(t testing.TB, name string, withText bool) *Ruleset {
	t.Helper()
	if fixtureFromText && withText {
		b, err := os.ReadFile("testdata/" + name + ".nft")
		if err != nil {
			t.Fatal(err)
		}
		rs, err := ParseText(string(b))
		if err != nil {
			t.Fatal(err)
		}
		if len(rs.Warnings) != 0 {
			t.Fatalf("%s: warnings %q", name, rs.Warnings)
		}
		return rs
	}
	js, err := os.ReadFile("testdata/" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var text string
	if withText {
		b, err := os.ReadFile("testdata/" + name + ".nft")
		if err != nil {
			t.Fatal(err)
		}
		text = string(b)
	}
	rs, err := ParseRuleset(js, text)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestRenderMatchesNft renders every rule of the captures from its JSON and compares with nft's own text.
func TestRenderMatchesNft(t *testing.T) {
	for _, name := range []string{"nftables-worker", "scratch", "semantics", "nfh1-worker", "nfh1-worker-after-sticky", "nfh1-control-plane"} {
		withText := loadFixture(t, name, true)
		bare := loadFixture(t, name, false)
		n := 0
		for ti, tb := range withText.Tables {
			for ci, c := range tb.Chains {
				for ri, r := range c.Rules {
					got := bare.Tables[ti].Chains[ci].Rules[ri].Text
					if got != r.Text {
						t.Errorf("%s: %s %s handle %d:\n got %s\nwant %s", name, tb.Name, c.Name, r.Handle, got, r.Text)
					}
					n++
				}
			}
		}
		if n == 0 {
			t.Errorf("%s: no rules", name)
		}
	}
}
