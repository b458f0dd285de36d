package netns

import (
	"context"
	"net"
	"time"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/podserver"
)

// httpGet makes one HTTP request to addr over a new connection opened inside namespace ns. The connection is
// dialled on the namespace's thread (http.Transport would dial on another goroutine, in the wrong namespace),
// and closed after one request, so every call is a new flow through the proxy's load balancing.
func httpGet(ctx context.Context, ns, addr string) (lab.Reply, error) {
	var conn net.Conn
	err := InNamespace(ns, func() error {
		d := net.Dialer{Timeout: 2 * time.Second}
		var err error
		conn, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
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
