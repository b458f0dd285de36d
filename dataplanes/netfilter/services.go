package netfilter

import "strconv"

// servicePorts are the names `iptables -L` and `ipvsadm -L` print for ports without -n (getservbyport(3) with
// /etc/services; the IANA names for the ports Kubernetes Services commonly use).
var servicePorts = map[string]uint16{
	"ftp": 21, "ssh": 22, "telnet": 23, "smtp": 25, "domain": 53, "bootps": 67, "bootpc": 68, "http": 80,
	"www": 80, "kerberos": 88, "pop3": 110, "sunrpc": 111, "ntp": 123, "imap": 143, "snmp": 161, "ldap": 389,
	"https": 443, "microsoft-ds": 445, "syslog": 514, "submission": 587, "ldaps": 636, "imaps": 993,
	"pop3s": 995, "socks": 1080, "openvpn": 1194, "ms-sql-s": 1433, "nfs": 2049, "etcd-client": 2379,
	"etcd-server": 2380, "mysql": 3306, "rdp": 3389, "ms-wbt-server": 3389, "postgresql": 5432, "amqp": 5672,
	"x11": 6000, "redis": 6379, "http-alt": 8080, "webcache": 8080, "tproxy": 8081, "sunproxyadmin": 8081,
	"bacula-dir": 9101, "bacula-fd": 9102, "bacula-sd": 9103, "mongodb": 27017, "memcache": 11211,
	"kubelet": 10250, "dns": 53, "domain-s": 853, "sctp-tunneling": 9899, "jetdirect": 9100, "zabbix-agent": 10050,
	"zabbix-trapper": 10051, "git": 9418, "svn": 3690, "xmpp-client": 5222, "sip": 5060, "radius": 1812,
	"hkp": 11371, "gopher": 70, "finger": 79, "irc": 194, "epmd": 4369, "nut": 3493, "iprop": 2121,
	"cfinger": 2003, "tproxy-alt": 8081, "omniorb": 8088, "puppet": 8140, "vault": 8200,
}

// PortNumber reads a port as the tools print it: a number, or a service name (`http`); ok is false for a name
// this table does not know.
func PortNumber(s string) (uint16, bool) {
	if n, err := strconv.ParseUint(s, 10, 16); err == nil {
		return uint16(n), true
	}
	p, ok := servicePorts[s]
	return p, ok
}
