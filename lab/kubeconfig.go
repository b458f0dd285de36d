package lab

import (
	"errors"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeconfigPath is where kind writes a cluster's kubeconfig, and where a netns lab writes its context too:
// --kubeconfig, else the first file of $KUBECONFIG, else ~/.kube/config (kind's own rule).
func KubeconfigPath(explicit string) string {
	if explicit != "" {
		return explicit
	}
	if env := os.Getenv("KUBECONFIG"); env != "" {
		for _, p := range filepath.SplitList(env) {
			if p != "" {
				return p
			}
		}
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(".kube", "config")
	}
	return filepath.Join(home, ".kube", "config")
}

// MergeKubeconfig adds the one context of config to the kubeconfig file at path under the name context (its
// cluster and user take the same name, as kind names all three kind-NAME) and makes it the current context, as
// kind does. Entries of other names are kept.
func MergeKubeconfig(path, context string, config *clientcmdapi.Config) error {
	cur, ok := config.Contexts[config.CurrentContext]
	if !ok {
		return errors.New("kubeconfig without a current context")
	}
	into, err := loadKubeconfig(path)
	if err != nil {
		return err
	}
	into.Clusters[context] = config.Clusters[cur.Cluster]
	into.AuthInfos[context] = config.AuthInfos[cur.AuthInfo]
	into.Contexts[context] = &clientcmdapi.Context{Cluster: context, AuthInfo: context}
	into.CurrentContext = context
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*into, path)
}

// RemoveKubeconfig removes what MergeKubeconfig added (and the current context if it was that one), as `kind
// delete cluster` does. A file without it is left as it is.
func RemoveKubeconfig(path, context string) error {
	into, err := loadKubeconfig(path)
	if err != nil || into.Contexts[context] == nil {
		return err
	}
	delete(into.Clusters, context)
	delete(into.AuthInfos, context)
	delete(into.Contexts, context)
	if into.CurrentContext == context {
		into.CurrentContext = ""
	}
	return clientcmd.WriteToFile(*into, path)
}

func loadKubeconfig(path string) (*clientcmdapi.Config, error) {
	c, err := clientcmd.LoadFromFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return clientcmdapi.NewConfig(), nil
	}
	return c, err
}
