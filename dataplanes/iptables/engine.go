// Package iptables is the kube-proxy iptables engine: iptables-save dumps and `iptables -L` listings read into
// tables of rules, and the rule-by-rule walk of a packet through them.
package iptables
