// Package scenarios holds the lab scenarios k8sguide ships, embedded in the binary.
package scenarios

import (
	_ "embed"
)

// Web is the guide's web/nginx scenario: Deployment web, label app=web, container port 80, 3 replicas.
//
//go:embed web.yaml
var Web []byte
