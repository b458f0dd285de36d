package nodecmd

import (
	"context"
	"encoding/json"
	"net/netip"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/podserver"
)

// connect: one HTTP request to --dst from source port --sport; stdout is a trace.Connection as JSON (whether it
// was answered, which pod answered and the client address that pod saw, or the error and the ICMP error that
// reached this namespace's interfaces for it, if one did).

// ConnectArgv is the command line of one request to dst from source port sport (exe: k8sguide's path where it
// runs).
func ConnectArgv(exe, dst string, sport int) []string {
	return []string{exe, Group, "connect", "--dst", dst, "--sport", strconv.Itoa(sport)}
}

// Connect makes the request from wherever run executes (exe is k8sguide's path there). A command that could not
// run at all is a Connection whose Error says why.
func Connect(ctx context.Context, run Exec, exe, dst string, sport int) trace.Connection {
	var out, errb strings.Builder
	err := run(ctx, ConnectArgv(exe, dst, sport), lab.Streams{Out: &out, Err: &errb})
	var c trace.Connection
	if jerr := json.Unmarshal([]byte(out.String()), &c); jerr != nil {
		if err == nil {
			err = jerr
		}
		return trace.Connection{Error: failure(errb.String(), err).Error()}
	}
	return c
}

func connectCommand(streams lab.Streams) *cobra.Command {
	var dst string
	var sport int
	cmd := &cobra.Command{
		Use:  "connect",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			done := func(bool) string { return "" }
			if ap, err := netip.ParseAddrPort(dst); err == nil && sport >= 0 && sport <= 65535 {
				done = watchUnreachable(ap, uint16(sport))
			}
			pod, client, err := podserver.Get(cmd.Context(), dst, sport)
			unreachable := done(err != nil)
			c := trace.Connection{Answered: err == nil, Pod: pod, Client: client}
			if err != nil {
				c.Error, c.Unreachable = err.Error(), unreachable
			}
			return json.NewEncoder(streams.Out).Encode(c)
		},
	}
	cmd.Flags().StringVar(&dst, "dst", "", "destination IP:PORT")
	cmd.Flags().IntVar(&sport, "sport", 0, "source port")
	return cmd
}
