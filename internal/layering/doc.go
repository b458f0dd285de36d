// Package layering holds the test that keeps k8sguide's imports pointing down: cmd/ over inspect/ over lab/ over
// dataplanes/, the offline inspector free of lab providers, Helm, kind and the upstream proxiers.
package layering
