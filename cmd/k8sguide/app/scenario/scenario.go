// Package scenario implements `k8sguide scenario`: the shipped lessons as files, run on every dataplane.
package scenario

import (
	"bufio"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/k8sguide/k8sguide/inspect/render"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/providers"
	"github.com/k8sguide/k8sguide/scenarios"
	"github.com/k8sguide/k8sguide/scenarios/run"
)

// NewCommand returns the scenario command group.
func NewCommand(streams lab.Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "scenario",
		Short: "Lessons as files: build a lab per dataplane, run the steps, check the results (for CI and the classroom)",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(listCommand(streams), showCommand(streams), schemaCommand(streams), runCommand(streams))
	return cmd
}

func listCommand(streams lab.Streams) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the scenarios k8sguide ships",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			all, err := scenarios.Builtin()
			if err != nil {
				return err
			}
			var rows [][]string
			for _, s := range all {
				checks := 0
				for _, st := range s.Steps {
					if st.IsCheck() {
						checks++
					}
				}
				rows = append(rows, []string{s.Metadata.Name, dataplaneList(s.DataplanesOf()), fmt.Sprint(checks), s.Metadata.Title})
			}
			return render.WriteTable(streams.Out, []string{"NAME", "DATAPLANES", "CHECKS", "TITLE"}, rows)
		},
	}
}

// dataplaneList names a scenario's dataplanes briefly, so that the list fits 100 columns: all, all but one, or
// each.
func dataplaneList(dps []string) string {
	switch len(scenarios.Dataplanes()) - len(dps) {
	case 0:
		return "all"
	case 1:
		for _, d := range scenarios.Dataplanes() {
			if !slices.Contains(dps, d) {
				return "all but " + d
			}
		}
	}
	return strings.Join(dps, ",")
}

func showCommand(streams lab.Streams) *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME|FILE",
		Short: "Print a scenario's file (a shipped one by name)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := scenarios.Find(args[0])
			if err != nil {
				return err
			}
			data, err := scenarios.Source(s)
			if err != nil {
				return err
			}
			_, err = streams.Out.Write(data)
			return err
		},
	}
}

func schemaCommand(streams lab.Streams) *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of scenario files (for editors: yaml-language-server's $schema)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := streams.Out.Write(scenarios.Schema())
			return err
		},
	}
}

type runFlags struct {
	Dataplane     string
	Provider      string
	Image         string
	Keep          bool
	KeepOnFailure bool
	JUnit         string
	Output        string
	Parallel      int
	Explain       bool
	NoPause       bool
	LabPrefix     string
	LabPerLesson  bool
	Lab           string
}

// exitCode ends the command with a status and no message of its own: the report has said it.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
func (e exitCode) ExitCode() int { return int(e) }

// couldNotRun gives an error that kept the scenarios from running (a wrong argument, a malformed file) exit status
// 2, as the run's own errors have, after saying it in one line.
func couldNotRun(streams lab.Streams, err error) error {
	var code exitCode
	if err == nil || errors.As(err, &code) {
		return err
	}
	fmt.Fprintf(streams.Err, "ERROR: %v\n", err)
	return exitCode(2)
}

// MaxParallel bounds scenario run --parallel: each lab is a handful of processes and namespaces.
const MaxParallel = 32

func runCommand(streams lab.Streams) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "run [NAME|FILE...]",
		Short: "Run scenarios (default: every shipped one) on each of their dataplanes, and print the matrix",
		Long: `Run scenarios on each of their dataplanes, in labs that are taken down afterwards (also on failure and on
Ctrl-C, unless --keep or --keep-on-failure). Scenarios that ask for the same lab (dataplane, workers, NodePort
range and addresses, LB algorithm) run one after another on one lab, which is put back as up left it between
them: what a scenario made is deleted, and a lab that cannot be put back is replaced by a fresh one.
--lab-per-lesson, --keep, --keep-on-failure and --explain give each scenario a fresh lab. --lab runs them on a
lab you made instead, one after another, and leaves it up as it found it (a scenario that asks for another
dataplane, node count, NodePort range or addresses, or LB algorithm does not run). Exit status: 0 every check
passed, 1 a check failed, 2 a scenario or its lab could not run.`,
		Example: `  k8sguide scenario run --dataplane iptables,nftables,ebpf --junit results.xml
  k8sguide scenario run nodeport --explain --dataplane nftables
  k8sguide scenario run ./my-lesson.yaml -o json
  k8sguide scenario run nodeport local-traffic --lab kind-lab`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return couldNotRun(streams, runE(cmd, f, streams, args))
		},
	}
	// A wrong flag is a run that could not start, not a failed check: CI must not read it as one.
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return couldNotRun(streams, err) })
	cmd.Flags().StringVar(&f.Dataplane, "dataplane", "all", "all, or a list of iptables, nftables, ipvs, ebpf")
	cmd.Flags().StringVar(&f.Provider, "provider", "", "lab provider for every lab: kind or netns (default: up's choice)")
	cmd.Flags().StringVar(&f.Image, "image", "", "kind: the node image of every lab (up --image; for example the offline one, make kind-image)")
	cmd.Flags().BoolVar(&f.Keep, "keep", false, "leave every lab up")
	cmd.Flags().BoolVar(&f.KeepOnFailure, "keep-on-failure", false, "leave up the labs where a check failed or a step could not run")
	cmd.Flags().StringVar(&f.JUnit, "junit", "", "also write JUnit XML to this file")
	cmd.Flags().StringVarP(&f.Output, "output", "o", "table", "table or json")
	cmd.Flags().IntVar(&f.Parallel, "parallel", 1, "labs to run at once (each lab is 4 processes or so; mind the cores)")
	cmd.Flags().BoolVar(&f.Explain, "explain", false, "walk the lesson: each step's command, its output and what to notice")
	cmd.Flags().BoolVar(&f.NoPause, "no-pause", false, "with --explain: do not wait for Enter between steps")
	cmd.Flags().StringVar(&f.LabPrefix, "lab-prefix", "scn", "start of every lab's name")
	cmd.Flags().BoolVar(&f.LabPerLesson, "lab-per-lesson", false, "a fresh lab for every scenario on every dataplane, none shared")
	cmd.Flags().StringVar(&f.Lab, "lab", "", "run on this lab, which stays up: what each scenario makes is deleted after it")
	return cmd
}

func runE(cmd *cobra.Command, f *runFlags, streams lab.Streams, args []string) error {
	format, err := render.ParseFormat(f.Output, render.Table, render.JSON)
	if err != nil {
		return err
	}
	var dps []string
	if f.Dataplane != "all" {
		for _, d := range strings.Split(f.Dataplane, ",") {
			if !slices.Contains(scenarios.Dataplanes(), d) {
				return fmt.Errorf("--dataplane %q: want all or a list of %s", d, strings.Join(scenarios.Dataplanes(), ", "))
			}
			dps = append(dps, d)
		}
	}
	if f.Parallel < 1 || f.Parallel > MaxParallel {
		return fmt.Errorf("--parallel %d: run 1 to %d labs at a time", f.Parallel, MaxParallel)
	}
	if f.Explain && f.Parallel > 1 {
		return fmt.Errorf("--explain walks one lab at a time: leave out --parallel")
	}
	if f.Provider != "" && f.Provider != "kind" && f.Provider != "netns" {
		return fmt.Errorf("--provider %q: want kind or netns", f.Provider)
	}
	if f.Image != "" && f.Provider != "kind" {
		return fmt.Errorf("--image is a kind node image: give --provider kind too")
	}
	if err := lab.ValidateName(f.LabPrefix + "-x"); err != nil {
		return fmt.Errorf("--lab-prefix %q: %v", f.LabPrefix, err)
	}
	var onLab *lab.Status
	if f.Lab != "" {
		if onLab, err = labToRunOn(cmd, f); err != nil {
			return err
		}
		dps = []string{string(onLab.Dataplane)}
		// The lessons' expectations may name a provider (kind/ebpf): the lab's.
		f.Provider = onLab.Provider
	}
	var list []*scenarios.Scenario
	if len(args) == 0 {
		if list, err = scenarios.Builtin(); err != nil {
			return err
		}
	}
	for _, a := range args {
		s, err := scenarios.Find(a)
		if err != nil {
			return err
		}
		list = append(list, s)
	}
	if onLab != nil {
		if len(args) == 0 { // every shipped scenario: those of the lab's dataplane
			list = slices.DeleteFunc(list, func(s *scenarios.Scenario) bool {
				return !slices.Contains(s.DataplanesOf(), string(onLab.Dataplane))
			})
		}
		for _, s := range list {
			if !slices.Contains(s.DataplanesOf(), string(onLab.Dataplane)) {
				return fmt.Errorf("scenario %s is for %s, not %s (lab %s's dataplane)", s.Metadata.Name, dataplaneList(s.DataplanesOf()), onLab.Dataplane, f.Lab)
			}
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	o := run.Options{Exe: exe, Provider: f.Provider, Image: f.Image, Dataplanes: dps, Keep: f.Keep, KeepOnFailure: f.KeepOnFailure,
		Parallel: f.Parallel, Progress: streams.Err, LabPrefix: f.LabPrefix, LabPerLesson: f.LabPerLesson, Lab: onLab}
	if f.Explain {
		o.Progress = nil
		o.Explain = &run.Explain{Out: streams.Out}
		if file, ok := streams.In.(*os.File); ok && !f.NoPause && term.IsTerminal(int(file.Fd())) {
			in := bufio.NewReader(file)
			o.Explain.Pause = func() error {
				fmt.Fprint(streams.Out, "\n[Enter: next step] ")
				_, err := in.ReadString('\n')
				return err
			}
		}
	}
	report := run.Run(cmd.Context(), list, o)
	if len(report.Cells) == 0 {
		var names []string
		for _, s := range list {
			names = append(names, s.Metadata.Name+" ("+dataplaneList(s.DataplanesOf())+")")
		}
		return fmt.Errorf("nothing to run: no scenario given is for --dataplane %s: %s", f.Dataplane, strings.Join(names, ", "))
	}
	if f.JUnit != "" {
		if err := writeJUnit(f.JUnit, report); err != nil {
			return err
		}
	}
	if format == render.JSON {
		if err := render.WriteData(streams.Out, format, report); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(streams.Out)
		if err := report.Matrix(streams.Out); err != nil {
			return err
		}
	}
	if code := report.ExitCode(); code != 0 {
		return exitCode(code)
	}
	return nil
}

// labToRunOn is the lab of --lab, which must be up; the flags that choose or keep labs do not go with it.
func labToRunOn(cmd *cobra.Command, f *runFlags) (*lab.Status, error) {
	for _, other := range []string{"provider", "image", "keep", "keep-on-failure", "lab-prefix", "lab-per-lesson", "parallel"} {
		if cmd.Flags().Changed(other) {
			return nil, fmt.Errorf("--%s chooses or keeps the labs a run makes: --lab runs on yours, leave it out", other)
		}
	}
	p, err := providers.ForLabFlag(&f.Lab, true)
	if err != nil {
		return nil, err
	}
	st, err := p.Status(cmd.Context(), f.Lab)
	if err != nil {
		return nil, err
	}
	if r, ok := p.(lab.ShapeReader); ok {
		if err := r.ReadShape(cmd.Context(), f.Lab, &st); err != nil {
			return nil, err
		}
	}
	if f.Dataplane != "all" && f.Dataplane != string(st.Dataplane) {
		return nil, fmt.Errorf("--dataplane %s: lab %s is %s", f.Dataplane, f.Lab, st.Dataplane)
	}
	return &st, nil
}

func writeJUnit(path string, r *run.Report) error {
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	suites := r.JUnit()
	if _, err := fh.WriteString(xml.Header); err != nil {
		fh.Close()
		return err
	}
	if err := suites.WriteXML(fh); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}
