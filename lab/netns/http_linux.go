package netns

import (
	"context"
	"errors"
	"fmt"
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

// httpStatus GETs path from addr inside namespace ns, over a connection dialled there, and fails unless the
// answer is 200 OK.
func httpStatus(ctx context.Context, ns, addr, path string) (int, error) {
	var conn net.Conn
	err := InNamespace(ns, func() error {
		d := net.Dialer{Timeout: 2 * time.Second}
		var err error
		conn, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	used := false
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			if used {
				return nil, errors.New("one request per connection")
			}
			used = true
			return conn, nil
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, fmt.Errorf("%s%s: %s", addr, path, resp.Status)
	}
	return resp.StatusCode, nil
}
