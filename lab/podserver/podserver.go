// Package podserver is the program a netns lab pod runs in place of its container image: an HTTP server that
// answers like nginx's welcome page and also says which pod answered and which client address it saw, so that
// load balancing and SNAT are visible from the client.
package podserver

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"strings"
	"time"
)

// Response headers carrying what the pod saw; Get reads them.
const (
	HeaderPod    = "X-K8sguide-Pod"
	HeaderClient = "X-K8sguide-Client"
)

const welcome = `<!DOCTYPE html>
<html>
<head>
<title>Welcome to nginx!</title>
</head>
<body>
<h1>Welcome to nginx!</h1>
<p>If you see this page, the nginx web server is successfully installed and
working. Further configuration is required.</p>

<p>pod: %s<br>
node: %s<br>
client: %s</p>
</body>
</html>
`

// Handler answers every request with the welcome page.
func Handler(pod, node string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server", "k8sguide-podserver")
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set(HeaderPod, pod)
		w.Header().Set(HeaderClient, r.RemoteAddr)
		fmt.Fprintf(w, welcome, html.EscapeString(pod), html.EscapeString(node), html.EscapeString(r.RemoteAddr))
	})
}

// Serve answers HTTP on every TCP port and echoes on every UDP port until ctx ends.
func Serve(ctx context.Context, pod, node string, ports, udp []int) error {
	if len(ports)+len(udp) == 0 {
		return errors.New("no ports to serve")
	}
	errc := make(chan error, len(ports)+len(udp))
	for _, port := range udp {
		pc, err := net.ListenPacket("udp", fmt.Sprintf(":%d", port))
		if err != nil {
			return err
		}
		defer pc.Close()
		go func() { errc <- echo(pc, pod) }()
	}
	var servers []*http.Server
	for _, port := range ports {
		ln, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: Handler(pod, node), ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, srv)
		go func() { errc <- srv.Serve(ln) }()
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, s := range servers {
		s.Shutdown(shutdown)
	}
	return nil
}

// echo answers each UDP datagram with "POD CLIENT: " and the datagram, so a UDP client also learns who
// answered and which source address the pod saw.
func echo(pc net.PacketConn, pod string) error {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return http.ErrServerClosed
			}
			return err
		}
		reply := append([]byte(pod+" "+from.String()+": "), buf[:n]...)
		pc.WriteTo(reply, from)
	}
}

// ParseReply reads who answered from a response.
func ParseReply(h http.Header) (pod, client string, err error) {
	pod, client = h.Get(HeaderPod), h.Get(HeaderClient)
	if pod == "" {
		return "", "", fmt.Errorf("the answer did not come from a lab pod (server %q)", strings.TrimSpace(h.Get("Server")))
	}
	return pod, client, nil
}
