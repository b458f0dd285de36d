// Package scenarios holds the lab scenarios k8sguide ships, embedded in the binary.
package scenarios

import (
	"embed"
)

// Web is the guide's web/nginx scenario: Deployment web, label app=web, container port 80, 3 replicas.
//
//go:embed web.yaml
var Web []byte

// Lessons are the scenarios k8sguide ships, one file per lesson.
//
//go:embed lessons
var Lessons embed.FS
