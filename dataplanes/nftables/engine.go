// Package nftables is the kube-proxy nftables engine: the nft language (model, `nft -j` and text parsers,
// printer), and the walk of a packet through a ruleset's base chains, verdict maps and sets.
package nftables
