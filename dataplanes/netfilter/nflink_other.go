//go:build !linux

package netfilter

import "errors"

var errNotLinux = errors.New("nf_tables exists only on Linux")

// KernelTables needs Linux's nf_tables.
func KernelTables() ([]KernelTable, error) { return nil, errNotLinux }

// KernelBaseChains needs Linux's nf_tables.
func KernelBaseChains() ([]KernelChain, error) { return nil, errNotLinux }

// KernelBaseChainsNamed needs Linux's nf_tables.
func KernelBaseChainsNamed([]string) ([]KernelChain, error) { return nil, errNotLinux }
