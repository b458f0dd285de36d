package netfilter

import "strconv"

// servicePorts maps the service names `ipvsadm -L` and `iptables -L` print (without -n) for the ports Kubernetes Services commonly use back to the
// ports. A name is listed only where the /etc/services files of the nodes' usual distributions agree on it:
// Debian's and Ubuntu's netbase (checked against netbase 6.3), Red Hat's setup package and the IANA registry
// (iana-etc: Arch, Flatcar, SUSE), since whichever file the node had printed it. A name with more than one port
// (IANA names both 8008 and 8080 http-alt, where netbase names only 8080) does not tell the port. A name not
// listed is not guessed.
var servicePorts = map[string][]uint16{
	"ftp":          {21},
	"ssh":          {22},
	"smtp":         {25},
	"domain":       {53},
	"http":         {80},
	"kerberos":     {88},
	"ntp":          {123},
	"ldap":         {389},
	"https":        {443},
	"ldaps":        {636},
	"mqtt":         {1883},
	"etcd-client":  {2379},
	"etcd-server":  {2380},
	"mysql":        {3306},
	"epmd":         {4369},
	"postgresql":   {5432},
	"amqps":        {5671},
	"amqp":         {5672},
	"redis":        {6379},
	"sun-sr-https": {6443}, // IANA's name for the API server's port
	"irdmi":        {8000},
	"http-alt":     {8008, 8080},
	"webcache":     {8080}, // Red Hat's name for 8080
	"tproxy":       {8081},
	"pcsync-https": {8443},
	"secure-mqtt":  {8883},
	"websm":        {9090},
	"bacula-fd":    {9102},
	"wap-wsp":      {9200},
	"memcache":     {11211},
	"mongodb":      {27017},
}

// ServicePorts is the ports a service name printed without -n may stand for: none for a name not listed, more
// than one where the nodes' /etc/services files disagree.
func ServicePorts(name string) []uint16 { return servicePorts[name] }

// PortNumber reads a port as the tools print it: a number, or a service name that tells its port (`http`); ok
// is false for a name not listed or one that names several ports.
func PortNumber(s string) (uint16, bool) {
	if n, err := strconv.ParseUint(s, 10, 16); err == nil {
		return uint16(n), true
	}
	if p := servicePorts[s]; len(p) == 1 {
		return p[0], true
	}
	return 0, false
}
