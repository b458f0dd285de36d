package netns

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/podserver"
)

// httpGet makes one HTTP request to addr over a new connection opened inside namespace ns. The connection is
// dialled on the namespace's thread (http.Transport would dial on another goroutine, in the wrong namespace),
// and closed after one request, so every call is a new flow through the proxy's load balancing.
func httpGet(ctx context.Context, ns, addr string) (lab.Reply, error) {
	var conn net.Conn
	err := inNamespace(ns, func() error {
		d := net.Dialer{Timeout: 2 * time.Second}
		var err error
		conn, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	if err != nil {
		return lab.Reply{}, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return lab.Reply{}, err
	}
	req.Close = true
	if err := req.Write(conn); err != nil {
		return lab.Reply{}, fmt.Errorf("GET %s: %w", addr, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return lab.Reply{}, fmt.Errorf("GET %s: %w", addr, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	pod, client, err := podserver.ParseReply(resp.Header)
	if err != nil {
		return lab.Reply{}, fmt.Errorf("GET %s: %w", addr, err)
	}
	return lab.Reply{Pod: pod, Client: client}, nil
}
