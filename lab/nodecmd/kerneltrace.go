package nodecmd

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/lab"
)

// kernel-trace: the kernel's rule trace of one flow in the node it runs in. It prints READY once the kernel's
// events are being read, waits until its stdin closes (the caller's connection is done), then prints the event
// lines as one JSON array of strings. The tracing table is removed on every way out, Ctrl-C included.

// kernelTraceLimit ends a trace whose caller never closed stdin.
const kernelTraceLimit = 60 * time.Second

// KernelTrace is a running kernel-trace command, from READY to its events.
type KernelTrace struct {
	stdin  *os.File
	stdout *os.File
	out    *bufio.Reader
	stderr *strings.Builder
	done   chan error
}

// StartKernelTrace starts kernel-trace for flow f with run (exe is k8sguide's path in the node) and returns once
// it said READY: from then on the kernel reports every packet of the flow. engine is the monitor to read
// (iptables or nftables). The caller makes its connection, then calls Events.
func StartKernelTrace(ctx context.Context, run Exec, exe, engine string, f trace.Flow) (*KernelTrace, error) {
	argv := []string{exe, Group, "kernel-trace", "--engine", engine, "--dst", netip.AddrPortFrom(f.Dst, f.Dport).String(),
		"--sport", strconv.Itoa(int(f.Sport))}
	if f.Src.IsValid() {
		argv = append(argv, "--src", f.Src.String())
	}
	// Real pipes, not io.Pipe: exec then hands the descriptors to the child and has no copying goroutine that
	// could keep run waiting on our side of stdin.
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return nil, err
	}
	k := &KernelTrace{stdin: stdinW, stdout: stdoutR, out: bufio.NewReader(stdoutR), stderr: &strings.Builder{}, done: make(chan error, 1)}
	go func() {
		err := run(ctx, argv, lab.Streams{In: stdinR, Out: stdoutW, Err: k.stderr})
		stdinR.Close()
		stdoutW.Close()
		k.done <- err
	}()
	line, rerr := k.out.ReadString('\n')
	if strings.TrimSpace(line) == "READY" {
		return k, nil
	}
	k.stdin.Close()
	err = <-k.done
	k.stdout.Close()
	if err == nil {
		err = rerr
	}
	if err == nil {
		err = fmt.Errorf("it said %q, not READY", strings.TrimSpace(line))
	}
	return nil, failure(k.stderr.String(), err)
}

// Events ends the trace (closes its stdin) and returns the kernel's event lines for the flow.
func (k *KernelTrace) Events() ([]string, error) {
	k.stdin.Close()
	defer k.stdout.Close()
	rest, _ := io.ReadAll(k.out)
	if err := <-k.done; err != nil {
		return nil, failure(k.stderr.String(), err)
	}
	var lines []string
	if err := json.Unmarshal(rest, &lines); err != nil {
		return nil, fmt.Errorf("unreadable events: %v", err)
	}
	return lines, nil
}

func kernelTraceCommand(streams lab.Streams, start func(ctx context.Context, engine string, f trace.Flow) (func() ([]string, error), error)) *cobra.Command {
	var engine, dst, src string
	var sport int
	cmd := &cobra.Command{
		Use:  "kernel-trace",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if start == nil {
				return fmt.Errorf("this k8sguide has no kernel tracer")
			}
			d, err := trace.ParseDst(dst)
			if err != nil {
				return fmt.Errorf("--dst %v", err)
			}
			f := trace.Flow{Dst: d.Addr(), Dport: d.Port(), Sport: uint16(sport), Proto: "tcp"}
			if src != "" {
				if f.Src, _, err = trace.ParseSrc(src); err != nil {
					return fmt.Errorf("--src %v", err)
				}
			}
			ctx := cmd.Context()
			stop, err := start(ctx, engine, f)
			if err != nil {
				return err
			}
			fmt.Fprintln(streams.Out, "READY")
			closed := make(chan struct{})
			go func() {
				io.Copy(io.Discard, streams.In)
				close(closed)
			}()
			select {
			case <-closed:
			case <-ctx.Done():
			case <-time.After(kernelTraceLimit):
			}
			lines, err := stop()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				return err
			}
			return json.NewEncoder(streams.Out).Encode(lines)
		},
	}
	cmd.Flags().StringVar(&engine, "engine", "nftables", "iptables or nftables")
	cmd.Flags().StringVar(&dst, "dst", "", "destination IP:PORT")
	cmd.Flags().StringVar(&src, "src", "", "source IP (empty: any)")
	cmd.Flags().IntVar(&sport, "sport", 0, "source port")
	return cmd
}
