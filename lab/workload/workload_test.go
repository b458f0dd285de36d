package workload

import (
	"strings"
	"testing"
)

func TestParseManifestErrors(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"apiVersion: v1\nkind: Secret\nmetadata: {name: x}\n", "unsupported kind"},
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: x}\n", "ConfigMap has no metadata.name"},
		{"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {selector: {matchLabels: {a: b}}, template: {metadata: {labels: {a: c}}, spec: {containers: [{name: c}]}}}\n", "does not match"},
		{"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicaz: 3}\n", "unknown field"},
		{"", "no Deployment or Service"},
	} {
		_, err := ParseManifest([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.doc, err, tc.want)
		}
	}
}
