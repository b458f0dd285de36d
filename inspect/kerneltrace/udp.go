package kerneltrace

import (
	"net"
	"strconv"
)

// netDialUDP opens a UDP socket to the marker address 127.0.0.9:port.
func netDialUDP(port int) (net.Conn, error) {
	return net.Dial("udp4", net.JoinHostPort("127.0.0.9", strconv.Itoa(port)))
}
