package netns

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/podserver"
)

// dialIn opens a TCP connection to addr from inside namespace ns. It is dialled on the namespace's thread
// (http.Transport would dial on another goroutine, in the wrong namespace).
func dialIn(ctx context.Context, ns, addr string) (net.Conn, error) {
	var conn net.Conn
	err := InNamespace(ns, func() error {
		d := net.Dialer{Timeout: 2 * time.Second}
		var err error
		conn, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	return conn, err
}

// httpGet makes one HTTP request to addr over a new connection opened inside namespace ns, closed after one
// request, so every call is a new flow through the proxy's load balancing.
func httpGet(ctx context.Context, ns, addr string) (lab.Reply, error) {
	conn, err := dialIn(ctx, ns, addr)
	if err != nil {
		return lab.Reply{}, err
	}
	defer conn.Close()
	pod, client, err := podserver.Exchange(ctx, conn, addr)
	if err != nil {
		return lab.Reply{}, err
	}
	return lab.Reply{Pod: pod, Client: client}, nil
}

// httpOK GETs path from addr inside namespace ns and fails unless the answer is 200 OK.
func httpOK(ctx context.Context, ns, addr, path string) error {
	conn, err := dialIn(ctx, ns, addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := podserver.GetOver(ctx, conn, addr, path)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s%s: %s", addr, path, resp.Status)
	}
	return nil
}
