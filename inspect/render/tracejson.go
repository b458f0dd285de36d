package render

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"regexp"
	"slices"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// nullHops is a "hops" key whose list WriteTraceJSON left out of the document's shell: a line of its own (a JSON
// string holds no raw newline, so no value can look like it), with the indentation that says how deep it is.
var nullHops = regexp.MustCompile(`(?m)^( *)"hops": null(,?)$`)

// WriteTraceJSON writes t as WriteData(w, JSON, t) does, byte for byte, without holding the whole document in
// memory. A NodePort packet on a node with 5,000 Services passes every rule of KUBE-SERVICES on each of its
// paths: the document is 13 MB, and marshalling it whole and then indenting it took 30–80 MB more than the
// trace itself. Here the document without its hop lists is marshalled, and each list is written hop by hop
// where its key stands.
func WriteTraceJSON(w io.Writer, t *trace.Trace) error {
	shell := *t
	shell.Hops = nil
	shell.Paths = slices.Clone(t.Paths)
	lists := [][]trace.Hop{t.Hops}
	for i := range shell.Paths {
		lists = append(lists, t.Paths[i].Hops)
		shell.Paths[i].Hops = nil
	}
	var head bytes.Buffer
	enc := json.NewEncoder(&head)
	enc.SetIndent("", "  ")
	if err := enc.Encode(&shell); err != nil {
		return err
	}
	doc := head.Bytes()
	at := nullHops.FindAllSubmatchIndex(doc, -1)
	if len(at) != len(lists) {
		return WriteData(w, JSON, t) // not the shape this knows: the whole document, as before
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	last := 0
	for i, m := range at {
		hops := lists[i]
		if hops == nil {
			continue // null it was, and null it stays
		}
		indent, comma := string(doc[m[2]:m[3]]), string(doc[m[4]:m[5]])
		bw.Write(doc[last:m[0]])
		last = m[1]
		if len(hops) == 0 {
			bw.WriteString(indent + `"hops": []` + comma)
			continue
		}
		bw.WriteString(indent + "\"hops\": [\n")
		inner := indent + "  "
		for j := range hops {
			b, err := json.MarshalIndent(&hops[j], inner, "  ")
			if err != nil {
				return err
			}
			bw.WriteString(inner)
			bw.Write(b)
			if j < len(hops)-1 {
				bw.WriteByte(',')
			}
			bw.WriteByte('\n')
		}
		bw.WriteString(indent + "]" + comma)
	}
	bw.Write(doc[last:])
	return bw.Flush()
}
