// Command k8sguide builds Kubernetes Service networking labs and explains how packets travel through them.
package main

import (
	"os"

	"github.com/k8sguide/k8sguide/cmd/k8sguide/app"
)

func main() {
	os.Exit(app.Run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
