//go:build linux

// Command podnet is the pod network daemon of the offline kind node image (lab/kind/nodeimage/podnet), run by a
// DaemonSet on every node in the place of kindnetd, with kindnetd's environment: HOST_IP, POD_SUBNET and
// CONTROL_PLANE_ENDPOINT (which kind adds, so that the daemon reaches the apiserver before kube-proxy has made
// the kubernetes Service reachable).
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/k8sguide/k8sguide/lab/kind/nodeimage/podnet"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	config, err := rest.InClusterConfig()
	if err != nil {
		return err
	}
	if ep := os.Getenv("CONTROL_PLANE_ENDPOINT"); ep != "" {
		for i := 0; i < 5; i++ {
			if c, err := net.DialTimeout("tcp", ep, time.Second); err == nil {
				c.Close()
				config.Host = "https://" + ep
				break
			}
			time.Sleep(time.Duration(i) * time.Second)
		}
	}
	cs, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	var subnets []string
	for _, s := range strings.Split(os.Getenv("POD_SUBNET"), ",") {
		if s = strings.TrimSpace(s); s != "" {
			subnets = append(subnets, s)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log.Printf("podnet: apiserver %s, node %s, pod subnets %v", config.Host, os.Getenv("HOST_IP"), subnets)
	if err := podnet.Run(ctx, cs, podnet.Options{HostIP: os.Getenv("HOST_IP"), PodSubnets: subnets, Resync: 30 * time.Second}); err != nil {
		return fmt.Errorf("podnet: %w", err)
	}
	return nil
}
