// Package doctor implements `k8sguide doctor`.
package doctor

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/k8sguide/k8sguide/inspect/render"
	"github.com/k8sguide/k8sguide/lab"
	labdoctor "github.com/k8sguide/k8sguide/lab/doctor"
	"github.com/k8sguide/k8sguide/lab/providers"
)

type flags struct {
	Provider   string
	Dataplanes []string
	Quick      bool
	Fix        bool
	Output     string
}

// NewCommand returns the doctor command.
func NewCommand(streams lab.Streams) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check that this host can run labs: kernel features, tools, limits, permissions, Docker",
		Long: "Checks what each provider and dataplane needs of this host, and says for each need pass, warn or\n" +
			"fail, what was found and how to fix it. `up` runs the quick checks of its own provider and dataplane\n" +
			"first. As root, doctor also loads rules like kube-proxy's in a network namespace of its own, which it\n" +
			"removes. Exit status 1 when a check fails.",
		Example: "  k8sguide doctor\n" +
			"  k8sguide doctor --provider all -o json\n" +
			"  sudo k8sguide doctor --fix",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runE(cmd, f, streams)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Provider, "provider", providers.Default(), "provider to check: "+strings.Join(providers.Names, ", ")+", or all (auto: the one up would use)")
	fl.StringSliceVar(&f.Dataplanes, "dataplane", nil, "dataplanes to check (default: all of "+engines.List()+")")
	fl.BoolVar(&f.Quick, "quick", false, "only what up checks: no rules loaded, no namespace made")
	fl.BoolVar(&f.Fix, "fix", false, fmt.Sprintf("raise fs.inotify.max_user_instances to %d (or room for 3 more labs) first, if lower (root; until reboot)", labdoctor.RaiseInotifyTo))
	fl.StringVarP(&f.Output, "output", "o", "table", "table or json")
	return cmd
}

func runE(cmd *cobra.Command, f *flags, streams lab.Streams) error {
	format, err := render.ParseFormat(f.Output, render.Table, render.JSON)
	if err != nil {
		return err
	}
	ds := engines.Names()
	if len(f.Dataplanes) > 0 {
		ds = nil
		for _, s := range f.Dataplanes {
			d, err := engines.Parse(s)
			if err != nil {
				return err
			}
			ds = append(ds, d)
		}
	}
	if f.Fix {
		if os.Geteuid() != 0 {
			return fmt.Errorf("--fix changes a host setting (fs.inotify.max_user_instances): run it as root, e.g. with sudo")
		}
		// The limit the check's fix names: 512, or room for three more labs where more are in use already.
		target := labdoctor.RaiseInotifyTo
		if in, err := labdoctor.ReadInotify("/proc", 0); err == nil {
			target = labdoctor.InotifyTarget(in, labdoctor.InotifyPerLab)
		}
		from, err := labdoctor.RaiseInotify("/proc", target)
		if err != nil {
			return fmt.Errorf("raising fs.inotify.max_user_instances: %w", err)
		}
		if from < target {
			fmt.Fprintf(streams.Err, "Raised fs.inotify.max_user_instances from %d to %d (until reboot; put it in /etc/sysctl.d/ to keep it).\n", from, target)
		}
	}
	provider := f.Provider
	if provider != "all" {
		chosen, why, err := providers.Choose(cmd.Context(), provider)
		if err != nil {
			return fmt.Errorf("unknown provider %q (want %s or all)", provider, strings.Join(providers.Names, ", "))
		}
		if why != "" && format == render.Table {
			fmt.Fprintln(streams.Err, why)
		}
		provider = chosen
	}
	report := providers.Doctor(cmd.Context(), provider, ds, !f.Quick)
	if format == render.JSON {
		if err := render.WriteData(streams.Out, render.JSON, report); err != nil {
			return err
		}
	} else if err := render.WriteDoctor(streams.Out, render.Width(streams.Out), report); err != nil {
		return err
	}
	if n := len(report.Failed()); n > 0 {
		return fmt.Errorf("%d of %d checks failed (above)", n, len(report.Checks))
	}
	return nil
}
