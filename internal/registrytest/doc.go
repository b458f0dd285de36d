// Package registrytest holds the test that adds a fifth dataplane to the registry (dataplanes/engines) and takes
// it through the product: the registry is the one place a dataplane is named, and this is its proof.
package registrytest
