package podserver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Get makes one HTTP request to addr from local port sport (0: any) and returns the pod that answered and
// the client address it saw. A refused or timed-out connection is an error that says so.
func Get(ctx context.Context, addr string, sport int) (pod, client string, err error) {
	d := net.Dialer{Timeout: 3 * time.Second}
	if sport != 0 {
		d.LocalAddr = &net.TCPAddr{Port: sport}
	}
	conn, err := d.DialContext(ctx, "tcp4", addr)
	if err != nil {
		return "", "", err
	}
	defer conn.Close()
	return Exchange(ctx, conn, addr)
}

// Exchange sends one GET over conn, asking the server to close the connection after it (so the next request
// is a new flow), and returns the pod that answered and the client address it saw.
func Exchange(ctx context.Context, conn net.Conn, addr string) (pod, client string, err error) {
	resp, err := GetOver(ctx, conn, addr, "/")
	if err != nil {
		return "", "", err
	}
	if pod, client, err = ParseReply(resp.Header); err != nil {
		return "", "", fmt.Errorf("GET %s: %w", addr, err)
	}
	return pod, client, nil
}

// GetOver sends one GET for path over conn (to addr, for the Host header), asking the server to close the
// connection after it, and returns the response with its body read and closed. Callers dial conn themselves:
// where (in which network namespace) is theirs to choose.
func GetOver(ctx context.Context, conn net.Conn, addr, path string) (*http.Response, error) {
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return nil, err
	}
	req.Close = true
	if err := req.Write(conn); err != nil {
		return nil, fmt.Errorf("GET %s: %w", addr, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", addr, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, nil
}
