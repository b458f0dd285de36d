// Command benchtable turns `go test -bench` output (stdin) into the table `make bench` prints: one row per
// benchmark, k8sguide's figures beside their floor's from the same run, and the ratio.
//
// The benchmarks report, besides what else they measure, under these units (testing.B.ReportMetric):
//
//	services                   how many Services the lab or the dump holds
//	ms, cpu-ms, MB             k8sguide's whole process: median wall time, median CPU time (user+system, with
//	                           its children), peak resident memory
//	floor-ms, floor-cpu-ms, floor-MB
//	                           the same of the floor it is measured against, interleaved with it (floors, by
//	                           benchmark, in floorOf)
//
// Any other metric (deploy's sync-ms, the control plane's cp-MB, …) is listed in the last column as it is.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
)

// floorOf names each benchmark's floor, by the first part of its name that has one.
var floorOf = map[string]string{
	"Start":                   "a Go program that prints a line",
	"TraceOffline":            "k8sguide --help",
	"TraceLive/iptables":      "iptables-save in the node",
	"TraceLive/nftables":      "nft list ruleset in the node",
	"TraceNode/live/iptables": "iptables-save in the node",
	"TraceNode/live/nftables": "nft list ruleset in the node",
	"TraceNode/offline":       "k8sguide --help",
	"Trace5000/iptables":      "iptables-save in the node",
	"Trace5000/nftables":      "nft list ruleset in the node",
}

// A row is one benchmark's line.
type row struct {
	name    string
	metrics map[string]float64
	order   []string
}

var benchLine = regexp.MustCompile(`^Benchmark(\S+?)(-\d+)?\s+\d+\s+(.*)$`)

func parse(r io.Reader) ([]row, error) {
	var rows []row
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		f := strings.Fields(m[3])
		if len(f)%2 != 0 {
			return nil, fmt.Errorf("unreadable benchmark line: %s", sc.Text())
		}
		rw := row{name: m[1], metrics: map[string]float64{}}
		for i := 0; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("unreadable value %q in: %s", f[i], sc.Text())
			}
			rw.metrics[f[i+1]] = v
			rw.order = append(rw.order, f[i+1])
		}
		rows = append(rows, rw)
	}
	return rows, sc.Err()
}

// table columns: the benchmark, services, k8sguide's three figures, the floor and its three, the ratios, the rest.
var known = map[string]bool{"ns/op": true, "services": true, "ms": true, "cpu-ms": true, "MB": true,
	"floor-ms": true, "floor-cpu-ms": true, "floor-MB": true}

func write(w io.Writer, rows []row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "benchmark\tServices\twall ms\tCPU ms\tpeak MB\tfloor\twall ms\tCPU ms\tpeak MB\twall ×\tCPU ×\tother")
	for _, r := range rows {
		cell := func(unit string, format string) string {
			if v, ok := r.metrics[unit]; ok {
				return fmt.Sprintf(format, v)
			}
			return "-"
		}
		ratio := func(a, b string) string {
			x, okx := r.metrics[a]
			y, oky := r.metrics[b]
			if !okx || !oky || y == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", x/y)
		}
		floor := "-"
		if _, ok := r.metrics["floor-ms"]; ok {
			floor = floorName(r.name)
		}
		var other []string
		for _, u := range r.order {
			if !known[u] {
				other = append(other, fmt.Sprintf("%s %s", strconv.FormatFloat(r.metrics[u], 'f', -1, 64), u))
			}
		}
		if _, ok := r.metrics["ms"]; !ok {
			// A benchmark without its own figures: its time per operation is the wall time.
			if ns, ok := r.metrics["ns/op"]; ok {
				r.metrics["ms"] = ns / 1e6
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.name, cell("services", "%.0f"),
			cell("ms", "%.0f"), cell("cpu-ms", "%.0f"), cell("MB", "%.1f"), floor,
			cell("floor-ms", "%.0f"), cell("floor-cpu-ms", "%.0f"), cell("floor-MB", "%.1f"),
			ratio("ms", "floor-ms"), ratio("cpu-ms", "floor-cpu-ms"), strings.Join(other, ", "))
	}
	return tw.Flush()
}

// floorName is the floor of the benchmark name (its longest prefix in floorOf), or "?".
func floorName(name string) string {
	best := ""
	for prefix := range floorOf {
		if (name == prefix || strings.HasPrefix(name, prefix+"/")) && len(prefix) > len(best) {
			best = prefix
		}
	}
	if best == "" {
		return "?"
	}
	return floorOf[best]
}

func main() {
	rows, err := parse(os.Stdin)
	if err == nil && len(rows) == 0 {
		err = fmt.Errorf("no benchmark lines on stdin")
	}
	if err == nil {
		err = write(os.Stdout, rows)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}
