package run

import (
	"strings"
	"testing"
)

// TestCommandLines: --explain's command lines fit 100 columns, break only before a flag (kept with its value),
// and stay one shell command (each break ends with a backslash).
func TestCommandLines(t *testing.T) {
	words := strings.Fields("$ k8sguide trace --dst 10.96.138.89:80 --name scn-clusterip-ipt --from pod/web-7b49f5dc7-9x25w --node scn-clusterip-ipt-worker --verify")
	got := commandLines(words, 100)
	want := "$ k8sguide trace --dst 10.96.138.89:80 --name scn-clusterip-ipt --from pod/web-7b49f5dc7-9x25w \\\n" +
		"    --node scn-clusterip-ipt-worker --verify\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if short := commandLines(strings.Fields("$ k8sguide deploy --name lab"), 100); short != "$ k8sguide deploy --name lab\n" {
		t.Errorf("a short command: %q", short)
	}
}
